// Emulator end-to-end program: device-side calls the emulator cannot inline, in the style of NVIDIA's samples that
// use them: recursion (divergent depths, mutual recursion, local arrays in recursive frames, deep recursion after
// cudaDeviceSetLimit(cudaLimitStackSize)), function pointers (a __device__ table, a pointer fetched with
// cudaMemcpyFromSymbol and passed as a kernel argument, as FunctionPointers does), and the address of a kernel
// parameter (__grid_constant__) read through a generic pointer in a non-inlined function. Self-checking.
#include <cstdio>
#include <cstdlib>
#include "check.h"

// ---------------------------------------------------------------------------------------------- recursion
__device__ int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__device__ bool isOdd(unsigned n);
__device__ bool isEven(unsigned n) { return n == 0 ? true : isOdd(n - 1); }
__device__ bool isOdd(unsigned n) { return n == 0 ? false : isEven(n - 1); }

// Recursive quicksort of a small array in local memory: each frame keeps its own pivot and bounds.
__device__ void quicksort(int *a, int lo, int hi) {
    if (lo >= hi) return;
    int p = a[(lo + hi) / 2], i = lo, j = hi;
    while (i <= j) {
        while (a[i] < p) i++;
        while (a[j] > p) j--;
        if (i <= j) { int t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
    }
    quicksort(a, lo, j);
    quicksort(a, i, hi);
}

// Each frame holds a local array whose address it passes on: frames must not share local memory.
__device__ int pathSum(const int *tree, int node, int n, int depth) {
    int trail[4];
    for (int k = 0; k < 4; k++) trail[k] = tree[node] * (k + 1) + depth;
    if (2 * node + 1 >= n) return trail[depth & 3];
    int l = pathSum(tree, 2 * node + 1, n, depth + 1);
    int r = 2 * node + 2 < n ? pathSum(tree, 2 * node + 2, n, depth + 1) : 0;
    return trail[depth & 3] + (l > r ? l : r);
}

__device__ long long sumTo(int n) { return n == 0 ? 0 : n + sumTo(n - 1); }

__global__ void recursion(const int *tree, int ntree, int *out, long long *deep, int deepN) {
    int t = threadIdx.x;
    int a[12];
    for (int k = 0; k < 12; k++) a[k] = (t * 37 + k * 91) % 50 - 25;
    quicksort(a, 0, 11);
    int sorted = 1;
    for (int k = 1; k < 12; k++) sorted &= a[k - 1] <= a[k];
    out[4 * t + 0] = fib(t % 15);
    out[4 * t + 1] = isEven(t * 3) ? 1 : 0;
    out[4 * t + 2] = sorted * 1000 + a[0] + a[11];
    out[4 * t + 3] = pathSum(tree, t % 7, ntree, 0);
    if (t < 4) deep[t] = sumTo(deepN - t);
}

// ---------------------------------------------------------------------------------------------- function pointers
typedef float (*binop_t)(float, float);
__device__ float opAdd(float a, float b) { return a + b; }
__device__ float opSub(float a, float b) { return a - b; }
__device__ float opMul(float a, float b) { return a * b; }
__device__ float opMax(float a, float b) { return a > b ? a : b; }
__device__ binop_t opTable[4] = {opAdd, opSub, opMul, opMax};
__device__ binop_t hostPicked = opMul;

__global__ void pointers(const float *x, float *out, binop_t fromHost, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    binop_t f = opTable[i % 4];                  // divergent indirect calls within each warp
    out[2 * i] = f(x[i], 3.0f);
    out[2 * i + 1] = fromHost(x[i], x[i]);       // one target for every lane
}

// ---------------------------------------------------------------------------------------------- parameter addresses
struct Coeffs { float c[16]; int n; };

__device__ __noinline__ float horner(const Coeffs *p, float x) {   // reads the parameter through a pointer
    float r = 0.f;
    for (int k = p->n - 1; k >= 0; k--) r = r * x + p->c[k];
    return r;
}

__global__ void polynomial(const __grid_constant__ Coeffs p, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = horner(&p, x[i]);
}

// ---------------------------------------------------------------------------------------------- host references
static int hfib(int n) { return n < 2 ? n : hfib(n - 1) + hfib(n - 2); }
static int hpath(const int *tree, int node, int n, int depth) {
    int trail[4];
    for (int k = 0; k < 4; k++) trail[k] = tree[node] * (k + 1) + depth;
    if (2 * node + 1 >= n) return trail[depth & 3];
    int l = hpath(tree, 2 * node + 1, n, depth + 1);
    int r = 2 * node + 2 < n ? hpath(tree, 2 * node + 2, n, depth + 1) : 0;
    return trail[depth & 3] + (l > r ? l : r);
}
static int cmpInt(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int main() {
    // recursion; deep recursion needs a larger stack than CUDA's default, as on a GPU
    const int nt = 96, ntree = 23, deepN = 600;
    int tree[ntree];
    for (int k = 0; k < ntree; k++) tree[k] = (k * 13) % 17 - 8;
    int *dtree, *dout, out[4 * nt];
    long long *ddeep, deep[4];
    CHECK(cudaMalloc(&dtree, sizeof tree));
    CHECK(cudaMalloc(&dout, sizeof out));
    CHECK(cudaMalloc(&ddeep, sizeof deep));
    CHECK(cudaMemcpy(dtree, tree, sizeof tree, cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 32 * 1024));
    recursion<<<1, nt>>>(dtree, ntree, dout, ddeep, deepN);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(deep, ddeep, sizeof deep, cudaMemcpyDeviceToHost));
    for (int t = 0; t < nt; t++) {
        int a[12];
        for (int k = 0; k < 12; k++) a[k] = (t * 37 + k * 91) % 50 - 25;
        qsort(a, 12, sizeof(int), cmpInt);
        EXPECT(out[4 * t + 0] == hfib(t % 15));
        EXPECT(out[4 * t + 1] == ((t * 3) % 2 == 0));
        EXPECT(out[4 * t + 2] == 1000 + a[0] + a[11]);
        EXPECT(out[4 * t + 3] == hpath(tree, t % 7, ntree, 0));
    }
    for (int t = 0; t < 4; t++) EXPECT(deep[t] == (long long)(deepN - t) * (deepN - t + 1) / 2);

    // function pointers
    const int n = 1000;
    float hx[n], hy[2 * n];
    for (int i = 0; i < n; i++) hx[i] = (float)(i % 23) - 11.5f;
    float *dx, *dy;
    CHECK(cudaMalloc(&dx, sizeof hx));
    CHECK(cudaMalloc(&dy, sizeof hy));
    CHECK(cudaMemcpy(dx, hx, sizeof hx, cudaMemcpyHostToDevice));
    binop_t picked;
    CHECK(cudaMemcpyFromSymbol(&picked, hostPicked, sizeof picked));
    pointers<<<(n + 127) / 128, 128>>>(dx, dy, picked, n);
    CHECK(cudaMemcpy(hy, dy, sizeof hy, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        float a = hx[i], b = 3.0f;
        float e = i % 4 == 0 ? a + b : i % 4 == 1 ? a - b : i % 4 == 2 ? a * b : (a > b ? a : b);
        EXPECT(hy[2 * i] == e);
        EXPECT(hy[2 * i + 1] == hx[i] * hx[i]);
    }

    // the address of a kernel parameter
    Coeffs c;
    c.n = 5;
    for (int k = 0; k < 16; k++) c.c[k] = k < 5 ? 0.5f * (k + 1) : 99.f;
    polynomial<<<(n + 127) / 128, 128>>>(c, dx, dy, n);
    CHECK(cudaMemcpy(hy, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        float r = 0.f;
        for (int k = c.n - 1; k >= 0; k--) r = r * hx[i] + c.c[k];
        // the device may fuse r * x + c into an fma: compare within a few ulps of the result's magnitude
        float tol = 1e-6f * (1.f + (r < 0 ? -r : r)) * 8;
        if (hy[i] - r > tol || r - hy[i] > tol) { printf("FAIL polynomial %d: %g != %g\n", i, hy[i], r); return 1; }
    }
    CHECK(cudaDeviceSynchronize());
    printf("PASS emu_calls\n");
    return 0;
}
