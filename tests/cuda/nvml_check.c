// libvnvml (libnvidia-ml.so.1) against the daemons: device count, names, UUIDs (handles by UUID and by PCI bus id),
// compute capability, memory that follows an allocation made through libvcuda, utilization while kernels run, and
// NVML_ERROR_NOT_SUPPORTED for the rest. Built against NVIDIA's nvml.h (the nvidia-nvml-dev wheel) as programs are:
// its macros give the current ABIs (nvmlInit -> nvmlInit_v2, ...) and its struct layouts are the ones checked.
// Usage: nvml_check PTX_FILE NGPUS. Prints "OK <checks>".
#include <nvml.h>
#include <string.h>
#include <time.h>

#include "drv_check.h"

#define NCHECK(call)                                                                                   \
    do {                                                                                               \
        nvmlReturn_t r_ = (call);                                                                      \
        if (r_ != NVML_SUCCESS) {                                                                      \
            printf("FAIL %s:%d %s -> %d %s\n", __FILE__, __LINE__, #call, r_, nvmlErrorString(r_));    \
            fflush(stdout);                                                                            \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        printf("usage: %s PTX_FILE NGPUS\n", argv[0]);
        return 2;
    }
    unsigned want = (unsigned)atoi(argv[2]), n = 0;
    DEXPECT(nvmlDeviceGetCount(&n) == NVML_ERROR_UNINITIALIZED);
    NCHECK(nvmlInit());
    NCHECK(nvmlDeviceGetCount(&n));
    OKC(n == want);
    char ver[80];
    NCHECK(nvmlSystemGetDriverVersion(ver, sizeof ver));
    OKC(atoi(ver) >= 580);                             // a CUDA 13 driver branch
    DCHECK(cuInit(0));
    int cn = 0;
    DCHECK(cuDeviceGetCount(&cn));
    OKC((unsigned)cn == n);                            // the CUDA libraries' numbering
    char uuids[16][96];
    for (unsigned i = 0; i < n && i < 16; i++) {
        nvmlDevice_t h, again;
        char name[96], cname[96];
        NCHECK(nvmlDeviceGetHandleByIndex(i, &h));
        NCHECK(nvmlDeviceGetName(h, name, sizeof name));
        DCHECK(cuDeviceGetName(cname, sizeof cname, (CUdevice)i));
        OKC(strcmp(name, cname) == 0);
        NCHECK(nvmlDeviceGetUUID(h, uuids[i], sizeof uuids[i]));
        CUuuid cu;
        DCHECK(cuDeviceGetUuid(&cu, (CUdevice)i));
        char expect[16];
        snprintf(expect, sizeof expect, "GPU-%02x%02x%02x%02x", (unsigned char)cu.bytes[0],
                 (unsigned char)cu.bytes[1], (unsigned char)cu.bytes[2], (unsigned char)cu.bytes[3]);
        OKC(strlen(uuids[i]) == 40 && strncmp(uuids[i], expect, 12) == 0);
        for (unsigned j = 0; j < i; j++)
            OKC(strcmp(uuids[i], uuids[j]) != 0);
        NCHECK(nvmlDeviceGetHandleByUUID(uuids[i], &again));
        OKC(again == h);
        nvmlPciInfo_t pci;
        NCHECK(nvmlDeviceGetPciInfo(h, &pci));
        char cbus[32];
        DCHECK(cuDeviceGetPCIBusId(cbus, sizeof cbus, (CUdevice)i));
        OKC(strncasecmp(cbus, pci.busIdLegacy, 12) == 0);
        // GPUs of two hosts may share a bus id (each is its host's): the first GPU with it answers
        nvmlPciInfo_t found;
        NCHECK(nvmlDeviceGetHandleByPciBusId(pci.busId, &again));
        NCHECK(nvmlDeviceGetPciInfo(again, &found));
        unsigned first = i;
        for (unsigned j = 0; j < i; j++) {
            char other[32];
            DCHECK(cuDeviceGetPCIBusId(other, sizeof other, (CUdevice)j));
            if (first == i && strcasecmp(other, cbus) == 0)
                first = j;
        }
        unsigned found_index;
        NCHECK(nvmlDeviceGetIndex(again, &found_index));
        OKC(strcmp(found.busId, pci.busId) == 0 && found_index == first);
        int major, minor, cmajor, cminor;
        NCHECK(nvmlDeviceGetCudaComputeCapability(h, &major, &minor));
        DCHECK(cuDeviceGetAttribute(&cmajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, (CUdevice)i));
        DCHECK(cuDeviceGetAttribute(&cminor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, (CUdevice)i));
        unsigned index;
        NCHECK(nvmlDeviceGetIndex(h, &index));
        OKC(major == cmajor && minor == cminor && index == i);
    }

    // memory in use follows an allocation made through the driver
    nvmlDevice_t h0;
    NCHECK(nvmlDeviceGetHandleByIndex(0, &h0));
    nvmlMemory_t before, after;
    NCHECK(nvmlDeviceGetMemoryInfo(h0, &before));
    size_t total = 0;
    DCHECK(cuDeviceTotalMem(&total, 0));
    OKC(before.total == total && before.used + before.free == before.total);
    nvmlMemory_v2_t v2 = { .version = nvmlMemory_v2 };           // the versioned struct of newer programs
    NCHECK(nvmlDeviceGetMemoryInfo_v2(h0, &v2));
    OKC(v2.total == total && v2.reserved + v2.free + v2.used == v2.total);
    CUcontext ctx;
    DCHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    DCHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr p;
    DCHECK(cuMemAlloc(&p, 64 << 20));
    NCHECK(nvmlDeviceGetMemoryInfo(h0, &after));
    OKC(after.used >= before.used + (64 << 20) && after.free + (64 << 20) <= before.free);

    // utilization while kernels keep the device busy
    size_t len;
    char *ptx = drv_read_file(argv[1], &len);
    CUmodule mod;
    CUfunction scale;
    DCHECK(cuModuleLoadData(&mod, ptx));
    DCHECK(cuModuleGetFunction(&scale, mod, "scale"));
    float k = 1.0f;
    int elems = 1 << 20;
    void *args[] = { &p, &k, &elems };
    nvmlUtilization_t util = { 0, 0 };
    for (double t0 = now(); now() - t0 < 0.8;) {
        DCHECK(cuLaunchKernel(scale, elems / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        DCHECK(cuCtxSynchronize());
    }
    NCHECK(nvmlDeviceGetUtilizationRates(h0, &util));
    OKC(util.gpu > 0 && util.gpu <= 100);
    unsigned temp;
    DEXPECT(nvmlDeviceGetTemperature(h0, NVML_TEMPERATURE_GPU, &temp) == NVML_ERROR_NOT_SUPPORTED);
    checks++;
    DCHECK(cuMemFree(p));
    DCHECK(cuModuleUnload(mod));
    NCHECK(nvmlShutdown());
    DEXPECT(nvmlDeviceGetCount(&n) == NVML_ERROR_UNINITIALIZED);
    checks++;
    free(ptx);
    printf("OK %ld\n", checks);
    return 0;
}
