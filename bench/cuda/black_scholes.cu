// Option pricing in the style of NVIDIA's BlackScholes sample: European call and put prices of OPT_N options by
// the Black-Scholes formula (the cumulative normal by the Abramowitz-Stegun polynomial), two options per thread,
// with the fast intrinsics (__expf, __logf, __fdividef, rsqrtf) the sample uses; the launch is repeated
// `iterations` times, as the sample times it. Self-checking against a double-precision host computation.
//     black_scholes [options (default 4000000)] [iterations (default 512)]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); return 1; } } while (0)

__device__ inline float cndGPU(float d) {
    const float A1 = 0.31938153f, A2 = -0.356563782f, A3 = 1.781477937f, A4 = -1.821255978f, A5 = 1.330274429f;
    const float RSQRT2PI = 0.39894228040143267793994605993438f;
    float K = __fdividef(1.0f, 1.0f + 0.2316419f * fabsf(d));
    float cnd = RSQRT2PI * __expf(-0.5f * d * d) * (K * (A1 + K * (A2 + K * (A3 + K * (A4 + K * A5)))));
    return d > 0 ? 1.0f - cnd : cnd;
}

__device__ inline void priceGPU(float &call, float &put, float S, float X, float T, float R, float V) {
    float sqrtT = __fdividef(1.0f, rsqrtf(T));
    float d1 = __fdividef(__logf(S / X) + (R + 0.5f * V * V) * T, V * sqrtT);
    float d2 = d1 - V * sqrtT;
    float cndD1 = cndGPU(d1), cndD2 = cndGPU(d2);
    float expRT = __expf(-R * T);
    call = S * cndD1 - X * expRT * cndD2;
    put = X * expRT * (1.0f - cndD2) - S * (1.0f - cndD1);
}

__global__ void blackScholes(float2 *call, float2 *put, const float2 *S, const float2 *X, const float2 *T, float R,
                             float V, int pairs) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < pairs) {
        float2 s = S[i], x = X[i], t = T[i], c, p;
        priceGPU(c.x, p.x, s.x, x.x, t.x, R, V);
        priceGPU(c.y, p.y, s.y, x.y, t.y, R, V);
        call[i] = c;
        put[i] = p;
    }
}

static double cndHost(double d) {
    const double A1 = 0.31938153, A2 = -0.356563782, A3 = 1.781477937, A4 = -1.821255978, A5 = 1.330274429;
    const double RSQRT2PI = 0.39894228040143267793994605993438;
    double K = 1.0 / (1.0 + 0.2316419 * fabs(d));
    double cnd = RSQRT2PI * exp(-0.5 * d * d) * (K * (A1 + K * (A2 + K * (A3 + K * (A4 + K * A5)))));
    return d > 0 ? 1.0 - cnd : cnd;
}

static float uniform(unsigned &s, float lo, float hi) {
    s = s * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(s >> 8) / (float)(1u << 24);
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) & ~1 : 4000000, iterations = argc > 2 ? atoi(argv[2]) : 512;
    const float R = 0.02f, V = 0.30f;
    const size_t bytes = n * sizeof(float);
    float *hS = (float *)malloc(bytes), *hX = (float *)malloc(bytes), *hT = (float *)malloc(bytes);
    float *hCall = (float *)malloc(bytes), *hPut = (float *)malloc(bytes);
    unsigned seed = 5347;
    for (int i = 0; i < n; i++) {
        hS[i] = uniform(seed, 5.0f, 30.0f);
        hX[i] = uniform(seed, 1.0f, 100.0f);
        hT[i] = uniform(seed, 0.25f, 10.0f);
    }
    float *dS, *dX, *dT, *dCall, *dPut;
    CHECK(cudaMalloc(&dS, bytes)); CHECK(cudaMalloc(&dX, bytes)); CHECK(cudaMalloc(&dT, bytes));
    CHECK(cudaMalloc(&dCall, bytes)); CHECK(cudaMalloc(&dPut, bytes));
    CHECK(cudaMemcpy(dS, hS, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dX, hX, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dT, hT, bytes, cudaMemcpyHostToDevice));
    const int pairs = n / 2, block = 128, grid = (pairs + block - 1) / block;
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < iterations; it++) {
        blackScholes<<<grid, block>>>((float2 *)dCall, (float2 *)dPut, (const float2 *)dS, (const float2 *)dX,
                                      (const float2 *)dT, R, V, pairs);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaDeviceSynchronize());
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(cudaMemcpy(hCall, dCall, bytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hPut, dPut, bytes, cudaMemcpyDeviceToHost));
    double sumDelta = 0, sumRef = 0, maxDelta = 0;
    for (int i = 0; i < n; i++) {
        double S = hS[i], X = hX[i], T = hT[i], sqrtT = sqrt(T);
        double d1 = (log(S / X) + (R + 0.5 * V * V) * T) / (V * sqrtT), d2 = d1 - V * sqrtT;
        double expRT = exp(-R * T);
        double call = S * cndHost(d1) - X * expRT * cndHost(d2);
        double put = X * expRT * (1.0 - cndHost(d2)) - S * (1.0 - cndHost(d1));
        double dc = fabs(call - hCall[i]), dp = fabs(put - hPut[i]);
        sumDelta += dc + dp;
        sumRef += fabs(call) + fabs(put);
        maxDelta = fmax(maxDelta, fmax(dc, dp));
    }
    double l1 = sumDelta / sumRef;
    printf("%d options x %d iterations: %.2f s on the GPU, %.3f ms per launch; L1 error %.2e, max error %.2e\n", n,
           iterations, secs, 1e3 * secs / iterations, l1, maxDelta);
    if (!(l1 < 1e-6)) { printf("FAIL black_scholes: L1 error %.2e\n", l1); return 1; }
    printf("PASS black_scholes\n");
    return 0;
}
