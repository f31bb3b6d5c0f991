/* Host <-> device copies every API library needs: which device holds a pointer range (the core's allocation
 * table), and pitched 2D copies as the wire carries them (rows packed in the payload). libvcudart's cudaMemcpy2D*
 * and libvcublas's cublasSet/GetMatrix/Vector are built on them. */
#include "pv_core.h"

#include <stdlib.h>

int pv_dev_range(const void *p, size_t n, struct pv_device **d)
{
    struct pv_alloc a;
    uint64_t u = (uint64_t)(uintptr_t)p;
    if (pv_alloc_find(u, &a) != 0 || a.dev < 0)
        return -1;
    if (n > a.size || u - a.ptr > a.size - n)
        return -1;
    *d = pv_device(a.dev);
    return *d ? 0 : -1;
}

cudaError_t pv_h2d_2d(struct pv_device *d, uint64_t dst, size_t dpitch, const char *src, size_t spitch,
                      size_t width, size_t height, uint64_t stream)
{
    size_t total = width * height;
    char *packed = NULL;
    const char *payload = src;
    if (spitch != width) {
        packed = malloc(total);
        if (!packed)
            return PV_cudaErrorMemoryAllocation;
        for (size_t r = 0; r < height; r++)
            memcpy(packed + r * width, src + r * spitch, width);
        payload = packed;
    }
    cudaError_t err = pv_send_MEMCPY2D_HTOD(d, dst, dpitch, width, height, stream, payload, total);
    free(packed);
    return err;
}

cudaError_t pv_d2h_2d(struct pv_device *d, char *dst, size_t dpitch, uint64_t src, size_t spitch, size_t width,
                      size_t height, uint64_t stream)
{
    size_t total = width * height;
    char *packed = dpitch == width ? dst : malloc(total);
    if (!packed)
        return PV_cudaErrorMemoryAllocation;
    size_t got = 0;
    cudaError_t err = pv_call_MEMCPY2D_DTOH(d, src, spitch, width, height, stream, packed, total, &got);
    if (err == PV_SUCCESS && got != total)
        err = PV_cudaErrorUnknown;
    if (err == PV_SUCCESS && packed != dst)
        for (size_t r = 0; r < height; r++)
            memcpy(dst + r * dpitch, packed + r * width, width);
    if (packed != dst)
        free(packed);
    return err;
}
