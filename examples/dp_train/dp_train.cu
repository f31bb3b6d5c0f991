// dp_train: data-parallel MLP training on several GPUs of one machine, parameters synchronized on the host.
//
// Ordinary single-machine multi-GPU CUDA code: one host thread per GPU (std::thread + cudaSetDevice), the global
// batch split across the GPUs, gradients copied to the host after every step, averaged on the CPU (the host acts
// as parameter server) and copied back; every GPU then applies the same SGD update to its own copy of the
// parameters. Its own kernels by default (no vendor library); built with -DDP_TRAIN_CUBLAS -lcublas, --gemm cublas
// does the products with cublasSgemm instead. No pyvgpu-specific call: the same binary runs on a real multi-GPU
// machine and, under pyvgpu (LD_PRELOAD=libvcudart.so), on GPUs spread over several hosts.
//
// Build: nvcc -cudart shared -O3 -std=c++17 -o dp_train dp_train.cu   (make CUBLAS=1: with --gemm cublas)
// Run:   ./dp_train --data DIR --gpus 2 --batch 100 --hidden 128 --steps 300 --log-every 50
//        ./dp_train --data DIR --cpu                        (the same training on the CPU: the baseline)
//
// Model: input -> hidden layers (ReLU) -> 10 classes, softmax cross-entropy, plain SGD (w -= lr * g).
// Every GPU computes the gradient of its slice of the global batch already divided by the GLOBAL batch size, so
// the sum of the per-GPU gradients is exactly the gradient of the mean loss over the global batch whatever the
// split: "averaging" weights every GPU by its share, and a 1-GPU, an N-GPU and an adaptively balanced run compute
// the same mathematics (they differ only by floating-point summation order).
//
// Output: lines of key=value pairs (machine-readable; lines starting with '#' are comments):
//   step=S epoch=E loss=L test_err=T ms_per_1000=W busy_per_1000=D busy_gpu=d0,d1,.. shares=n0,n1,..
//   final steps=S loss=L test_err=T wall_s=.. warmup_ms=.. ms_per_1000=W busy_per_1000=D ...
// The first step is a warm-up (lazy module loading): its time is reported as warmup_ms, not in the rates.
// loss: mean training loss over the steps of the interval; ms_per_1000: wall time per 1000 batches in the
// interval (evaluation excluded); busy_per_1000: device-busy time per 1000 batches measured with CUDA events
// around each GPU's kernels (maximum over GPUs; busy_gpu lists every GPU). ms_per_1000 - busy_per_1000 is the
// time the GPUs were not computing: copies, host averaging, launch latency (and, remotely, the network).

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#ifdef DP_TRAIN_CUBLAS   // make CUBLAS=1: --gemm cublas does the products with cublasSgemm
#include <cublas_v2.h>
#define CKB(call)                                                                                         \
    do {                                                                                                  \
        cublasStatus_t s_ = (call);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                \
            fprintf(stderr, "dp_train: cuBLAS error %s at %s:%d in %s\n", cublasGetStatusName(s_),       \
                    __FILE__, __LINE__, #call);                                                           \
            fflush(stdout);                                                                               \
            _exit(2);                                                                                     \
        }                                                                                                 \
    } while (0)
#endif

#define CK(call)                                                                                          \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "dp_train: CUDA error %s (%d) at %s:%d in %s: %s\n", cudaGetErrorName(e_),     \
                    (int)e_, __FILE__, __LINE__, #call, cudaGetErrorString(e_));                          \
            fflush(stdout);                                                                               \
            _exit(2); /* from any GPU thread, without running exit handlers under other threads' calls */ \
        }                                                                                                 \
    } while (0)

static void die(const char* fmt, const char* arg = "") {
    fprintf(stderr, "dp_train: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(1);
}

// ------------------------------------------------------------------------------------------------------------------
// Kernels
// ------------------------------------------------------------------------------------------------------------------

constexpr int TILE = 16;
enum Epilogue { EPI_STORE = 0, EPI_BIAS = 1, EPI_BIAS_RELU = 2, EPI_RELU_MASK = 3 };

// C[M x N] = op(A)[M x K] * op(B)[K x N], row-major with leading dimensions lda/ldb/ldc.
// TA: A is stored K x M (element (m,k) at A[k*lda+m]); TB: B is stored N x K (element (k,n) at B[n*ldb+k]).
// Epilogue: EPI_BIAS adds aux[n]; EPI_BIAS_RELU adds aux[n] then max(0, .); EPI_RELU_MASK keeps the value where
// aux[m*ldaux+n] > 0 (aux = the ReLU output of the layer below) and stores 0 elsewhere.
// Every output element is one thread's sum over k = 0..K-1 in order: the result does not depend on the grid.
template <bool TA, bool TB, int EPI>
__global__ void gemm_kernel(int M, int N, int K, const float* __restrict__ A, int lda, const float* __restrict__ B,
                            int ldb, float* __restrict__ C, int ldc, const float* __restrict__ aux, int ldaux) {
    __shared__ float As[TILE][TILE + 1];  // As[m][k]
    __shared__ float Bs[TILE][TILE + 1];  // Bs[k][n]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int m0 = blockIdx.y * TILE, n0 = blockIdx.x * TILE;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        if (TA) {  // coalesced along m: thread (tx,ty) loads m = m0+tx, k = k0+ty
            int m = m0 + tx, k = k0 + ty;
            As[tx][ty] = (m < M && k < K) ? A[(size_t)k * lda + m] : 0.f;
        } else {   // coalesced along k
            int m = m0 + ty, k = k0 + tx;
            As[ty][tx] = (m < M && k < K) ? A[(size_t)m * lda + k] : 0.f;
        }
        if (TB) {  // coalesced along k: thread loads n = n0+ty, k = k0+tx
            int n = n0 + ty, k = k0 + tx;
            Bs[tx][ty] = (n < N && k < K) ? B[(size_t)n * ldb + k] : 0.f;
        } else {   // coalesced along n
            int n = n0 + tx, k = k0 + ty;
            Bs[ty][tx] = (n < N && k < K) ? B[(size_t)k * ldb + n] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) acc = fmaf(As[ty][k], Bs[k][tx], acc);
        __syncthreads();
    }
    const int m = m0 + ty, n = n0 + tx;
    if (m < M && n < N) {
        float v = acc;
        if (EPI == EPI_BIAS) v += aux[n];
        if (EPI == EPI_BIAS_RELU) v = fmaxf(v + aux[n], 0.f);
        if (EPI == EPI_RELU_MASK) v = aux[(size_t)m * ldaux + n] > 0.f ? v : 0.f;
        C[(size_t)m * ldc + n] = v;
    }
}

// out[j] = sum over rows i < n of X[i*ld + j], j < m. Block (16,16): tx picks the column, ty strides the rows,
// then a fixed-order tree over ty: deterministic.
__global__ void colsum_kernel(const float* __restrict__ X, int n, int m, int ld, float* __restrict__ out) {
    __shared__ float part[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int j = blockIdx.x * TILE + tx;
    float s = 0.f;
    if (j < m)
        for (int i = ty; i < n; i += TILE) s += X[(size_t)i * ld + j];
    part[ty][tx] = s;
    __syncthreads();
    for (int h = TILE / 2; h > 0; h >>= 1) {
        if (ty < h) part[ty][tx] += part[ty + h][tx];
        __syncthreads();
    }
    if (ty == 0 && j < m) out[j] = part[0][tx];
}

// Softmax cross-entropy, one thread per row: dz[i, c] = (softmax(z_i)_c - [c == y_i]) * inv_batch for c < C and
// dz[i, C] = -log softmax(z_i)_{y_i} * inv_batch (the row's loss share; ldz = C + 1).
__global__ void xent_kernel(const float* __restrict__ z, int n, int C, const int* __restrict__ labels,
                            float inv_batch, float* __restrict__ dz) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* zi = z + (size_t)i * C;
    float* di = dz + (size_t)i * (C + 1);
    const int y = labels[i];
    float mx = zi[0];
    for (int c = 1; c < C; ++c) mx = fmaxf(mx, zi[c]);
    float sum = 0.f;
    for (int c = 0; c < C; ++c) sum += expf(zi[c] - mx);
    const float inv = 1.f / sum;
    for (int c = 0; c < C; ++c) di[c] = (expf(zi[c] - mx) * inv - (c == y ? 1.f : 0.f)) * inv_batch;
    di[C] = (logf(sum) - (zi[y] - mx)) * inv_batch;
}

__global__ void sgd_kernel(float* __restrict__ w, const float* __restrict__ g, float lr, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) w[i] -= lr * g[i];
}

// ------------------------------------------------------------------------------------------------------------------
// Options, PRNG, data
// ------------------------------------------------------------------------------------------------------------------

struct Options {
    int gpus = 1;
    int batch = 100;
    std::vector<int> hidden{128};
    long steps = 200;
    double epochs = 0;  // > 0 overrides steps
    float lr = 0.3f;
    uint64_t seed = 1;
    bool ring = false;
    bool adaptive = false;
    bool cpu = false;
    std::string data;
    long log_every = 50;
    int threads = 1;
    int train_limit = 0;  // use only the first N training samples (0 = all)
    int test_limit = 0;
    bool cublas = false;  // --gemm cublas: cublasSgemm for the products (own kernels: the default, the reference)
};

static void usage() {
    printf(
        "usage: dp_train [--gpus N] [--batch B] [--hidden 128[,64..]] [--steps S | --epochs E] [--lr LR]\n"
        "                [--seed S] [--sync ps|ring] [--balance static|adaptive] [--cpu] [--threads T]\n"
        "                [--data DIR] [--log-every K] [--train-limit N] [--test-limit N] [--gemm own|cublas]\n"
        "  --data DIR: MNIST-format IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte,\n"
        "              t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte). Default: $DP_TRAIN_DATA, else the digits\n"
        "              cache written by prepare_digits.py ($XDG_CACHE_HOME/pyvgpu/digits or ~/.cache/pyvgpu/digits).\n"
        "  --cpu: train on the CPU only (no CUDA call is made), with --threads T worker threads for the products.\n"
        "  --gemm cublas: the GPU products by cublasSgemm (needs a build with make CUBLAS=1); own: its kernels.\n");
}

static std::vector<int> parse_list(const std::string& s) {
    std::vector<int> out;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        std::string tok = s.substr(i, j - i);
        if (!tok.empty()) {
            int v = atoi(tok.c_str());
            if (v > 0) out.push_back(v);  // "--hidden 0" means no hidden layer
        }
        i = j + 1;
    }
    return out;
}

static Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value for %s", a.c_str());
            return argv[++i];
        };
        if (a == "--gpus") o.gpus = atoi(val().c_str());
        else if (a == "--batch") o.batch = atoi(val().c_str());
        else if (a == "--hidden") o.hidden = parse_list(val());
        else if (a == "--steps") o.steps = atol(val().c_str());
        else if (a == "--epochs") o.epochs = atof(val().c_str());
        else if (a == "--lr") o.lr = (float)atof(val().c_str());
        else if (a == "--seed") o.seed = strtoull(val().c_str(), nullptr, 10);
        else if (a == "--sync") {
            std::string v = val();
            if (v == "ps") o.ring = false;
            else if (v == "ring") o.ring = true;
            else die("--sync must be ps or ring, not %s", v.c_str());
        } else if (a == "--balance") {
            std::string v = val();
            if (v == "static") o.adaptive = false;
            else if (v == "adaptive") o.adaptive = true;
            else die("--balance must be static or adaptive, not %s", v.c_str());
        } else if (a == "--cpu") o.cpu = true;
        else if (a == "--data") o.data = val();
        else if (a == "--log-every") o.log_every = atol(val().c_str());
        else if (a == "--threads") o.threads = atoi(val().c_str());
        else if (a == "--train-limit") o.train_limit = atoi(val().c_str());
        else if (a == "--test-limit") o.test_limit = atoi(val().c_str());
        else if (a == "--gemm") {
            std::string v = val();
            if (v == "own") o.cublas = false;
            else if (v == "cublas") o.cublas = true;
            else die("--gemm must be own or cublas, not %s", v.c_str());
#ifndef DP_TRAIN_CUBLAS
            if (o.cublas) die("--gemm cublas: this dp_train was built without cuBLAS (make CUBLAS=1)");
#endif
        }
        else if (a == "-h" || a == "--help") { usage(); exit(0); }
        else die("unknown option %s (see --help)", a.c_str());
    }
    if (o.gpus < 1) die("--gpus must be >= 1");
    if (o.batch < 1) die("--batch must be >= 1");
    if (o.threads < 1) o.threads = 1;
    if (!o.cpu && o.batch < o.gpus) die("--batch must be at least --gpus");
    return o;
}

// splitmix64: small, fast, identical everywhere. Initialization and shuffling use separate streams.
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return (float)(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
    uint64_t below(uint64_t n) { return next() % n; }
};

struct Dataset {
    int n = 0, dim = 0;
    std::vector<float> x;  // n x dim, pixels / 255
    std::vector<int> y;
};

static uint32_t be32(const unsigned char* p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static std::vector<unsigned char> read_file(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return {};
    std::vector<unsigned char> buf;
    unsigned char tmp[1 << 16];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0) buf.insert(buf.end(), tmp, tmp + k);
    fclose(f);
    return buf;
}

static std::vector<unsigned char> read_first(const std::string& dir, const std::vector<std::string>& names, std::string* used) {
    for (const auto& nm : names) {
        auto b = read_file(dir + "/" + nm);
        if (!b.empty()) { *used = nm; return b; }
    }
    std::string msg = dir + "/" + names[0];
    die("cannot read %s (IDX file; run examples/dp_train/prepare_digits.py or pass --data with MNIST)", msg.c_str());
    return {};
}

static Dataset load_idx(const std::string& dir, const char* prefix, int limit) {
    std::string p = prefix, used;
    auto img = read_first(dir, {p + "-images-idx3-ubyte", p + "-images.idx3-ubyte"}, &used);
    auto lab = read_first(dir, {p + "-labels-idx1-ubyte", p + "-labels.idx1-ubyte"}, &used);
    if (img.size() < 16 || be32(img.data()) != 0x00000803) die("%s: not an IDX3 ubyte image file", prefix);
    if (lab.size() < 8 || be32(lab.data()) != 0x00000801) die("%s: not an IDX1 ubyte label file", prefix);
    Dataset d;
    int n = (int)be32(img.data() + 4), rows = (int)be32(img.data() + 8), cols = (int)be32(img.data() + 12);
    if ((int)be32(lab.data() + 4) != n) die("%s: image and label counts differ", prefix);
    if (img.size() < 16 + (size_t)n * rows * cols || lab.size() < 8 + (size_t)n) die("%s: truncated IDX file", prefix);
    if (limit > 0 && limit < n) n = limit;
    d.n = n;
    d.dim = rows * cols;
    d.x.resize((size_t)n * d.dim);
    d.y.resize(n);
    for (size_t i = 0; i < (size_t)n * d.dim; ++i) d.x[i] = img[16 + i] * (1.0f / 255.0f);
    for (int i = 0; i < n; ++i) {
        d.y[i] = lab[8 + i];
        if (d.y[i] > 9) die("%s: label out of range", prefix);
    }
    return d;
}

static std::string default_data_dir() {
    if (const char* e = getenv("DP_TRAIN_DATA")) return e;
    if (const char* x = getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/pyvgpu/digits";
    const char* h = getenv("HOME");
    return std::string(h ? h : ".") + "/.cache/pyvgpu/digits";
}

// ------------------------------------------------------------------------------------------------------------------
// Model layout (flat parameter vector [W1 b1 W2 b2 ... WL bL], row-major W_l: d[l-1] x d[l])
// ------------------------------------------------------------------------------------------------------------------

struct Model {
    std::vector<int> d;                // d[0] = input, d[L] = 10
    std::vector<size_t> woff, boff;    // per layer l = 1..L (index l-1)
    size_t P = 0;                      // number of parameters; gradient vectors hold P + 1 floats (loss last)
    int L() const { return (int)d.size() - 1; }
};

static Model make_model(int in, const std::vector<int>& hidden, int classes) {
    Model m;
    m.d.push_back(in);
    for (int h : hidden) m.d.push_back(h);
    m.d.push_back(classes);
    for (int l = 1; l <= m.L(); ++l) {
        m.woff.push_back(m.P);
        m.P += (size_t)m.d[l - 1] * m.d[l];
        m.boff.push_back(m.P);
        m.P += m.d[l];
    }
    return m;
}

static std::vector<float> init_params(const Model& m, uint64_t seed) {
    std::vector<float> p(m.P, 0.f);
    Rng r(seed * 2 + 1);
    for (int l = 1; l <= m.L(); ++l) {  // Glorot uniform, zero biases
        float a = std::sqrt(6.0f / (float)(m.d[l - 1] + m.d[l]));
        float* w = p.data() + m.woff[l - 1];
        for (size_t i = 0; i < (size_t)m.d[l - 1] * m.d[l]; ++i) w[i] = (2.f * r.uniform() - 1.f) * a;
    }
    return p;
}

// Batches: every epoch a fresh permutation (own PRNG stream); batch k of the epoch = perm[k*B, (k+1)*B).
struct Schedule {
    const Dataset* train;
    int batch;
    long per_epoch;
    Rng rng;
    std::vector<int> perm;
    long epoch = -1;
    Schedule(const Dataset* t, int b, uint64_t seed) : train(t), batch(b), rng(seed * 2 + 2) {
        per_epoch = std::max<long>(1, t->n / b);
        perm.resize(t->n);
    }
    const int* batch_indices(long step) {  // steps are requested in increasing order
        long e = step / per_epoch;
        while (epoch < e) {
            for (int i = 0; i < train->n; ++i) perm[i] = i;
            for (int i = train->n - 1; i > 0; --i) std::swap(perm[i], perm[rng.below((uint64_t)i + 1)]);
            ++epoch;
        }
        long k = step % per_epoch;
        return perm.data() + (size_t)k * batch;
    }
};

static void gather(const Dataset& ds, const int* idx, int n, float* x, int* y) {
    for (int r = 0; r < n; ++r) {
        memcpy(x + (size_t)r * ds.dim, ds.x.data() + (size_t)idx[r] * ds.dim, sizeof(float) * ds.dim);
        y[r] = ds.y[idx[r]];
    }
}

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static int count_errors(const float* logits, const int* y, int n, int C) {
    int err = 0;
    for (int i = 0; i < n; ++i) {
        const float* z = logits + (size_t)i * C;
        int best = 0;
        for (int c = 1; c < C; ++c)
            if (z[c] > z[best]) best = c;
        err += best != y[i];
    }
    return err;
}

// Host reporting shared by both paths. The first step is a warm-up (module loading, first-touch allocations): its
// loss counts, its time is reported separately (warmup_ms) and left out of the per-1000-batch figures.
struct Reporter {
    long interval_steps = 0, interval_timed = 0;
    double interval_loss = 0, interval_wall = 0;
    std::vector<double> interval_busy;
    long total_steps = 0, total_timed = 0;
    double total_wall = 0, warmup_ms = 0;
    std::vector<double> total_busy;
    explicit Reporter(int ngpu) : interval_busy(ngpu, 0.0), total_busy(ngpu, 0.0) {}
    bool timed() const { return total_steps > 1; }  // call after add_step
    void add_step(double loss, double wall_ms) {
        ++interval_steps;
        ++total_steps;
        interval_loss += loss;
        if (!timed()) { warmup_ms = wall_ms; return; }
        ++interval_timed;
        ++total_timed;
        interval_wall += wall_ms;
        total_wall += wall_ms;
    }
    void add_busy(int g, double ms) {  // after add_step of the same step
        if (!timed()) return;
        interval_busy[g] += ms;
        total_busy[g] += ms;
    }
    static std::string join(const std::vector<double>& v, double scale) {
        std::string s;
        char buf[64];
        for (size_t i = 0; i < v.size(); ++i) {
            snprintf(buf, sizeof buf, "%s%.1f", i ? "," : "", v[i] * scale);
            s += buf;
        }
        return s;
    }
    void print(long step, double epoch, double test_err, const std::vector<int>* shares, bool has_busy) {
        double per = interval_timed ? 1000.0 / interval_timed : 0;
        printf("step=%ld epoch=%.3f loss=%.6f test_err=%.4f ms_per_1000=%.1f", step, epoch,
               interval_steps ? interval_loss / interval_steps : 0.0, test_err, interval_wall * per);
        if (has_busy)
            printf(" busy_per_1000=%.1f busy_gpu=%s",
                   *std::max_element(interval_busy.begin(), interval_busy.end()) * per,
                   join(interval_busy, per).c_str());
        if (shares) {
            printf(" shares=");
            for (size_t i = 0; i < shares->size(); ++i) printf("%s%d", i ? "," : "", (*shares)[i]);
        }
        printf("\n");
        fflush(stdout);
        interval_steps = interval_timed = 0;
        interval_loss = interval_wall = 0;
        std::fill(interval_busy.begin(), interval_busy.end(), 0.0);
    }
    void final_line(double last_loss, double test_err, bool has_busy) {
        double per = total_timed ? 1000.0 / total_timed : 0;
        printf("final steps=%ld loss=%.6f test_err=%.4f wall_s=%.3f warmup_ms=%.1f ms_per_1000=%.1f", total_steps,
               last_loss, test_err, (total_wall + warmup_ms) / 1000.0, warmup_ms, total_wall * per);
        if (has_busy)
            printf(" busy_per_1000=%.1f busy_gpu=%s", *std::max_element(total_busy.begin(), total_busy.end()) * per,
                   join(total_busy, per).c_str());
        printf("\n");
        fflush(stdout);
    }
};

static bool is_log_step(const Options& o, long step, long total) {
    return step == total || (o.log_every > 0 && step % o.log_every == 0);
}

// ------------------------------------------------------------------------------------------------------------------
// CPU path: the same training in plain C++ (same init, batches, layout and per-element summation order).
// ------------------------------------------------------------------------------------------------------------------

template <class F>
static void parallel_rows(int threads, int rows, F f) {  // f(r0, r1)
    if (threads <= 1 || rows < 2 * threads) { f(0, rows); return; }
    std::vector<std::thread> ts;
    int per = (rows + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
        int r0 = t * per, r1 = std::min(rows, r0 + per);
        if (r0 < r1) ts.emplace_back(f, r0, r1);
    }
    for (auto& t : ts) t.join();
}

// C = A[M x K] * B[K x N] (+ bias, relu); per element a sum over k in increasing order.
static void cpu_forward(int T, int M, int N, int K, const float* A, const float* B, const float* bias, bool relu, float* C) {
    parallel_rows(T, M, [=](int r0, int r1) {
        for (int i = r0; i < r1; ++i) {
            float* c = C + (size_t)i * N;
            for (int j = 0; j < N; ++j) c[j] = 0.f;
            for (int k = 0; k < K; ++k) {
                float a = A[(size_t)i * K + k];
                const float* b = B + (size_t)k * N;
                for (int j = 0; j < N; ++j) c[j] += a * b[j];
            }
            for (int j = 0; j < N; ++j) {
                float v = c[j] + bias[j];
                c[j] = relu ? std::max(v, 0.f) : v;
            }
        }
    });
}

struct CpuNet {
    const Model& m;
    int T;
    std::vector<std::vector<float>> act;  // act[0] = input batch, act[l] = layer l output
    std::vector<std::vector<float>> dz;   // dz[l] (l = 1..L); the last has C + 1 columns
    std::vector<float> wt;                // scratch: W_l transposed
    CpuNet(const Model& m_, int rows, int T_) : m(m_), T(T_), act(m_.L() + 1), dz(m_.L() + 1) {
        for (int l = 0; l <= m.L(); ++l) act[l].resize((size_t)rows * m.d[l]);
        for (int l = 1; l <= m.L(); ++l) dz[l].resize((size_t)rows * (m.d[l] + (l == m.L() ? 1 : 0)));
    }
    void forward(const float* p, int n) {
        for (int l = 1; l <= m.L(); ++l)
            cpu_forward(T, n, m.d[l], m.d[l - 1], act[l - 1].data(), p + m.woff[l - 1], p + m.boff[l - 1],
                        l < m.L(), act[l].data());
    }
    // grad (P + 1 floats, loss last) of the batch rows, scaled by 1/global_batch.
    void backward(const float* p, const int* y, int n, float inv_batch, float* grad) {
        const int L = m.L(), C = m.d[L];
        float* d = dz[L].data();
        for (int i = 0; i < n; ++i) {
            const float* z = act[L].data() + (size_t)i * C;
            float* di = d + (size_t)i * (C + 1);
            float mx = z[0];
            for (int c = 1; c < C; ++c) mx = std::max(mx, z[c]);
            float sum = 0.f;
            for (int c = 0; c < C; ++c) sum += std::exp(z[c] - mx);
            float inv = 1.f / sum;
            for (int c = 0; c < C; ++c) di[c] = (std::exp(z[c] - mx) * inv - (c == y[i] ? 1.f : 0.f)) * inv_batch;
            di[C] = (std::log(sum) - (z[y[i]] - mx)) * inv_batch;
        }
        for (int l = L; l >= 1; --l) {
            const int din = m.d[l - 1], dout = m.d[l], ldz = dout + (l == L ? 1 : 0);
            const float* dzl = dz[l].data();
            const float* a = act[l - 1].data();
            float* gw = grad + m.woff[l - 1];
            // dW = A^T dZ: rows of dW split over threads, k (= batch row) ascending per element.
            parallel_rows(T, din, [=](int r0, int r1) {
                for (int i = r0; i < r1; ++i)
                    for (int j = 0; j < dout; ++j) gw[(size_t)i * dout + j] = 0.f;
                for (int k = 0; k < n; ++k) {
                    const float* dk = dzl + (size_t)k * ldz;
                    for (int i = r0; i < r1; ++i) {
                        float av = a[(size_t)k * din + i];
                        float* g = gw + (size_t)i * dout;
                        for (int j = 0; j < dout; ++j) g[j] += av * dk[j];
                    }
                }
            });
            // db (and the loss sum for the last layer: column C of dz)
            float* gb = grad + m.boff[l - 1];
            for (int j = 0; j < ldz; ++j) gb[j] = 0.f;
            for (int k = 0; k < n; ++k)
                for (int j = 0; j < ldz; ++j) gb[j] += dzl[(size_t)k * ldz + j];
            if (l > 1) {  // dZ_{l-1} = (dZ_l W_l^T) masked by ReLU'
                const float* w = p + m.woff[l - 1];
                wt.resize((size_t)din * dout);
                for (int i = 0; i < din; ++i)
                    for (int j = 0; j < dout; ++j) wt[(size_t)j * din + i] = w[(size_t)i * dout + j];
                float* dprev = dz[l - 1].data();
                const float* wtp = wt.data();
                parallel_rows(T, n, [=](int r0, int r1) {
                    for (int i = r0; i < r1; ++i) {
                        float* c = dprev + (size_t)i * din;
                        for (int j = 0; j < din; ++j) c[j] = 0.f;
                        for (int k = 0; k < dout; ++k) {
                            float v = dzl[(size_t)i * ldz + k];
                            const float* b = wtp + (size_t)k * din;
                            for (int j = 0; j < din; ++j) c[j] += v * b[j];
                        }
                        for (int j = 0; j < din; ++j) c[j] = a[(size_t)i * din + j] > 0.f ? c[j] : 0.f;
                    }
                });
            }
        }
    }
};

static double cpu_test_error(CpuNet& net, const Model& m, const float* p, const Dataset& test, int chunk) {
    int err = 0;
    for (int s = 0; s < test.n; s += chunk) {
        int n = std::min(chunk, test.n - s);
        memcpy(net.act[0].data(), test.x.data() + (size_t)s * test.dim, sizeof(float) * n * test.dim);
        net.forward(p, n);
        err += count_errors(net.act[m.L()].data(), test.y.data() + s, n, m.d[m.L()]);
    }
    return test.n ? (double)err / test.n : 0.0;
}

static int run_cpu(const Options& o, const Model& m, const Dataset& train, const Dataset& test, long total) {
    std::vector<float> p = init_params(m, o.seed);
    std::vector<float> g(m.P + 1);
    CpuNet net(m, o.batch, o.threads);
    std::vector<int> y(o.batch);
    Schedule sched(&train, o.batch, o.seed);
    Reporter rep(1);
    const float inv_batch = 1.0f / o.batch;
    double last_loss = 0, test_err = 0;
    for (long step = 1; step <= total; ++step) {
        double t0 = now_ms();
        gather(train, sched.batch_indices(step - 1), o.batch, net.act[0].data(), y.data());
        net.forward(p.data(), o.batch);
        net.backward(p.data(), y.data(), o.batch, inv_batch, g.data());
        for (size_t i = 0; i < m.P; ++i) p[i] -= o.lr * g[i];
        double t1 = now_ms();
        last_loss = g[m.P];
        rep.add_step(last_loss, t1 - t0);
        if (is_log_step(o, step, total)) {
            test_err = cpu_test_error(net, m, p.data(), test, o.batch);
            rep.print(step, (double)step / sched.per_epoch, test_err, nullptr, false);
        }
    }
    rep.final_line(last_loss, test_err, false);
    return 0;
}

// ------------------------------------------------------------------------------------------------------------------
// GPU path
// ------------------------------------------------------------------------------------------------------------------

class Barrier {  // reusable (generation-counted) barrier for the GPU threads
    std::mutex mu;
    std::condition_variable cv;
    int n, waiting = 0;
    unsigned long gen = 0;
  public:
    explicit Barrier(int n_) : n(n_) {}
    void wait() {
        std::unique_lock<std::mutex> lk(mu);
        unsigned long g = gen;
        if (++waiting == n) {
            waiting = 0;
            ++gen;
            cv.notify_all();
        } else {
            cv.wait(lk, [&] { return gen != g; });
        }
    }
};

static dim3 gemm_grid(int M, int N) { return dim3((N + TILE - 1) / TILE, (M + TILE - 1) / TILE); }

#ifdef DP_TRAIN_CUBLAS
static bool g_cublas = false;                       // --gemm cublas
static thread_local cublasHandle_t t_blas = nullptr;  // one handle per GPU thread, on its GPU

// The epilogues of gemm_kernel, applied after cublasSgemm stored the plain product in C.
template <int EPI>
__global__ void epilogue_kernel(int M, int N, float* __restrict__ C, int ldc, const float* __restrict__ aux,
                                int ldaux) {
    const int n = blockIdx.x * TILE + threadIdx.x, m = blockIdx.y * TILE + threadIdx.y;
    if (m >= M || n >= N) return;
    float v = C[(size_t)m * ldc + n];
    if (EPI == EPI_BIAS) v += aux[n];
    if (EPI == EPI_BIAS_RELU) v = fmaxf(v + aux[n], 0.f);
    if (EPI == EPI_RELU_MASK) v = aux[(size_t)m * ldaux + n] > 0.f ? v : 0.f;
    C[(size_t)m * ldc + n] = v;
}
#endif

template <bool TA, bool TB, int EPI>
static void gemm(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                 const float* aux = nullptr, int ldaux = 0) {
#ifdef DP_TRAIN_CUBLAS
    if (g_cublas) {
        // cuBLAS is column-major: the row-major M x N product C = op(A) op(B) is the column-major N x M product
        // C^T = op(B)^T op(A)^T, and a row-major matrix with leading dimension ld is its transpose, column-major.
        const float one = 1.f, zero = 0.f;
        CKB(cublasSgemm(t_blas, TB ? CUBLAS_OP_T : CUBLAS_OP_N, TA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B,
                        ldb, A, lda, &zero, C, ldc));
        if (EPI != EPI_STORE) {
            epilogue_kernel<EPI><<<gemm_grid(M, N), dim3(TILE, TILE)>>>(M, N, C, ldc, aux, ldaux);
            CK(cudaGetLastError());
        }
        return;
    }
#endif
    gemm_kernel<TA, TB, EPI><<<gemm_grid(M, N), dim3(TILE, TILE)>>>(M, N, K, A, lda, B, ldb, C, ldc, aux, ldaux);
    CK(cudaGetLastError());
}

static void colsum(const float* X, int n, int m, int ld, float* out) {
    colsum_kernel<<<(m + TILE - 1) / TILE, dim3(TILE, TILE)>>>(X, n, m, ld, out);
    CK(cudaGetLastError());
}

struct GpuNet {  // one GPU's buffers; every call is issued by that GPU's host thread
    const Model& m;
    float *params = nullptr, *grad = nullptr;
    int* labels = nullptr;
    std::vector<float*> act, dz;
    GpuNet(const Model& m_, int rows) : m(m_), act(m_.L() + 1, nullptr), dz(m_.L() + 1, nullptr) {
        CK(cudaMalloc(&params, sizeof(float) * m.P));
        CK(cudaMalloc(&grad, sizeof(float) * (m.P + 1)));
        CK(cudaMalloc(&labels, sizeof(int) * rows));
        for (int l = 0; l <= m.L(); ++l) CK(cudaMalloc(&act[l], sizeof(float) * rows * m.d[l]));
        for (int l = 1; l <= m.L(); ++l)
            CK(cudaMalloc(&dz[l], sizeof(float) * rows * (m.d[l] + (l == m.L() ? 1 : 0))));
    }
    ~GpuNet() {
        cudaFree(params);
        cudaFree(grad);
        cudaFree(labels);
        for (auto* p : act) cudaFree(p);
        for (auto* p : dz) cudaFree(p);
    }
    void forward(int n) {
        for (int l = 1; l <= m.L(); ++l) {
            const float* W = params + m.woff[l - 1];
            const float* b = params + m.boff[l - 1];
            if (l < m.L())
                gemm<false, false, EPI_BIAS_RELU>(n, m.d[l], m.d[l - 1], act[l - 1], m.d[l - 1], W, m.d[l], act[l], m.d[l], b);
            else
                gemm<false, false, EPI_BIAS>(n, m.d[l], m.d[l - 1], act[l - 1], m.d[l - 1], W, m.d[l], act[l], m.d[l], b);
        }
    }
    void backward(int n, float inv_batch) {
        const int L = m.L(), C = m.d[L];
        xent_kernel<<<(n + 127) / 128, 128>>>(act[L], n, C, labels, inv_batch, dz[L]);
        CK(cudaGetLastError());
        for (int l = L; l >= 1; --l) {
            const int din = m.d[l - 1], dout = m.d[l], ldz = dout + (l == L ? 1 : 0);
            gemm<true, false, EPI_STORE>(din, dout, n, act[l - 1], din, dz[l], ldz, grad + m.woff[l - 1], dout);
            colsum(dz[l], n, ldz, ldz, grad + m.boff[l - 1]);  // last layer: db and the loss slot at grad[P]
            if (l > 1)
                gemm<false, true, EPI_RELU_MASK>(n, din, dout, dz[l], ldz, params + m.woff[l - 1], dout, dz[l - 1], din,
                                                 act[l - 1], din);
        }
    }
};

struct Shared {  // state shared by the GPU threads
    const Options& o;
    const Model& m;
    const Dataset& train;
    const Dataset& test;
    long total;
    int N;
    Barrier bar;
    Schedule sched;
    std::vector<int> shares, next_shares;
    std::vector<double> speed_ema;      // samples per ms, smoothed
    std::vector<double> work_ms;        // last step's per-GPU time (batch upload .. gradients on the host)
    std::vector<std::vector<float>> hgrad;  // per-GPU host gradient buffers (P + 1)
    std::vector<float> havg;
    std::vector<double> busy_ms;        // per-GPU device-busy time of the last step(s), collected by thread 0
    Reporter rep;
    double last_loss = 0, test_err = 0;
    double step_t0 = 0;
    Shared(const Options& o_, const Model& m_, const Dataset& tr, const Dataset& te, long total_)
        : o(o_), m(m_), train(tr), test(te), total(total_), N(o_.gpus), bar(o_.gpus), sched(&tr, o_.batch, o_.seed),
          shares(o_.gpus), next_shares(o_.gpus), speed_ema(o_.gpus, 0.0), work_ms(o_.gpus, 0.0),
          hgrad(o_.gpus, std::vector<float>(m_.P + 1)), havg(m_.P + 1), busy_ms(o_.gpus, 0.0), rep(o_.gpus) {
        for (int g = 0; g < N; ++g) shares[g] = o.batch / N + (g < o.batch % N ? 1 : 0);
        next_shares = shares;
    }
    // Adaptive balancing: shares proportional to each GPU's smoothed samples per millisecond (largest-remainder
    // rounding, at least one sample each, summing to the global batch).
    void rebalance(long step) {
        if (!o.adaptive || N == 1) return;
        if (step <= 1) return;  // the first step carries one-time costs (module loading)
        for (int g = 0; g < N; ++g) {
            double s = shares[g] / std::max(work_ms[g], 1e-3);
            speed_ema[g] = speed_ema[g] == 0.0 ? s : 0.6 * speed_ema[g] + 0.4 * s;
        }
        double tot = 0;
        for (double s : speed_ema) tot += s;
        const int B = o.batch;
        std::vector<double> want(N);
        std::vector<int> n(N);
        int sum = 0;
        for (int g = 0; g < N; ++g) {
            want[g] = std::max(1.0, B * speed_ema[g] / tot);
            n[g] = std::max(1, (int)std::floor(want[g]));
            sum += n[g];
        }
        while (sum > B) {  // take from the largest
            int g = (int)(std::max_element(n.begin(), n.end()) - n.begin());
            --n[g];
            --sum;
        }
        while (sum < B) {  // give to the largest remainder
            int best = 0;
            double br = -1e30;
            for (int g = 0; g < N; ++g)
                if (want[g] - n[g] > br) { br = want[g] - n[g]; best = g; }
            ++n[best];
            ++sum;
        }
        next_shares = n;
    }
};

static void reduce_ps(Shared& S, int g) {
    S.bar.wait();  // every GPU's gradient is on the host
    if (g == 0) {
        const size_t len = S.m.P + 1;
        std::copy(S.hgrad[0].begin(), S.hgrad[0].end(), S.havg.begin());
        for (int k = 1; k < S.N; ++k) {
            const float* src = S.hgrad[k].data();
            for (size_t i = 0; i < len; ++i) S.havg[i] += src[i];
        }
    }
    S.bar.wait();  // the master's sum is ready for everyone
}

// Token ring through the host: reduce-scatter then all-gather over per-GPU host buffers; chunk c of GPU g's
// buffer ends up holding the sum of chunk c over all GPUs. Each round every thread reads its left neighbour's
// buffer and updates one chunk of its own; rounds are separated by barriers.
static void reduce_ring(Shared& S, int g) {
    const int N = S.N;
    const size_t len = S.m.P + 1;
    auto chunk = [&](int c, size_t* lo, size_t* hi) {
        c = ((c % N) + N) % N;
        *lo = len * c / N;
        *hi = len * (c + 1) / N;
    };
    S.bar.wait();
    const int left = (g - 1 + N) % N;
    float* mine = S.hgrad[g].data();
    const float* lbuf = S.hgrad[left].data();
    for (int s = 0; s < N - 1; ++s) {  // reduce-scatter
        size_t lo, hi;
        chunk(g - 1 - s, &lo, &hi);
        for (size_t i = lo; i < hi; ++i) mine[i] += lbuf[i];
        S.bar.wait();
    }
    for (int s = 0; s < N - 1; ++s) {  // all-gather: after the scatter, GPU g owns chunk g+1
        size_t lo, hi;
        chunk(g - s, &lo, &hi);
        for (size_t i = lo; i < hi; ++i) mine[i] = lbuf[i];
        S.bar.wait();
    }
}

static double gpu_test_error(GpuNet& net, const Model& m, const Dataset& test, int chunk) {
    int err = 0;
    const int C = m.d[m.L()];
    std::vector<float> logits((size_t)chunk * C);
    for (int s = 0; s < test.n; s += chunk) {
        int n = std::min(chunk, test.n - s);
        CK(cudaMemcpy(net.act[0], test.x.data() + (size_t)s * test.dim, sizeof(float) * n * test.dim,
                      cudaMemcpyHostToDevice));
        net.forward(n);
        CK(cudaMemcpy(logits.data(), net.act[m.L()], sizeof(float) * n * C, cudaMemcpyDeviceToHost));
        err += count_errors(logits.data(), test.y.data() + s, n, C);
    }
    return test.n ? (double)err / test.n : 0.0;
}

static void gpu_worker(Shared& S, int g, const std::vector<float>& init) {
    CK(cudaSetDevice(g));
#ifdef DP_TRAIN_CUBLAS
    if (g_cublas) CKB(cublasCreate(&t_blas));   // on this thread's GPU, the default stream like the kernels
#endif
    const Options& o = S.o;
    const Model& m = S.m;
    GpuNet net(m, o.batch);  // sized for the whole global batch: adaptive shares may grow up to it
    CK(cudaMemcpy(net.params, init.data(), sizeof(float) * m.P, cudaMemcpyHostToDevice));
    cudaEvent_t ev[4];
    for (auto& e : ev) CK(cudaEventCreate(&e));
    std::vector<float> hx((size_t)o.batch * m.d[0]);
    std::vector<int> hy(o.batch);
    const float inv_batch = 1.0f / o.batch;
    bool sgd_pending = false;  // events ev[2..3] around the last SGD launch not yet read
    CK(cudaDeviceSynchronize());
    S.bar.wait();
    if (g == 0) S.step_t0 = now_ms();
    for (long step = 1; step <= S.total; ++step) {
        const double t0 = now_ms();
        const int n = S.shares[g];
        int off = 0;
        for (int k = 0; k < g; ++k) off += S.shares[k];
        const int* idx = S.sched.batch_indices(step - 1) + off;  // read-only here: thread 0 advances epochs
        gather(S.train, idx, n, hx.data(), hy.data());
        CK(cudaMemcpy(net.act[0], hx.data(), sizeof(float) * n * m.d[0], cudaMemcpyHostToDevice));
        CK(cudaMemcpy(net.labels, hy.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
        CK(cudaEventRecord(ev[0]));
        net.forward(n);
        net.backward(n, inv_batch);
        CK(cudaEventRecord(ev[1]));
        CK(cudaMemcpy(S.hgrad[g].data(), net.grad, sizeof(float) * (m.P + 1), cudaMemcpyDeviceToHost));
        S.work_ms[g] = now_ms() - t0;
        float ms = 0.f, busy = 0.f;
        CK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
        busy += ms;
        if (sgd_pending) {
            CK(cudaEventElapsedTime(&ms, ev[2], ev[3]));
            busy += ms;
        }
        S.busy_ms[g] = busy;
        if (o.ring) reduce_ring(S, g); else reduce_ps(S, g);
        const float* avg = o.ring ? S.hgrad[g].data() : S.havg.data();
        if (g == 0) S.last_loss = avg[m.P];
        CK(cudaMemcpy(net.grad, avg, sizeof(float) * m.P, cudaMemcpyHostToDevice));
        CK(cudaEventRecord(ev[2]));
        sgd_kernel<<<(int)((m.P + 255) / 256), 256>>>(net.params, net.grad, o.lr, (int)m.P);
        CK(cudaGetLastError());
        CK(cudaEventRecord(ev[3]));
        sgd_pending = true;
        const bool log = is_log_step(o, step, S.total);
        if (log) {  // finish the step's device work so that the interval's wall time is complete
            CK(cudaEventSynchronize(ev[3]));
            CK(cudaEventElapsedTime(&ms, ev[2], ev[3]));
            S.busy_ms[g] += ms;
            sgd_pending = false;
        }
        S.bar.wait();  // busy_ms, work_ms final for this step; every thread is done with this step's batch
        if (g == 0) {
            const double t1 = now_ms();
            S.rep.add_step(S.last_loss, t1 - S.step_t0);
            for (int k = 0; k < S.N; ++k) S.rep.add_busy(k, S.busy_ms[k]);
            S.rebalance(step);
            S.shares = S.next_shares;
            if (step < S.total) S.sched.batch_indices(step);  // advance the permutation before others read it
            if (log) {
                S.test_err = gpu_test_error(net, m, S.test, o.batch);
                S.rep.print(step, (double)step / S.sched.per_epoch, S.test_err, o.adaptive ? &S.shares : nullptr, true);
            }
            S.step_t0 = now_ms();
        }
        S.bar.wait();
    }
    for (auto& e : ev) CK(cudaEventDestroy(e));
#ifdef DP_TRAIN_CUBLAS
    if (t_blas) CKB(cublasDestroy(t_blas));
#endif
}

static int run_gpu(const Options& o, const Model& m, const Dataset& train, const Dataset& test, long total) {
    int count = 0;
    CK(cudaGetDeviceCount(&count));
    if (count < o.gpus) {
        fprintf(stderr, "dp_train: --gpus %d but only %d CUDA device(s) visible\n", o.gpus, count);
        return 1;
    }
#ifdef DP_TRAIN_CUBLAS
    g_cublas = o.cublas;
#endif
    printf("# gemm=%s\n", o.cublas ? "cublas" : "own");
    for (int g = 0; g < o.gpus; ++g) {
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, g));
        printf("# gpu%d name=\"%s\" cc=%d.%d mem_mib=%zu\n", g, prop.name, prop.major, prop.minor,
               (size_t)(prop.totalGlobalMem >> 20));
    }
    std::vector<float> init = init_params(m, o.seed);
    Shared S(o, m, train, test, total);
    S.sched.batch_indices(0);
    std::vector<std::thread> threads;
    for (int g = 0; g < o.gpus; ++g) threads.emplace_back(gpu_worker, std::ref(S), g, std::cref(init));
    for (auto& t : threads) t.join();
    S.rep.final_line(S.last_loss, S.test_err, true);
    return 0;
}

int main(int argc, char** argv) {
    Options o = parse(argc, argv);
    if (o.data.empty()) o.data = default_data_dir();
    Dataset train = load_idx(o.data, "train", o.train_limit);
    Dataset test = load_idx(o.data, "t10k", o.test_limit);
    if (train.dim != test.dim) die("train and test images differ in size");
    if (train.n < o.batch) die("--batch is larger than the training set");
    Model m = make_model(train.dim, o.hidden, 10);
    long per_epoch = std::max(1, train.n / o.batch);
    long total = o.epochs > 0 ? (long)std::ceil(o.epochs * per_epoch) : o.steps;
    if (total < 1) total = 1;
    std::string dims;
    for (size_t i = 0; i < m.d.size(); ++i) dims += (i ? "-" : "") + std::to_string(m.d[i]);
    printf("# dp_train mode=%s gpus=%d batch=%d layers=%s params=%zu steps=%ld batches_per_epoch=%ld lr=%g seed=%llu "
           "sync=%s balance=%s train=%d test=%d data=%s\n",
           o.cpu ? "cpu" : "gpu", o.cpu ? 0 : o.gpus, o.batch, dims.c_str(), m.P, total, per_epoch, o.lr,
           (unsigned long long)o.seed, o.ring ? "ring" : "ps", o.adaptive ? "adaptive" : "static", train.n, test.n,
           o.data.c_str());
    fflush(stdout);
    return o.cpu ? run_cpu(o, m, train, test, total) : run_gpu(o, m, train, test, total);
}
