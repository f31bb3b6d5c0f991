/* libvnvml's declarations: the few NVML types it answers with (ABI-compatible with nvml.h; no NVIDIA header is
 * needed to build it) on top of the client core. */
#ifndef PV_VNVML_H
#define PV_VNVML_H

#include "pv_core.h"

typedef int nvmlReturn_t;
enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
       NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9,
       NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25, NVML_ERROR_UNKNOWN = 999 };

typedef struct pv_nvml_dev *nvmlDevice_t;
typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; }
    nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
/* nvml.h's NVML_STRUCT_VERSION(Memory, 2): the struct's size with the version in the top byte */
#define PV_NVML_MEMORY_V2 ((unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

nvmlReturn_t pv_nvml_unsupported(const char *name, atomic_int *once);   /* the generated stubs' answer */

#endif
