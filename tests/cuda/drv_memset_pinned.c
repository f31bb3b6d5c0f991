// Memsets of page-locked host memory (cuMemHostAlloc): under unified addressing its pointer is a device pointer,
// and NVIDIA's driver sets it in stream order. XLA's autotuner zeroes an 8-byte result so (cuMemsetD32Async, 2
// elements; GPU run 3 on an H100: libvcuda refused it with CUDA_ERROR_INVALID_VALUE and JAX's jnp.dot failed). Here:
// that exact call, a 1-byte and a 2D 16-bit memset of the same memory, each after the stream's earlier work (a
// device-to-host copy into the same bytes comes first, the memset's bytes win), and the host pointer of registered
// memory refused (its device pointer is another where cudaDevAttrCanUseHostPointerForRegisteredMem is 0).
// Prints "OK <checks>".
#include <string.h>

#include "drv_check.h"

int main(void)
{
    CUdevice dev = drv_primary_current();
    const size_t page = 4096;
    unsigned char *host;
    DCHECK(cuMemHostAlloc((void **)&host, page, 0));
    memset(host, 0xee, page);
    CUstream s;
    DCHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    DCHECK(cuMemAlloc(&d, page));
    DCHECK(cuMemsetD8(d, 0x5a, page));

    // XLA's shape: the device's copy into the bytes first, then the 8-byte zeroing, both on the stream
    DCHECK(cuMemcpyDtoHAsync(host, d, 64, s));
    DCHECK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)host, 0, 2, s));
    DCHECK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)(host + 128), 0x3c, 5, s));
    DCHECK(cuMemsetD2D16Async((CUdeviceptr)(uintptr_t)(host + 256), 64, 0xbeef, 3, 2, s));
    DCHECK(cuStreamSynchronize(s));
    static const unsigned char zero8[8];
    OKC(memcmp(host, zero8, 8) == 0);                                 // the memset after the copy
    OKC(host[8] == 0x5a && host[63] == 0x5a && host[64] == 0xee);      // the copy's other bytes, nothing past them
    OKC(host[128] == 0x3c && host[132] == 0x3c && host[133] == 0xee);
    OKC(host[256] == 0xef && host[257] == 0xbe && host[261] == 0xbe && host[262] == 0xee);    // row 0: 3 elements
    OKC(host[320] == 0xef && host[325] == 0xbe && host[326] == 0xee && host[319] == 0xee);    // row 1, at the pitch

    // past the allocation's end, and registered memory's host pointer: refused
    OKC(cuMemsetD8Async((CUdeviceptr)(uintptr_t)(host + page - 4), 1, 8, s) == CUDA_ERROR_INVALID_VALUE);
    unsigned char *plain = aligned_alloc(page, page);
    DCHECK(cuMemHostRegister(plain, page, 0));
    OKC(cuMemsetD32Async((CUdeviceptr)(uintptr_t)plain, 0, 2, s) == CUDA_ERROR_INVALID_VALUE);
    DCHECK(cuMemHostUnregister(plain));
    free(plain);

    DCHECK(cuMemFree(d));
    DCHECK(cuMemFreeHost(host));
    DCHECK(cuStreamDestroy(s));
    DCHECK(cuDevicePrimaryCtxRelease(dev));
    printf("OK %ld\n", checks);
    return 0;
}
