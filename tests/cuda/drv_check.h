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
