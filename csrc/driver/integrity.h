/* The answer NVIDIA's runtime expects from slot 1 of export table d4082055-bde6-704b-8d34-ba123c66e1f2
 * (docs/driver.md). Self-contained (no core headers) so tools/driver_probe builds it too. */
#ifndef PV_INTEGRITY_H
#define PV_INTEGRITY_H
#include <stdint.h>

#define PV_INTEGRITY_MAX_DEVICES 64

struct pv_integrity_device {
    uint8_t uuid[16];
    uint32_t pci_domain, pci_bus, pci_device;
};

struct pv_integrity_input {
    uint32_t driver_version, runtime_version, pid, tid;
    const void *cudart_table, *integrity_table, *fn;
    uint64_t timestamp;
    unsigned ndevices;
    struct pv_integrity_device devices[PV_INTEGRITY_MAX_DEVICES];
};

void pv_integrity_answer(const struct pv_integrity_input *in, uint8_t out[16]);
#endif
