// Error-check macros for the driver-API test programs (C): a failed call or expectation prints
// "FAIL <file>:<line> ..." and exits 1.
#pragma once
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static const char *drv_err_name(CUresult r)
{
    const char *s = NULL;
    return cuGetErrorName(r, &s) == CUDA_SUCCESS && s ? s : "unknown CUresult";
}

/* A whole file, NUL-terminated (PTX is text); exits with FAIL when it cannot be read. */
#define drv_read_file(path, len) drv_read_file_at(__FILE__, __LINE__, (path), (len))
static void *drv_read_file_at(const char *file, int line, const char *path, size_t *len)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = (char *)malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        fclose(f);
        *len = (size_t)n;
        return buf;
    }
    printf("FAIL %s:%d cannot read %s\n", file, line, path ? path : "(null)");
    fflush(stdout);
    exit(1);
}

#define DCHECK(call)                                                                                  \
    do {                                                                                              \
        CUresult r_ = (call);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                     \
            printf("FAIL %s:%d %s -> %d %s\n", __FILE__, __LINE__, #call, (int)r_, drv_err_name(r_)); \
            fflush(stdout);                                                                           \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)
#define DEXPECT(cond)                                                                                 \
    do {                                                                                              \
        if (!(cond)) {                                                                                \
            printf("FAIL %s:%d %s\n", __FILE__, __LINE__, #cond);                                     \
            fflush(stdout);                                                                           \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)
#define DEXPECT_ERR(call, code)                                                                       \
    do {                                                                                              \
        CUresult r_ = (call);                                                                         \
        if (r_ != (code)) {                                                                           \
            printf("FAIL %s:%d %s -> %d, expected %d\n", __FILE__, __LINE__, #call, (int)r_, (int)(code)); \
            fflush(stdout);                                                                           \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

/* The checks a program counts for its closing "OK <checks>" line; OKC(cond) expects and counts. */
static long checks __attribute__((unused));
#define OKC(cond)      \
    do {               \
        DEXPECT(cond); \
        checks++;      \
    } while (0)

/* cuInit, device 0, its primary context retained and made current: the device (released with
 * cuDevicePrimaryCtxRelease). */
static __attribute__((unused)) CUdevice drv_primary_current(void)
{
    DCHECK(cuInit(0));
    CUdevice dev;
    DCHECK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    DCHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    DCHECK(cuCtxSetCurrent(ctx));
    return dev;
}
