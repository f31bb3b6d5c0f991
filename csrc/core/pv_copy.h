/* Copies and memsets (copy.c; between GPUs and through managed or mapped memory: copy_features.c). */
#ifndef PV_COPY_H
#define PV_COPY_H

#include "pv_base.h"

struct pv_device;

enum { cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
       cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4 };
/* Transfers with the devices already known (fire-and-forget except device-to-host; d2d between two GPUs is staged
 * through this process, in order with the calling thread). */
cudaError_t pv_copy_h2d(struct pv_device *d, uint64_t dst, const void *src, size_t n, uint64_t stream);
cudaError_t pv_copy_d2h(struct pv_device *d, void *dst, uint64_t src, size_t n, uint64_t stream);
/* After a synchronous host-to-device copy's frames: its bytes are in device memory before the device's next work on
 * any stream (HTOD_LANDED, fire-and-forget); pv_copy_h2d_landed: pv_copy_h2d, then that when `landed`. */
cudaError_t pv_copy_landed(struct pv_device *d, uint64_t stream);
cudaError_t pv_copy_h2d_landed(struct pv_device *d, uint64_t dst, const void *src, size_t n, uint64_t stream,
                               int landed);
/* Device-to-host without waiting (detached requests): dst must stay valid until a synchronization covers the copy. */
cudaError_t pv_copy_d2h_async(struct pv_device *d, void *dst, uint64_t src, size_t n, uint64_t stream);
cudaError_t pv_copy_d2d(struct pv_device *dd, uint64_t dst, struct pv_device *sd, uint64_t src, size_t n,
                        uint64_t stream);
/* Pitched 2D copies (width bytes per row, height rows); HtoD is sent fire-and-forget, DtoH waits for the rows. */
cudaError_t pv_h2d_2d(struct pv_device *d, uint64_t dst, size_t dpitch, const char *src, size_t spitch,
                      size_t width, size_t height, uint64_t stream);
cudaError_t pv_d2h_2d(struct pv_device *d, char *dst, size_t dpitch, uint64_t src, size_t spitch, size_t width,
                      size_t height, uint64_t stream);
/* 0 and *d = the device whose allocation holds [p, p+n), -1 when no single allocation does. */
int pv_dev_range(const void *p, size_t n, struct pv_device **d);
int pv_is_device_ptr(const void *p);
uint64_t pv_stream_for(cudaStream_t s, struct pv_device *d);       /* daemon handle of s on d (0: default) */
cudaError_t pv_init_with_stream(cudaStream_t s);                   /* initialized, and s is a valid stream */
/* A copy by cudaMemcpyKind (cudaMemcpyDefault: by where the pointers live); async: cudaMemcpyAsync semantics (a
 * device-to-host copy into pinned memory returns before the bytes are there). */
cudaError_t pv_memcpy(void *dst, const void *src, size_t n, int kind, cudaStream_t s, int async);
cudaError_t pv_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                        int kind, cudaStream_t s);
/* copy_features.c: between two GPUs (daemon to daemon, or by their daemon); copies touching managed or mapped
 * memory (1 when handled, result in *err). */
cudaError_t pv_copy_d2d_gpus(struct pv_device *dd, uint64_t dst, struct pv_device *sd, uint64_t src, size_t n);
int pv_copy_regions(void *dst, const void *src, size_t n, cudaStream_t s, int async, cudaError_t *err);
int pv_copy2d_regions(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                      int kind, cudaStream_t s, cudaError_t *err);
/* Sets width elements of elem bytes (1, 2, 4) to value in height rows pitch bytes apart. */
cudaError_t pv_memset(void *ptr, size_t pitch, uint32_t value, int elem, size_t width, size_t height, cudaStream_t s);

#endif
