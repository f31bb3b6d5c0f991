// cuBLASLt the way PyTorch calls it (aten/src/ATen/cuda/CUDABlas.cpp: gemm_and_bias and bgemm_internal_cublaslt),
// unmodified code built with -lcublasLt, on every GPU (one thread, handle and stream each):
//   linear_<type>: nn.Linear / addmm with a bias vector: D = epilogue(W^T X + b) with transa = T, epilogues BIAS,
//                  RELU_BIAS, GELU_BIAS, for fp32, fp16 and bf16 (fp32 compute and scale), beta = 0, C == D;
//   bmm_fp16:      a strided batch (batch count and strided batch offsets on every layout), transb = T, beta = 1;
//   addmm_fp32:    alpha/beta in device memory (CUBLASLT_POINTER_MODE_DEVICE), D out of place.
// Preferences as PyTorch sets them (workspace size, the pointers' alignments), a workspace from cudaMalloc, the
// heuristic's algorithm passed to cublasLtMatmul. Inputs (as stored, widened to float) and results go to
// DIR/gpu<N>_<name>.bin for a NumPy check; prints "OK <gpus>".
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "check.h"

#define CHECK_LT(call)                                                                                 \
    do {                                                                                               \
        cublasStatus_t s_ = (call);                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
            printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cublasLtGetStatusName(s_));     \
            fflush(stdout);                                                                            \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static std::string g_dir;
static const size_t kWorkspace = 1 << 20;      // PyTorch's default CUBLASLT_WORKSPACE_SIZE (1024 KiB)

static void dump(int dev, const std::string &name, const std::vector<float> &v) {
    std::string path = g_dir + "/gpu" + std::to_string(dev) + "_" + name + ".bin";
    FILE *f = fopen(path.c_str(), "wb");
    EXPECT(f && fwrite(v.data(), sizeof(float), v.size(), f) == v.size());
    fclose(f);
}

static float next(unsigned &s) {
    s = s * 1664525u + 1013904223u;
    return (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

// Elements of one storage type: to and from float on the host.
struct F32 { typedef float T; static T to(float x) { return x; } static float from(T x) { return x; }
             static const cudaDataType type = CUDA_R_32F; static const char *name() { return "fp32"; } };
struct F16 { typedef __half T; static T to(float x) { return __float2half(x); }
             static float from(T x) { return __half2float(x); }
             static const cudaDataType type = CUDA_R_16F; static const char *name() { return "fp16"; } };
struct BF16 { typedef __nv_bfloat16 T; static T to(float x) { return __float2bfloat16(x); }
              static float from(T x) { return __bfloat162float(x); }
              static const cudaDataType type = CUDA_R_16BF; static const char *name() { return "bf16"; } };

template <class E> struct Buf {
    std::vector<typename E::T> h;
    typename E::T *d = nullptr;
    Buf(size_t n, unsigned &seed, cudaStream_t s) : h(n) {
        for (auto &v : h) v = E::to(next(seed));
        CHECK(cudaMalloc((void **)&d, n * sizeof(typename E::T)));
        CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(typename E::T), cudaMemcpyHostToDevice, s));
    }
    std::vector<float> stored() const {
        std::vector<float> out(h.size());
        for (size_t i = 0; i < h.size(); i++) out[i] = E::from(h[i]);
        return out;
    }
    std::vector<float> device(cudaStream_t s) const {
        std::vector<typename E::T> back(h.size());
        CHECK(cudaMemcpyAsync(back.data(), d, back.size() * sizeof(typename E::T), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        std::vector<float> out(back.size());
        for (size_t i = 0; i < back.size(); i++) out[i] = E::from(back[i]);
        return out;
    }
};

static uint32_t alignment(const void *p) {       // PyTorch's _getAlignment
    uint32_t a = 256;
    while ((uintptr_t)p % a) a /= 2;
    return a;
}

struct Gpu {
    int dev;
    cublasLtHandle_t lt;
    cudaStream_t s;
    void *workspace;
};

// The heuristic's first algorithm and cublasLtMatmul, as gemm_and_bias / bgemm_internal_cublaslt call them.
static void matmul(Gpu &g, cublasLtMatmulDesc_t desc, const void *alpha, const void *A, cublasLtMatrixLayout_t la,
                   const void *B, cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                   cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld) {
    cublasLtMatmulPreference_t pref;
    CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = kWorkspace;
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    uint32_t al[3] = {alignment(A), alignment(B), alignment(C)};
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(g.lt, desc, la, lb, lc, ld, pref, 1, &result, &found));
    EXPECT(found == 1 && result.state == CUBLAS_STATUS_SUCCESS && result.workspaceSize <= ws);
    CHECK_LT(cublasLtMatmul(g.lt, desc, alpha, A, la, B, lb, beta, C, lc, D, ld, &result.algo, g.workspace, ws, g.s));
    CHECK_LT(cublasLtMatmulPreferenceDestroy(pref));
}

// nn.Linear: Y (N x out, row-major) = X (N x in) W^T + b, i.e. column-major D (out x N) = op(W) X with
// W stored in x out (ld in, transa = T) and X in x N (ld in).
template <class E> static void linear(Gpu &g, cublasLtEpilogue_t epilogue, unsigned &seed) {
    const int out = 24, in = 40, n = 16;
    Buf<E> W(in * out, seed, g.s), X(in * n, seed, g.s), bias(out, seed, g.s), Y(out * n, seed, g.s);
    cublasLtMatmulDesc_t desc;
    CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    const void *bp = bias.d;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
    cublasLtMatrixLayout_t la, lb, lc;
    CHECK_LT(cublasLtMatrixLayoutCreate(&la, E::type, in, out, in));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lb, E::type, in, n, in));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lc, E::type, out, n, out));
    const float alpha = 1.0f, beta = 0.0f;
    matmul(g, desc, &alpha, W.d, la, X.d, lb, &beta, Y.d, lc, Y.d, lc);
    std::string name = std::string("linear_") + E::name();
    dump(g.dev, name + "_W", W.stored()), dump(g.dev, name + "_X", X.stored());
    dump(g.dev, name + "_b", bias.stored()), dump(g.dev, name + "_Y", Y.device(g.s));
    CHECK_LT(cublasLtMatrixLayoutDestroy(la));
    CHECK_LT(cublasLtMatrixLayoutDestroy(lb));
    CHECK_LT(cublasLtMatrixLayoutDestroy(lc));
    CHECK_LT(cublasLtMatmulDescDestroy(desc));
}

// torch.bmm in fp16 through bgemm_internal_cublaslt: C[i] = A[i] B[i]^T + C[i], strided batches with gaps.
static void bmm_fp16(Gpu &g, unsigned &seed) {
    const int m = 8, n = 12, k = 20, batch = 3;
    const int64_t sa = m * k + 5, sb = n * k + 3, sc = m * n + 7;
    Buf<F16> A(sa * batch, seed, g.s), B(sb * batch, seed, g.s), C(sc * batch, seed, g.s);
    dump(g.dev, "bmm_fp16_C0", C.stored());
    cublasLtMatmulDesc_t desc;
    CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t tb = CUBLAS_OP_T;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t l[3];
    const int rows[3] = {m, n, m}, cols[3] = {k, k, n};
    const int64_t strides[3] = {sa, sb, sc};
    for (int i = 0; i < 3; i++) {
        CHECK_LT(cublasLtMatrixLayoutCreate(&l[i], CUDA_R_16F, rows[i], cols[i], rows[i]));
        CHECK_LT(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
        CHECK_LT(cublasLtMatrixLayoutSetAttribute(l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                  sizeof strides[i]));
    }
    const float alpha = 1.0f, beta = 1.0f;
    matmul(g, desc, &alpha, A.d, l[0], B.d, l[1], &beta, C.d, l[2], C.d, l[2]);
    dump(g.dev, "bmm_fp16_A", A.stored()), dump(g.dev, "bmm_fp16_B", B.stored());
    dump(g.dev, "bmm_fp16_C", C.device(g.s));
    for (auto x : l) CHECK_LT(cublasLtMatrixLayoutDestroy(x));
    CHECK_LT(cublasLtMatmulDescDestroy(desc));
}

// D = alpha A B + beta C with alpha/beta read from device memory, D out of place.
static void addmm_fp32(Gpu &g, unsigned &seed) {
    const int m = 10, n = 7, k = 9;
    Buf<F32> A(m * k, seed, g.s), B(k * n, seed, g.s), C(m * n, seed, g.s), D(m * n, seed, g.s);
    float scalars[2] = {0.75f, -2.0f}, *ds;
    CHECK(cudaMalloc((void **)&ds, sizeof scalars));
    CHECK(cudaMemcpyAsync(ds, scalars, sizeof scalars, cudaMemcpyHostToDevice, g.s));
    cublasLtMatmulDesc_t desc;
    CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm));
    cublasLtMatrixLayout_t la, lb, lc;
    CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m));
    matmul(g, desc, ds, A.d, la, B.d, lb, ds + 1, C.d, lc, D.d, lc);
    dump(g.dev, "addmm_fp32_A", A.stored()), dump(g.dev, "addmm_fp32_B", B.stored());
    dump(g.dev, "addmm_fp32_C", C.stored()), dump(g.dev, "addmm_fp32_C_after", C.device(g.s));
    dump(g.dev, "addmm_fp32_D", D.device(g.s));
    CHECK_LT(cublasLtMatrixLayoutDestroy(la));
    CHECK_LT(cublasLtMatrixLayoutDestroy(lb));
    CHECK_LT(cublasLtMatrixLayoutDestroy(lc));
    CHECK_LT(cublasLtMatmulDescDestroy(desc));
}

static void run(int dev) {
    CHECK(cudaSetDevice(dev));
    Gpu g{dev, nullptr, nullptr, nullptr};
    CHECK_LT(cublasLtCreate(&g.lt));
    CHECK(cudaStreamCreate(&g.s));
    CHECK(cudaMalloc(&g.workspace, kWorkspace));
    unsigned seed = 4321u + 101u * dev;
    linear<F32>(g, CUBLASLT_EPILOGUE_BIAS, seed);
    linear<F16>(g, CUBLASLT_EPILOGUE_RELU_BIAS, seed);
    linear<BF16>(g, CUBLASLT_EPILOGUE_GELU_BIAS, seed);
    bmm_fp16(g, seed);
    addmm_fp32(g, seed);
    CHECK(cudaStreamSynchronize(g.s));
    CHECK_LT(cublasLtDestroy(g.lt));
}

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    g_dir = argv[1];
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    EXPECT(n >= 1);
    EXPECT(cublasLtGetVersion() / 10000 == 13);
    std::vector<std::thread> threads;
    for (int d = 0; d < n; d++) threads.emplace_back(run, d);
    for (auto &t : threads) t.join();
    printf("OK %d\n", n);
    return 0;
}
