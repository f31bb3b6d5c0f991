// Driver-API program for the probe: module from a file (PTX or fatbin, argv[1]), launches with kernelParams and
// with extra (CU_LAUNCH_PARAM_BUFFER_*: first the struct's size with its tail padding, 32, which NVIDIA's driver is
// expected to refuse with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES as libvcuda does, then the parameters' own size, 28).
// Prints each call and its CUresult; results are not checked.
#include <cuda.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#define CK(x) do { CUresult r_ = (x); const char *s_ = 0; cuGetErrorName(r_, &s_); fprintf(stderr, "==== %s -> %d %s\n", #x, r_, s_ ? s_ : "?"); } while (0)
int main(int argc, char **argv) {
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction f; int n = 1024, cnt = 0;
    CK(cuInit(0));
    CK(cuDeviceGetCount(&cnt));
    CK(cuDeviceGet(&dev, 0));
    char name[64]; CK(cuDeviceGetName(name, 64, dev));
    CK(cuCtxCreate(&ctx, NULL, 0, dev));
    CK(cuModuleLoad(&mod, argv[1]));
    CK(cuModuleGetFunction(&f, mod, "vadd"));
    CUdeviceptr a, b, c; float h[1024];
    for (int i = 0; i < n; i++) h[i] = i;
    CK(cuMemAlloc(&a, n * 4)); CK(cuMemAlloc(&b, n * 4)); CK(cuMemAlloc(&c, n * 4));
    CK(cuMemcpyHtoD(a, h, n * 4)); CK(cuMemcpyHtoD(b, h, n * 4));
    void *params[] = {&a, &b, &c, &n};
    CK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    struct { CUdeviceptr a, b, c; int n; } buf = {a, b, c, n};
    size_t sz = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &sz, CU_LAUNCH_PARAM_END};
    CK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
    sz = offsetof(__typeof__(buf), n) + sizeof buf.n;
    CK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(h, c, n * 4));
    CK(cuMemFree(a)); CK(cuModuleUnload(mod)); CK(cuCtxDestroy(ctx));
    return 0;
}
