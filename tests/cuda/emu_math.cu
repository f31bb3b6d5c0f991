// Emulator end-to-end program: libm functions in f32 (ulp bounds), double precision, half precision.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

extern "C" __global__ void mathF(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    out[0 * n + i] = expf(v);
    out[1 * n + i] = logf(fabsf(v) + 0.5f);
    out[2 * n + i] = sinf(v);
    out[3 * n + i] = sqrtf(fabsf(v));
    out[4 * n + i] = tanhf(v);
    out[5 * n + i] = powf(fabsf(v) + 0.1f, 1.7f);
}

extern "C" __global__ void mathD(const double* x, double* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = x[i];
    out[0 * n + i] = __dadd_rn(__dmul_rn(v, v), 1.0 / (v + 3.0));   // no fma contraction
    out[1 * n + i] = sqrt(fabs(v)) + fma(v, 2.0, -1.0);
    out[2 * n + i] = exp(v * 0.5);
    out[3 * n + i] = (double)(long long)(v * 1000.0) / 7.0;
}

extern "C" __global__ void halfK(const __half* a, const __half* b, __half* c, float* f, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half s = __hadd(__hmul(a[i], b[i]), __float2half(1.0f));
    c[i] = s;
    f[i] = __half2float(a[i]) + __half2float(b[i]);
}

static int ulpdiff(float a, float b) {
    if (isnan(a) && isnan(b)) return 0;
    int ia, ib; memcpy(&ia, &a, 4); memcpy(&ib, &b, 4);
    if (ia < 0) ia = 0x80000000 - ia; if (ib < 0) ib = 0x80000000 - ib;
    return abs(ia - ib);
}

int main() {
    const int n = 1024;
    float* x = (float*)malloc(n * 4); float* out = (float*)malloc(6 * n * 4);
    for (int i = 0; i < n; i++) x[i] = (i - 512) * 0.0173f;
    float *dx, *dout; CHECK(cudaMalloc(&dx, n * 4)); CHECK(cudaMalloc(&dout, 6 * n * 4));
    CHECK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    mathF<<<n / 256, 256>>>(dx, dout, n);
    CHECK(cudaMemcpy(out, dout, 6 * n * 4, cudaMemcpyDeviceToHost));
    // CUDA's documented maximum ulp errors: expf 2, logf 1, sinf 2, sqrtf 0 (IEEE), tanhf 2, powf 4 (+1 slack for
    // the host reference itself)
    const int bound[6] = {3, 2, 3, 1, 3, 5};
    for (int i = 0; i < n; i++) {
        float v = x[i];
        float ref[6] = {expf(v), logf(fabsf(v) + 0.5f), sinf(v), sqrtf(fabsf(v)), tanhf(v), powf(fabsf(v) + 0.1f, 1.7f)};
        for (int k = 0; k < 6; k++) if (ulpdiff(out[k * n + i], ref[k]) > bound[k]) {
            printf("FAIL math %d x=%a got %a want %a\n", k, v, out[k * n + i], ref[k]); return 1; }
    }
    double* xd = (double*)malloc(n * 8); double* od = (double*)malloc(4 * n * 8);
    for (int i = 0; i < n; i++) xd[i] = (i - 300) * 0.01;
    double *dxd, *dod; CHECK(cudaMalloc(&dxd, n * 8)); CHECK(cudaMalloc(&dod, 4 * n * 8));
    CHECK(cudaMemcpy(dxd, xd, n * 8, cudaMemcpyHostToDevice));
    mathD<<<n / 128, 128>>>(dxd, dod, n);
    CHECK(cudaMemcpy(od, dod, 4 * n * 8, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        double v = xd[i];
        double r0 = v * v + 1.0 / (v + 3.0), r1 = sqrt(fabs(v)) + fma(v, 2.0, -1.0), r3 = (double)(long long)(v * 1000.0) / 7.0;
        if (od[i] != r0 || od[n + i] != r1 || od[3 * n + i] != r3 || fabs(od[2 * n + i] - exp(v * 0.5)) > 4e-16 * exp(v * 0.5)) {
            printf("FAIL double %d\n", i); return 1; }
    }
    __half* ha = (__half*)malloc(n * 2); __half* hb = (__half*)malloc(n * 2); __half* hc = (__half*)malloc(n * 2);
    for (int i = 0; i < n; i++) { ha[i] = __float2half((i % 64) * 0.125f); hb[i] = __float2half((i % 9) - 4.0f); }
    __half *da, *db, *dc; float* df;
    CHECK(cudaMalloc(&da, n * 2)); CHECK(cudaMalloc(&db, n * 2)); CHECK(cudaMalloc(&dc, n * 2)); CHECK(cudaMalloc(&df, n * 4));
    CHECK(cudaMemcpy(da, ha, n * 2, cudaMemcpyHostToDevice)); CHECK(cudaMemcpy(db, hb, n * 2, cudaMemcpyHostToDevice));
    halfK<<<n / 256, 256>>>(da, db, dc, df, n);
    CHECK(cudaMemcpy(hc, dc, n * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(out, df, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        float e = __half2float(__float2half(__half2float(ha[i]) * __half2float(hb[i]))) + 1.0f;
        if (__half2float(hc[i]) != __half2float(__float2half(e)) || out[i] != __half2float(ha[i]) + __half2float(hb[i])) {
            printf("FAIL half %d\n", i); return 1; }
    }
    printf("PASS emu_math\n");
    return 0;
}
