// Issue 9's "done when" program, unmodified cuBLAS code built with -lcublas: cublasSgemm, cublasGemmStridedBatchedEx
// (fp16 inputs, fp32 output and compute), cublasSgemv and cublasSaxpy on every GPU, one thread and one handle per
// GPU, each on its own stream. Inputs and results go to DIR/gpu<N>_<name>.bin for a NumPy check; prints "OK <gpus>".
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cublas_check.h"

static std::string g_dir;

template <typename T> static void dump(int dev, const char *name, const std::vector<T> &v) {
    std::string path = g_dir + "/gpu" + std::to_string(dev) + "_" + name + ".bin";
    FILE *f = fopen(path.c_str(), "wb");
    EXPECT(f && fwrite(v.data(), sizeof(T), v.size(), f) == v.size());
    fclose(f);
}

static float next(unsigned &s) {
    s = s * 1664525u + 1013904223u;
    return (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

template <typename T> static T *upload(const std::vector<T> &h, cudaStream_t s) {
    T *d;
    CHECK(cudaMalloc((void **)&d, h.size() * sizeof(T)));
    CHECK(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, s));
    return d;
}

template <typename T> static std::vector<T> download(const T *d, size_t n, cudaStream_t s) {
    std::vector<T> h(n);
    CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    return h;
}

static void run(int dev) {
    CHECK(cudaSetDevice(dev));
    cublasHandle_t h;
    CHECK_BLAS(cublasCreate(&h));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK_BLAS(cublasSetStream(h, s));
    unsigned seed = 1234u + 77u * dev;

    // C = 1.5 A B^T - 0.5 C: A m x k (lda = m + 3), B n x k, C m x n
    const int m = 64, n = 48, k = 32, lda = m + 3;
    std::vector<float> A(lda * k), B(n * k), C(m * n);
    for (auto &v : A) v = next(seed);
    for (auto &v : B) v = next(seed);
    for (auto &v : C) v = next(seed);
    float *dA = upload(A, s), *dB = upload(B, s), *dC = upload(C, s);
    const float alpha = 1.5f, beta = -0.5f;
    CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, dA, lda, dB, n, &beta, dC, m));
    dump(dev, "sgemm_A", A), dump(dev, "sgemm_B", B), dump(dev, "sgemm_C0", C);
    dump(dev, "sgemm_C", download(dC, C.size(), s));

    // batch of 3: C[i] = A[i]^T B[i], fp16 A (k x m, stride k*m + 5) and B (k x n), fp32 C, fp32 compute
    const int bm = 16, bn = 24, bk = 40, batch = 3;
    const long long sa = bk * bm + 5, sb = bk * bn, sc = bm * bn;
    std::vector<__half> HA(sa * batch), HB(sb * batch);
    for (auto &v : HA) v = __float2half(next(seed));
    for (auto &v : HB) v = __float2half(next(seed));
    std::vector<float> HC(sc * batch, 0.0f);
    __half *dHA = upload(HA, s), *dHB = upload(HB, s);
    float *dHC = upload(HC, s);
    const float one = 1.0f, zero = 0.0f;
    CHECK_BLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, bm, bn, bk, &one, dHA, CUDA_R_16F, bk, sa,
                                          dHB, CUDA_R_16F, bk, sb, &zero, dHC, CUDA_R_32F, bm, sc, batch,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    dump(dev, "gemmex_A", HA), dump(dev, "gemmex_B", HB);
    dump(dev, "gemmex_C", download(dHC, HC.size(), s));

    // y = 2 A^T x + y (A 40 x 30, lda 40), then y[0:20] += -1.25 x[0:40:2]
    const int gm = 40, gn = 30;
    std::vector<float> GA(gm * gn), gx(gm), gy(gn);
    for (auto &v : GA) v = next(seed);
    for (auto &v : gx) v = next(seed);
    for (auto &v : gy) v = next(seed);
    float *dGA = upload(GA, s), *dgx = upload(gx, s), *dgy = upload(gy, s);
    const float two = 2.0f, ones = 1.0f, a2 = -1.25f;
    CHECK_BLAS(cublasSgemv(h, CUBLAS_OP_T, gm, gn, &two, dGA, gm, dgx, 1, &ones, dgy, 1));
    dump(dev, "sgemv_A", GA), dump(dev, "sgemv_x", gx), dump(dev, "sgemv_y0", gy);
    dump(dev, "sgemv_y", download(dgy, gy.size(), s));
    CHECK_BLAS(cublasSaxpy(h, gm / 2, &a2, dgx, 2, dgy, 1));  // x read at 0, 2, ..., 38: 20 elements into y[0:20]
    dump(dev, "saxpy_y", download(dgy, gy.size(), s));

    for (void *p : {(void *)dA, (void *)dB, (void *)dC, (void *)dHA, (void *)dHB, (void *)dHC, (void *)dGA,
                    (void *)dgx, (void *)dgy})
        CHECK(cudaFree(p));
    CHECK_BLAS(cublasDestroy(h));
    CHECK(cudaStreamDestroy(s));
}

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    g_dir = argv[1];
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    std::vector<std::thread> ts;
    for (int d = 0; d < ndev; d++) ts.emplace_back(run, d);
    for (auto &t : ts) t.join();
    printf("OK %d\n", ndev);
    return 0;
}
