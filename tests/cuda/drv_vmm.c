// Virtual memory management as NVIDIA's samples use it (CUDA 13.0 headers): a context from a zero-initialised
// CUctxCreateParams, the allocation granularity, an address range reserved, physical memory created and mapped into
// it, access granted, then used by kernels and copies; one allocation mapped at two addresses (the same bytes),
// handles retained and released, and CUDA's error codes of the mistakes (unmapping part of a mapping, freeing a
// reservation that still holds mappings, cuMemFree of mapped memory, mapping over a mapping, sizes off the
// granularity, a released handle). Usage: drv_vmm PTX_FILE. Prints "OK <checks>" on success.
#include <string.h>

#include "drv_check.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("usage: drv_vmm PTX_FILE\n");
        return 2;
    }
    DCHECK(cuInit(0));
    CUdevice dev;
    DCHECK(cuDeviceGet(&dev, 0));
    int vmm = 0;
    DCHECK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    OKC(vmm == 1);
    CUctxCreateParams params;
    memset(&params, 0, sizeof params);              // how CUDA 13 code asks for an ordinary context
    CUcontext ctx;
    DCHECK(cuCtxCreate(&ctx, &params, 0, dev));
    CUmodule mod;
    DCHECK(cuModuleLoad(&mod, argv[1]));
    CUfunction scale;
    DCHECK(cuModuleGetFunction(&scale, mod, "scale"));

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0, rec = 0;
    DCHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    DCHECK(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    OKC(gran > 0 && rec % gran == 0);

    // reserve 4 granules, back the first two with one allocation, grant access, use from a kernel
    size_t n = gran / sizeof(float) * 2, bytes = 2 * gran;
    CUdeviceptr va;
    DCHECK(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
    OKC(va != 0 && va % gran == 0);
    CUmemGenericAllocationHandle h;
    DCHECK(cuMemCreate(&h, bytes, &prop, 0));
    DCHECK(cuMemMap(va, bytes, 0, h, 0));
    float *host = malloc(bytes), *back = malloc(bytes);
    for (size_t i = 0; i < n; i++)
        host[i] = (float)(i % 1000) - 3.0f;
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DCHECK(cuMemSetAccess(va, bytes, &access, 1));
    unsigned long long flags = 0;
    DCHECK(cuMemGetAccess(&flags, &prop.location, va + gran));
    OKC(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    DCHECK(cuMemcpyHtoD(va, host, bytes));
    float s = 2.5f;
    int count = (int)n;
    void *args[] = { &va, &s, &count };
    DCHECK(cuLaunchKernel(scale, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    DCHECK(cuMemcpyDtoH(back, va, bytes));
    int same = 1;
    for (size_t i = 0; i < n; i++)
        same &= back[i] == host[i] * 2.5f;
    OKC(same);
    // pointer attributes: device memory of this device
    unsigned mtype = 0;
    DCHECK(cuPointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 100));
    OKC(mtype == CU_MEMORYTYPE_DEVICE);
    DCHECK(cuMemsetD32(va + 4 * 16, 0x3f800000u, 8));                   // memsets reach mapped memory too
    DCHECK(cuMemcpyDtoH(back, va, 4 * 24));
    OKC(back[15] == host[15] * 2.5f && back[16] == 1.0f && back[23] == 1.0f);

    // the same allocation at a second address of the reservation: the same bytes
    DCHECK(cuMemMap(va + 2 * gran, bytes, 0, h, 0));
    DCHECK(cuMemSetAccess(va + 2 * gran, bytes, &access, 1));
    float probe[4] = { 7.0f, 8.0f, 9.0f, 10.0f };
    DCHECK(cuMemcpyHtoD(va + 2 * gran + 4096, probe, sizeof probe));
    float seen[4];
    DCHECK(cuMemcpyDtoH(seen, va + 4096, sizeof seen));
    OKC(memcmp(seen, probe, sizeof seen) == 0);
    s = 0.5f;
    count = 4;
    CUdeviceptr alias = va + 2 * gran + 4096;
    void *args2[] = { &alias, &s, &count };
    DCHECK(cuLaunchKernel(scale, 1, 1, 1, 32, 1, 1, 0, NULL, args2, NULL));    // written through one address...
    DCHECK(cuMemcpyDtoH(seen, va + 4096, sizeof seen));                         // ... read through the other
    OKC(seen[0] == 3.5f && seen[3] == 5.0f);
    // a copy across the two mappings (adjacent in the reservation) is one range of device memory
    unsigned char src[2048], dst[2048];
    DCHECK(cuMemcpyDtoH(src, va + 1024, sizeof src));
    DCHECK(cuMemcpyDtoD(va + bytes - 1024, va + 1024, sizeof src));
    DCHECK(cuMemcpyDtoH(dst, va + bytes - 1024, sizeof dst));
    OKC(memcmp(src, dst, sizeof src) == 0);
    DCHECK(cuMemcpyDtoH(dst, va, 1024));                // its second half landed in the alias of the start
    OKC(memcmp(src + 1024, dst, 1024) == 0);

    // handles: retained from an address, properties, released while still mapped
    CUmemGenericAllocationHandle again;
    DCHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + gran + 5)));
    OKC(again == h);
    CUmemAllocationProp got;
    DCHECK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    OKC(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.id == dev);
    DCHECK(cuMemRelease(again));
    DCHECK(cuMemRelease(h));                               // still mapped twice: the memory stays
    DCHECK(cuMemcpyDtoH(seen, va + 2 * gran + 4096, sizeof seen));
    OKC(seen[0] == 3.5f);
    DEXPECT_ERR(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    DEXPECT_ERR(cuMemMap(va, gran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    checks += 2;

    // mistakes, with CUDA's codes
    CUmemGenericAllocationHandle h2;
    DEXPECT_ERR(cuMemCreate(&h2, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    DCHECK(cuMemCreate(&h2, gran, &prop, 0));
    DEXPECT_ERR(cuMemMap(va + gran, gran, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);        // over a mapping
    DEXPECT_ERR(cuMemMap(va + 4 * gran, gran, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);    // outside the reservation
    DEXPECT_ERR(cuMemUnmap(va, gran), CUDA_ERROR_INVALID_VALUE);                       // part of a mapping
    DEXPECT_ERR(cuMemAddressFree(va, 4 * gran), CUDA_ERROR_INVALID_VALUE);             // still mapped
    DEXPECT_ERR(cuMemFree(va), CUDA_ERROR_INVALID_VALUE);                              // mapped, not allocated
    DEXPECT_ERR(cuMemAddressReserve(&va, gran, 3, 0, 0), CUDA_ERROR_INVALID_VALUE);    // alignment not a power of 2
    checks += 7;
    DCHECK(cuMemRelease(h2));

    // unmapping both mappings frees the memory; the range is a reservation again, then freed
    DCHECK(cuMemUnmap(va, bytes));
    DCHECK(cuMemUnmap(va + 2 * gran, bytes));
    DEXPECT_ERR(cuMemcpyDtoH(seen, va + 4096, sizeof seen), CUDA_ERROR_INVALID_VALUE);
    DEXPECT_ERR(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va), CUDA_ERROR_INVALID_VALUE);
    checks += 2;
    DCHECK(cuMemAddressFree(va, 4 * gran));
    DEXPECT_ERR(cuMemAddressFree(va, 4 * gran), CUDA_ERROR_INVALID_VALUE);
    checks++;

    // a reservation at a hint: the address asked for when it is free
    CUdeviceptr at;
    DCHECK(cuMemAddressReserve(&at, 2 * gran, 0, 0, 0));
    CUdeviceptr hinted;
    DCHECK(cuMemAddressReserve(&hinted, gran, 0, at + 8 * gran, 0));
    OKC(hinted == at + 8 * gran);
    DCHECK(cuMemAddressFree(hinted, gran));
    DCHECK(cuMemAddressFree(at, 2 * gran));

    DCHECK(cuModuleUnload(mod));
    DCHECK(cuCtxDestroy(ctx));
    free(host), free(back);
    printf("OK %ld\n", checks);
    return 0;
}
