// Device memory whose addresses also hold host memory of the program: a GPU host's driver may place device memory
// where the client process has its own memory (GPU run 3 on an H100: the daemon's window refused, ranges at
// 0x7efa..., JAX's pool of device memory spanning the client's pinned host buffers; JAX's memsets then answered
// CUDA_ERROR_INVALID_VALUE). Here the same layout is made on purpose: pinned host memory (cuMemHostAlloc) inside a
// device range reserved at a hint around it (cuMemAddressReserve, mapped and made accessible). Memsets, copies and a
// kernel on the device memory below and above the host memory must still work, byte for byte, and the host memory
// stays the program's. Usage: drv_addr_overlap PTX_FILE. Prints "OK <checks>" (or "SKIP <why>" where the daemon
// does not place the range at the hint: a real GPU's driver may not).
#include <string.h>

#include "drv_check.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("usage: drv_addr_overlap PTX_FILE\n");
        return 2;
    }
    CUdevice dev = drv_primary_current();
    const size_t page = 4096;
    char *host;
    DCHECK(cuMemHostAlloc((void **)&host, page, 0));
    memset(host, 0x5a, page);

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    DCHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    const size_t size = 4 * gran;
    CUdeviceptr hint = ((CUdeviceptr)(uintptr_t)host / gran - 1) * gran, d;
    DCHECK(cuMemAddressReserve(&d, size, gran, hint, 0));
    if (d != hint) {
        printf("SKIP the device range went to %#llx, not to %#llx\n", (unsigned long long)d, (unsigned long long)hint);
        return 0;
    }
    CUmemGenericAllocationHandle h;
    DCHECK(cuMemCreate(&h, size, &prop, 0));
    DCHECK(cuMemMap(d, size, 0, h, 0));
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DCHECK(cuMemSetAccess(d, size, &access, 1));
    OKC(d < (CUdeviceptr)(uintptr_t)host && (CUdeviceptr)(uintptr_t)host + page < d + size);

    CUstream s;
    DCHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const size_t words = 1024;
    CUdeviceptr below = d + 4096, above = (CUdeviceptr)(uintptr_t)host + 2 * page;   // above: past the host memory
    unsigned *back = malloc(words * sizeof *back);
    DCHECK(cuMemsetD32Async(below, 0x11111111u, words, s));
    DCHECK(cuMemsetD32Async(above, 0x22222222u, words, s));
    DCHECK(cuMemsetD8Async(above + words * 4, 0x33, 64, s));
    DCHECK(cuStreamSynchronize(s));
    DCHECK(cuMemcpyDtoH(back, above, words * sizeof *back));
    int same = 1;
    for (size_t i = 0; i < words; i++)
        same &= back[i] == 0x22222222u;
    OKC(same);
    DCHECK(cuMemcpyDtoH(back, below, words * sizeof *back));
    same = 1;
    for (size_t i = 0; i < words; i++)
        same &= back[i] == 0x11111111u;
    OKC(same);
    unsigned char tail[64];
    DCHECK(cuMemcpyDtoH(tail, above + words * 4, sizeof tail));
    OKC(tail[0] == 0x33 && tail[63] == 0x33);

    // a kernel on the device memory above the host memory: scale(p, 2.0, n) doubles n floats
    CUmodule mod;
    DCHECK(cuModuleLoad(&mod, argv[1]));
    CUfunction scale;
    DCHECK(cuModuleGetFunction(&scale, mod, "scale"));
    float *f = malloc(words * sizeof *f);
    for (size_t i = 0; i < words; i++)
        f[i] = (float)i;
    DCHECK(cuMemcpyHtoD(above, f, words * sizeof *f));
    float factor = 2.0f;
    int n = (int)words;
    void *params[] = { &above, &factor, &n };
    DCHECK(cuLaunchKernel(scale, (unsigned)(words + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
    DCHECK(cuMemcpyDtoH(f, above, words * sizeof *f));
    same = 1;
    for (size_t i = 0; i < words; i++)
        same &= f[i] == 2.0f * (float)i;
    OKC(same);
    OKC(host[0] == 0x5a && host[page - 1] == 0x5a);                 // the host memory is untouched

    DCHECK(cuStreamDestroy(s));
    DCHECK(cuMemUnmap(d, size));
    DCHECK(cuMemRelease(h));
    DCHECK(cuMemAddressFree(d, size));
    DCHECK(cuMemFreeHost(host));
    DCHECK(cuDevicePrimaryCtxRelease(dev));
    printf("OK %ld\n", checks);
    return 0;
}
