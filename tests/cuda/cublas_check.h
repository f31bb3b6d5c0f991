// cuBLAS status checks for the cuBLAS test programs (with check.h's CUDA ones).
#pragma once
#include <cublas_v2.h>
#include "check.h"

#define CHECK_BLAS(call)                                                                               \
    do {                                                                                               \
        cublasStatus_t s_ = (call);                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
            printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cublasGetStatusName(s_));       \
            fflush(stdout);                                                                            \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)
#define EXPECT_BLAS(call, code)                                                                        \
    do {                                                                                               \
        cublasStatus_t s_ = (call);                                                                    \
        if (s_ != (code)) {                                                                            \
            printf("FAIL %s:%d %s -> %s, expected %s\n", __FILE__, __LINE__, #call, cublasGetStatusName(s_), \
                   cublasGetStatusName(code));                                                         \
            fflush(stdout);                                                                            \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)
