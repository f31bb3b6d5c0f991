/* Devices: the host map, GPU numbering and device snapshots (hostmap.c). */
#ifndef PV_HOSTMAP_H
#define PV_HOSTMAP_H

#include <stdatomic.h>

#include "pv_base.h"

struct pv_conn;

struct pv_device {
    struct pv_conn *conn;
    int remote;                    /* daemon-local ordinal */
    int index;                     /* global ordinal */
    char name[256];
    unsigned char uuid[16];
    uint64_t total_mem;
    int major, minor, sms, warp, max_tpb, max_block[3], max_grid[3], regs_per_block, clock_khz, mem_clock_khz,
        bus_width, l2, max_tpm, regs_per_sm, max_blocks_per_sm, pci_bus;
    uint64_t smem_per_block, smem_per_sm, const_mem;
    int have_attr[PV_MAX_ATTRS];
    int attr[PV_MAX_ATTRS];
    int flags;                     /* cudaSetDeviceFlags value */
    char pci_id[64];               /* "dddd:bb:dd.f" */
    int cache_config;
    uint64_t peers;                /* bit r: kernels here can use the memory of this daemon's device r (snapshot) */
    uint64_t vmm_granularity;      /* virtual memory management's granularity (snapshot; 0: not offered) */
    _Atomic unsigned reset_gen;    /* device resets so far: what a library kept of the device before one is gone */
    _Atomic int refused;           /* a refused module's kernel was used: every synchronization reports it */
    _Atomic uint64_t sent;         /* requests begun to this device (request.c) */
    _Atomic uint64_t quiet_at;     /* `sent` when a blocking copy on stream quiet_stream finished with no other
                                      request begun meanwhile: that stream had no work left (copy.c, streams.c) */
    _Atomic uint64_t quiet_stream;
};
cudaError_t pv_init(void);                  /* connect to all hosts once; error if none reachable */
int pv_initialized(void);                   /* pv_init has succeeded (no side effect) */
int pv_device_count(void);
struct pv_device *pv_device(int index);     /* NULL when out of range */
cudaError_t pv_cur(struct pv_device **out); /* init + current device */
int pv_dev_attr(const struct pv_device *d, int attr, int *value);
/* cudaDeviceGetAttribute's answer (CU_DEVICE_ATTRIBUTE_* has the same numbers): invalid attribute →
 * cudaErrorInvalidValue; a valid one the snapshot lacks → 0 (logged once when log_missing). */
cudaError_t pv_device_attribute(const struct pv_device *d, int attr, int *value, int log_missing);

#endif
