// examples/hello: the smallest useful CUDA program. It asks which GPUs it has, adds two vectors on GPU 0,
// copies the result back, prints part of it and checks every element against the CPU.
//
// Nothing in it knows about pyvgpu. Build it the ordinary way, with the shared CUDA runtime so that
// libvcudart can stand in for libcudart.so.13:
//     nvcc -cudart shared -o hello vector_add.cu
// and run it through the interposer:
//     pyvgpu run -- ./hello          (or: LD_PRELOAD=$(pyvgpu lib) PYVGPU_HOSTS=127.0.0.1:7700 ./hello)
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>

#define CHECK(call)                                                                              \
    do {                                                                                         \
        cudaError_t err_ = (call);                                                               \
        if (err_ != cudaSuccess) {                                                               \
            fprintf(stderr, "hello: %s failed: %s (%s)\n", #call, cudaGetErrorName(err_),        \
                    cudaGetErrorString(err_));                                                   \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

__global__ void vector_add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1 << 16;
    if (n <= 0) n = 1 << 16;

    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    printf("hello: %d GPU(s) visible\n", count);
    for (int d = 0; d < count; ++d) {
        cudaDeviceProp prop;
        CHECK(cudaGetDeviceProperties(&prop, d));
        printf("  GPU%d: %s, compute capability %d.%d, %.1f GiB\n", d, prop.name, prop.major, prop.minor,
               prop.totalGlobalMem / 1073741824.0);
    }
    CHECK(cudaSetDevice(0));

    size_t bytes = (size_t)n * sizeof(float);
    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    if (!a || !b || !c) { fprintf(stderr, "hello: out of host memory\n"); return 1; }
    for (int i = 0; i < n; ++i) { a[i] = 0.5f * i; b[i] = 2.0f * i + 1.0f; }

    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes));
    CHECK(cudaMalloc(&db, bytes));
    CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
    int threads = 256, blocks = (n + threads - 1) / threads;
    vector_add<<<blocks, threads>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));   // waits for the kernel, reports its errors

    printf("hello: c[i] = a[i] + b[i] with a[i] = 0.5*i, b[i] = 2*i + 1, n = %d\n", n);
    for (int i = 0; i < 4 && i < n; ++i) printf("  c[%d] = %.1f\n", i, c[i]);
    printf("  ...\n  c[%d] = %.1f\n", n - 1, c[n - 1]);

    int bad = 0;
    for (int i = 0; i < n; ++i) {
        float want = a[i] + b[i];
        if (c[i] != want) {
            if (bad < 5) fprintf(stderr, "hello: c[%d] = %.1f, expected %.1f\n", i, c[i], want);
            ++bad;
        }
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    free(a); free(b); free(c);
    if (bad) {
        printf("hello: FAILED: %d of %d elements wrong\n", bad, n);
        return 1;
    }
    printf("hello: PASSED: all %d elements match the CPU\n", n);
    return 0;
}
