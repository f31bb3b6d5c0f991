// Emulator end-to-end program: vector add, saxpy, 2D/3D grids, struct by value, a grid larger than one chunk.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

extern "C" __global__ void vecAdd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void saxpy(float alpha, const float* __restrict__ x, float* __restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = alpha * x[i] + y[i];
}

// Writes a unique code per thread of a 3-D grid of 3-D blocks.
extern "C" __global__ void index3d(int* out, int W, int H, int D) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < W && y < H && z < D) out[(z * H + y) * W + x] = x + 1000 * y + 1000000 * z;
}

struct Params { int n; float scale; double offset; char tag; short s; };

extern "C" __global__ void structParam(Params p, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) out[i] = (float)(i * p.scale + p.offset) + p.tag + p.s;
}

int main() {
    const int n = 300000;   // > 65536 lanes: several chunks
    size_t bytes = n * sizeof(float);
    float *a = (float*)malloc(bytes), *b = (float*)malloc(bytes), *c = (float*)malloc(bytes);
    for (int i = 0; i < n; i++) { a[i] = i * 0.5f; b[i] = 1.0f / (i + 1); }
    float *da, *db, *dc;
    CHECK(cudaMalloc(&da, bytes)); CHECK(cudaMalloc(&db, bytes)); CHECK(cudaMalloc(&dc, bytes));
    CHECK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
    vecAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) if (c[i] != a[i] + b[i]) { printf("FAIL vecAdd at %d\n", i); return 1; }

    saxpy<<<64, 128>>>(2.5f, da, db, (size_t)n);
    CHECK(cudaMemcpy(c, db, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) if (c[i] != 2.5f * a[i] + b[i]) { printf("FAIL saxpy at %d\n", i); return 1; }

    const int W = 37, H = 19, D = 5;
    int* dout; CHECK(cudaMalloc(&dout, W * H * D * sizeof(int)));
    dim3 blk(8, 4, 2), grd((W + 7) / 8, (H + 3) / 4, (D + 1) / 2);
    index3d<<<grd, blk>>>(dout, W, H, D);
    int* out = (int*)malloc(W * H * D * sizeof(int));
    CHECK(cudaMemcpy(out, dout, W * H * D * sizeof(int), cudaMemcpyDeviceToHost));
    for (int z = 0; z < D; z++) for (int y = 0; y < H; y++) for (int x = 0; x < W; x++)
        if (out[(z * H + y) * W + x] != x + 1000 * y + 1000000 * z) { printf("FAIL index3d\n"); return 1; }

    Params p = {1000, 0.25f, 3.5, 7, -2};
    structParam<<<4, 256>>>(p, dc);
    CHECK(cudaMemcpy(c, dc, 1000 * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 1000; i++)
        if (c[i] != (float)(i * 0.25f + 3.5) + 7 - 2) { printf("FAIL structParam at %d: %f\n", i, c[i]); return 1; }
    CHECK(cudaDeviceSynchronize());
    printf("PASS emu_basic\n");
    return 0;
}
