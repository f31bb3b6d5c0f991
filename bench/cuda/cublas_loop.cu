// cuBLAS through libvcublas, for bench/blas_bench.py: an N^3 SGEMM timed call + synchronisation (after one warm-up),
// and LOOP back-to-back small SGEMMs with one synchronisation at the end (their enqueue time per call: what a
// program sees when cuBLAS calls are fire-and-forget). Prints "key value..." lines.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("FAIL %s %s\n", #x, cudaGetErrorName(e)); exit(1); } } while (0)
#define CB(x) do { cublasStatus_t s = (x); if (s != CUBLAS_STATUS_SUCCESS) { printf("FAIL %s %d\n", #x, (int)s); exit(1); } } while (0)

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv) {
    if (argc != 4) { printf("usage: cublas_loop N REPS LOOP\n"); return 2; }
    const int n = atoi(argv[1]), reps = atoi(argv[2]), loop = atoi(argv[3]);
    cublasHandle_t h;
    CB(cublasCreate(&h));
    std::vector<float> A((size_t)n * n), B((size_t)n * n), C((size_t)n * n);
    for (size_t i = 0; i < A.size(); i++) A[i] = (float)((i * 7 + 3) % 13) / 13.0f - 0.5f;
    for (size_t i = 0; i < B.size(); i++) B[i] = (float)((i * 5 + 1) % 11) / 11.0f - 0.5f;
    float *dA, *dB, *dC;
    CK(cudaMalloc((void **)&dA, A.size() * 4));
    CK(cudaMalloc((void **)&dB, B.size() * 4));
    CK(cudaMalloc((void **)&dC, C.size() * 4));
    double t0 = now_us();
    CK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice));
    printf("upload_us %.0f\n", now_us() - t0);
    const float one = 1.0f, zero = 0.0f;
    printf("sgemm_us");
    for (int r = 0; r <= reps; r++) {
        t0 = now_us();
        CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &zero, dC, n));
        CK(cudaDeviceSynchronize());
        if (r > 0) printf(" %.0f", now_us() - t0);       // r == 0: warm-up
    }
    printf("\n");
    t0 = now_us();
    CK(cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost));
    printf("download_us %.0f\n", now_us() - t0);
    double maxerr = 0;                                     // column 0 against a double-precision reference
    for (int i = 0; i < n; i++) {
        double ref = 0;
        for (int l = 0; l < n; l++) ref += (double)A[i + (size_t)l * n] * B[l];
        maxerr = fmax(maxerr, fabs(ref - C[i]));
    }
    printf("maxerr_col0 %.3g\n", maxerr);
    const int m = 64;
    t0 = now_us();
    for (int i = 0; i < loop; i++)
        CB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, dA, m, dB, m, &zero, dC, m));
    double t1 = now_us();
    CK(cudaDeviceSynchronize());
    printf("loop_calls %d\nloop_enqueue_ns %.0f\nloop_total_us %.0f\n", loop, loop ? (t1 - t0) * 1000.0 / loop : 0.0,
           now_us() - t0);
    CB(cublasDestroy(h));
    return 0;
}
