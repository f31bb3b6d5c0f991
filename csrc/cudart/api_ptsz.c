/* The per-thread-default-stream entry points (nvcc --default-stream per-thread). A device's work is serialized by
 * the daemon, so the per-thread default stream behaves like the legacy one: each forwards to its base function. */
#include "cudart.h"

cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventRecordWithFlags(cudaEvent_t, cudaStream_t, unsigned);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
cudaError_t cudaMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, int, cudaStream_t);
cudaError_t cudaMemcpyToSymbol(const void *, const void *, size_t, size_t, int);
cudaError_t cudaMemcpyToSymbolAsync(const void *, const void *, size_t, size_t, int, cudaStream_t);
cudaError_t cudaMemcpyFromSymbol(void *, const void *, size_t, size_t, int);
cudaError_t cudaMemcpyFromSymbolAsync(void *, const void *, size_t, size_t, int, cudaStream_t);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaMemset2D(void *, size_t, int, size_t, size_t);
cudaError_t cudaMemset2DAsync(void *, size_t, int, size_t, size_t, cudaStream_t);
cudaError_t cudaStreamGetDevice(cudaStream_t, int *);
cudaError_t cudaStreamGetFlags(cudaStream_t, unsigned *);
cudaError_t cudaStreamGetPriority(cudaStream_t, int *);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned);
cudaError_t cudaLaunchHostFunc(cudaStream_t, void (*)(void *), void *);
cudaError_t cudaStreamAddCallback(cudaStream_t, void (*)(cudaStream_t, cudaError_t, void *), void *, unsigned);
cudaError_t cudaStreamIsCapturing(cudaStream_t, int *);
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t, int *, unsigned long long *, void **, const void **, const void **,
                                     size_t *);

PV_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) { return cudaEventRecord(e, s); }
PV_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned f)
{
    return cudaEventRecordWithFlags(e, s, f);
}
PV_API cudaError_t cudaMemcpy_ptds(void *d, const void *s, size_t n, int k) { return cudaMemcpy(d, s, n, k); }
PV_API cudaError_t cudaMemcpyAsync_ptsz(void *d, const void *s, size_t n, int k, cudaStream_t st)
{
    return cudaMemcpyAsync(d, s, n, k, st);
}
PV_API cudaError_t cudaMemcpy2D_ptds(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k)
{
    return cudaMemcpy2D(d, dp, s, sp, w, h, k);
}
PV_API cudaError_t cudaMemcpy2DAsync_ptsz(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k,
                                          cudaStream_t st)
{
    return cudaMemcpy2DAsync(d, dp, s, sp, w, h, k, st);
}
PV_API cudaError_t cudaMemcpyToSymbol_ptds(const void *sym, const void *s, size_t n, size_t o, int k)
{
    return cudaMemcpyToSymbol(sym, s, n, o, k);
}
PV_API cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *sym, const void *s, size_t n, size_t o, int k,
                                                cudaStream_t st)
{
    return cudaMemcpyToSymbolAsync(sym, s, n, o, k, st);
}
PV_API cudaError_t cudaMemcpyFromSymbol_ptds(void *d, const void *sym, size_t n, size_t o, int k)
{
    return cudaMemcpyFromSymbol(d, sym, n, o, k);
}
PV_API cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *d, const void *sym, size_t n, size_t o, int k,
                                                  cudaStream_t st)
{
    return cudaMemcpyFromSymbolAsync(d, sym, n, o, k, st);
}
PV_API cudaError_t cudaMemset_ptds(void *p, int v, size_t n) { return cudaMemset(p, v, n); }
PV_API cudaError_t cudaMemsetAsync_ptsz(void *p, int v, size_t n, cudaStream_t s) { return cudaMemsetAsync(p, v, n, s); }
PV_API cudaError_t cudaMemset2D_ptds(void *p, size_t pitch, int v, size_t w, size_t h)
{
    return cudaMemset2D(p, pitch, v, w, h);
}
PV_API cudaError_t cudaMemset2DAsync_ptsz(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s)
{
    return cudaMemset2DAsync(p, pitch, v, w, h, s);
}
PV_API cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int *d) { return cudaStreamGetDevice(s, d); }
PV_API cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned *f) { return cudaStreamGetFlags(s, f); }
PV_API cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int *p) { return cudaStreamGetPriority(s, p); }
PV_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { return cudaStreamQuery(s); }
PV_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return cudaStreamSynchronize(s); }
PV_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned f)
{
    return cudaStreamWaitEvent(s, e, f);
}
PV_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, void (*fn)(void *), void *u)
{
    return cudaLaunchHostFunc(s, fn, u);
}
PV_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t s, void (*cb)(cudaStream_t, cudaError_t, void *), void *u,
                                              unsigned f)
{
    return cudaStreamAddCallback(s, cb, u, f);
}
PV_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, int *st) { return cudaStreamIsCapturing(s, st); }
PV_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t s, int *st, unsigned long long *id, void **g,
                                                 const void **deps, const void **edges, size_t *nd)
{
    return cudaStreamGetCaptureInfo(s, st, id, g, deps, edges, nd);
}
