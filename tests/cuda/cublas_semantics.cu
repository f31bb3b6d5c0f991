// cuBLAS semantics through libvcublas: statuses the client answers at once, calls ordered with kernels and copies
// on one stream (fire-and-forget: one synchronisation at the end), device pointer mode (scalars written by a
// kernel just before the call, a result consumed by a kernel just after), host-mode results, beta == 0 over NaN,
// per-call math mode, handle state, the copy helpers (Set/GetMatrix/Vector), unsupported functions.
// Prints "OK <checks>".
#include <cublas_v2.h>
#include <cmath>
#include <string>
#include <cstdio>
#include <vector>

#include "cublas_check.h"

// NVIDIA's libcublas.so.13 exports these without declaring them in its headers (cuSOLVER calls them).
extern "C" cublasStatus_t cublasSetEnvironmentMode(cublasHandle_t handle, int mode);
extern "C" cublasStatus_t cublasGetEnvironmentMode(cublasHandle_t handle, int *mode);

static int checks = 0;
#define OKC(cond) do { EXPECT(cond); checks++; } while (0)

__global__ void iota(float *p, int n, float scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = scale * (float)(i % 7 - 3);
}
__global__ void set2(float *p, float a, float b) { p[0] = a; p[1] = b; }
__global__ void twice(const float *src, float *dst) { dst[0] = 2.0f * src[0]; }
__global__ void nan_fill(float *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = nanf("");
}

int main() {
    cublasHandle_t h;
    EXPECT_BLAS(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, nullptr, 1, nullptr, 1, nullptr,
                            nullptr, 1), CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK_BLAS(cublasCreate(&h));
    int version = 0;
    CHECK_BLAS(cublasGetVersion(h, &version));
    OKC(version == CUBLAS_VERSION);
    OKC(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).find("unsupported value") != std::string::npos);

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK_BLAS(cublasSetStream(h, s));
    const int n = 32;                 // C = A B with A, B n x n written by kernels on the same stream
    float *A, *B, *C, *scal, *res, *res2;
    CHECK(cudaMalloc((void **)&A, n * n * sizeof(float)));
    CHECK(cudaMalloc((void **)&B, n * n * sizeof(float)));
    CHECK(cudaMalloc((void **)&C, n * n * sizeof(float)));
    CHECK(cudaMalloc((void **)&scal, 2 * sizeof(float)));
    CHECK(cudaMalloc((void **)&res, sizeof(float)));
    CHECK(cudaMalloc((void **)&res2, sizeof(float)));

    // Invalid arguments: refused at once, nothing reaches the GPU.
    const float one = 1.0f, zero = 0.0f;
    EXPECT_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, n, n, &one, A, n, B, n, &zero, C, n),
                CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n - 1, B, n, &zero, C, n),
                CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasSgemv(h, CUBLAS_OP_N, n, n, &one, A, n, B, 0, &zero, C, 1), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_32F, n, B, CUDA_R_32F, n, &zero,
                             C, CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_BLAS(cublasSetPointerMode(h, (cublasPointerMode_t)3), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasStrmm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, n, n, &one,
                            A, n, B, n, C, n), CUBLAS_STATUS_NOT_SUPPORTED);
    checks += 7;

    // Ordered on one stream, no synchronisation in between: kernels write A, B and NaN into C; beta == 0
    // must not let the NaN through; device-mode alpha/beta written by a kernel right before the call.
    iota<<<(n * n + 127) / 128, 128, 0, s>>>(A, n * n, 0.5f);
    iota<<<(n * n + 127) / 128, 128, 0, s>>>(B, n * n, -0.25f);
    nan_fill<<<(n * n + 127) / 128, 128, 0, s>>>(C, n * n);
    CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n));
    set2<<<1, 1, 0, s>>>(scal, 2.0f, -1.0f);                       // alpha = 2, beta = -1
    CHECK_BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, n, n, n, scal, A, n, B, n, scal + 1, C, n));
    CHECK_BLAS(cublasSdot(h, n * n, C, 1, C, 1, res));             // device-mode result ...
    twice<<<1, 1, 0, s>>>(res, res2);                              // ... consumed by a kernel on the stream
    CHECK_BLAS(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    float hostdot = 0.0f;
    CHECK_BLAS(cublasSdot(h, n * n, C, 1, C, 1, &hostdot));        // host-mode result: waits for the value
    std::vector<float> c(n * n);
    float d2 = 0.0f;
    CHECK(cudaMemcpyAsync(c.data(), C, n * n * sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(&d2, res2, sizeof(float), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    std::vector<double> a(n * n), b(n * n);
    for (int i = 0; i < n * n; i++) a[i] = 0.5 * (i % 7 - 3), b[i] = -0.25 * (i % 7 - 3);
    double dot = 0.0, maxerr = 0.0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            double ab = 0.0, abt = 0.0;
            for (int l = 0; l < n; l++) ab += a[i + l * n] * b[l + j * n], abt += a[i + l * n] * b[j + l * n];
            double want = 2.0 * abt - ab;
            maxerr = fmax(maxerr, fabs(c[i + j * n] - want));
            dot += want * want;
        }
    OKC(maxerr < 1e-3);
    OKC(fabs(hostdot - dot) <= 1e-4 * dot);
    OKC(fabs(d2 - 2.0 * dot) <= 2e-4 * dot);

    // Level 1 on the same handle: host-mode index result, scal with a negative n (a quick return).
    int idx = 0;
    CHECK_BLAS(cublasIsamax(h, n * n, C, 1, &idx));
    int best = 0;
    for (int i = 1; i < n * n; i++)
        if (fabsf(c[i]) > fabsf(c[best])) best = i;
    OKC(idx == best + 1);
    const float three = 3.0f;
    CHECK_BLAS(cublasSscal(h, -5, &three, C, 1));

    // The copy helpers: a 5 x 3 block (lda 7) into a device matrix with ldb 6 and back into ld 5; strided vectors.
    {
        std::vector<float> ha(7 * 3), hb(5 * 3, -1.0f), hv(9), hw(3, 0.0f);
        for (int i = 0; i < 21; i++) ha[i] = (float)i;
        for (int i = 0; i < 9; i++) hv[i] = 100.0f + i;
        float *dm, *dv;
        CHECK(cudaMalloc((void **)&dm, 6 * 3 * sizeof(float)));
        CHECK(cudaMalloc((void **)&dv, 6 * sizeof(float)));
        CHECK_BLAS(cublasSetMatrix(5, 3, sizeof(float), ha.data(), 7, dm, 6));
        CHECK_BLAS(cublasGetMatrixAsync(5, 3, sizeof(float), dm, 6, hb.data(), 5, s));
        CHECK(cudaStreamSynchronize(s));
        bool same = true;
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 5; i++) same = same && hb[i + 5 * j] == ha[i + 7 * j];
        OKC(same);
        CHECK_BLAS(cublasSetVector(3, sizeof(float), hv.data(), 4, dv, 2));       // hv[0], hv[4], hv[8] -> dv[0, 2, 4]
        CHECK_BLAS(cublasGetVector(3, sizeof(float), dv, 2, hw.data(), 1));
        OKC(hw[0] == 100.0f && hw[1] == 104.0f && hw[2] == 108.0f);
        EXPECT_BLAS(cublasSetVector(3, sizeof(float), hv.data(), 0, dv, 1), CUBLAS_STATUS_INVALID_VALUE);
        EXPECT_BLAS(cublasSetMatrix(5, 3, sizeof(float), ha.data(), 4, dm, 6), CUBLAS_STATUS_INVALID_VALUE);
        EXPECT_BLAS(cublasGetVector(3, sizeof(float), hv.data(), 1, hw.data(), 1), CUBLAS_STATUS_MAPPING_ERROR);
        EXPECT_BLAS(cublasSetMatrix(6, 3, sizeof(float), ha.data(), 7, dm, 7), CUBLAS_STATUS_MAPPING_ERROR);  // past the end
        checks += 4;
        CHECK(cudaFree(dm));
        CHECK(cudaFree(dv));
    }

    // Handle state.
    cudaStream_t got;
    CHECK_BLAS(cublasGetStream(h, &got));
    OKC(got == s);
    CHECK_BLAS(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    cublasMath_t mm;
    CHECK_BLAS(cublasGetMathMode(h, &mm));
    OKC(mm == CUBLAS_TF32_TENSOR_OP_MATH);
    cublasAtomicsMode_t am;
    CHECK_BLAS(cublasGetAtomicsMode(h, &am));
    OKC(am == CUBLAS_ATOMICS_NOT_ALLOWED);                  // the documented default
    CHECK_BLAS(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_ALLOWED));
    CHECK_BLAS(cublasGetAtomicsMode(h, &am));
    OKC(am == CUBLAS_ATOMICS_ALLOWED);
    // Exported by libcublas.so.13 but not in its headers; cusolverDnCreate sets 1. NVIDIA's: 0 at creation, 0 or 1
    // accepted, anything else CUBLAS_STATUS_INVALID_VALUE.
    int env = -1;
    CHECK_BLAS(cublasGetEnvironmentMode(h, &env));
    OKC(env == 0);
    CHECK_BLAS(cublasSetEnvironmentMode(h, 1));
    CHECK_BLAS(cublasGetEnvironmentMode(h, &env));
    OKC(env == 1);
    EXPECT_BLAS(cublasSetEnvironmentMode(h, 2), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_BLAS(cublasGetEnvironmentMode(h, nullptr), CUBLAS_STATUS_INVALID_VALUE);
    checks += 2;
    CHECK_BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n));
    CHECK(cudaDeviceSynchronize());
    CHECK_BLAS(cublasDestroy(h));
    EXPECT_BLAS(cublasDestroy(h), CUBLAS_STATUS_NOT_INITIALIZED);
    checks++;
    printf("OK %d\n", checks);
    return 0;
}
