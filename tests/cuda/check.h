// Shared error-check macros for the CUDA test programs: a failed call or expectation prints
// "FAIL <file>:<line> ..." and exits 1.
#pragma once
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                                    \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess) {                                                                       \
            printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_));          \
            fflush(stdout);                                                                            \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)
#define EXPECT(cond)                                                                                   \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            printf("FAIL %s:%d %s\n", __FILE__, __LINE__, #cond);                                      \
            fflush(stdout);                                                                            \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)
#define EXPECT_ERR(call, code)                                                                         \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != (code)) {                                                                            \
            printf("FAIL %s:%d %s -> %s, expected %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
                   cudaGetErrorName(code));                                                            \
            fflush(stdout);                                                                            \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)
