/* A device's memory and busy share from its daemon's STATUS (usage.c). */
#ifndef PV_USAGE_H
#define PV_USAGE_H

#include "pv_base.h"

struct pv_device;

/* usage.c: a device's figures from its daemon's STATUS (every session's use, not only this process's). */
struct pv_usage { uint64_t used, total, free; double busy; /* share of the last second it ran work, 0..1 */ };
cudaError_t pv_device_usage(struct pv_device *d, struct pv_usage *out);

#endif
