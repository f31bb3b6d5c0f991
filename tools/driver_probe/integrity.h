#ifndef INTEGRITY_H
#define INTEGRITY_H
#include <stdint.h>

#define INTEGRITY_MAX_DEVICES 64

struct integrity_device {
    uint8_t uuid[16];
    uint32_t pci_domain, pci_bus, pci_device;
};

struct integrity_input {
    uint32_t driver_version, runtime_version, pid, tid;
    const void *cudart_table, *integrity_table, *fn;
    uint64_t timestamp;
    unsigned ndevices;
    struct integrity_device devices[INTEGRITY_MAX_DEVICES];
};

/* The 16 bytes the runtime expects from slot 1 of export table d4082055-bde6-704b-8d34-ba123c66e1f2. */
void integrity_answer(const struct integrity_input *in, uint8_t out[16]);
#endif
