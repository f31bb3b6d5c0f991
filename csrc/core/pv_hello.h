/* The hello's sharing keys (hello.c). */
#ifndef PV_HELLO_H
#define PV_HELLO_H

#include "pv_base.h"

/* hello.c: the hello's sharing keys (pid, host name, PYVGPU_MEMORY, PYVGPU_WEIGHT, PYVGPU_LEASES). */
struct pv_hello_extra {
    uint64_t pid;
    char hostname[128];
    uint64_t memory;               /* 0: no request */
    double weight;                 /* 0: the default */
    const char *leases;            /* PYVGPU_LEASES (the environment's string), NULL: none */
};
void pv_hello_extra_read(struct pv_hello_extra *x);
int pv_hello_extra_count(const struct pv_hello_extra *x);              /* map entries pv_hello_extra_pack adds */
void pv_hello_extra_pack(msgpack_packer *pk, const struct pv_hello_extra *x);

#endif
