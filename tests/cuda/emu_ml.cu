// Training-style kernels for the emulator tests: row softmax (shared-memory max/sum reductions), Adam (powf with
// its cold special-case paths), GELU (tanhf), and a cross-entropy loss accumulated with float atomics.
#include <cfloat>

extern "C" __global__ void rowSoftmax(const float* in, float* out, int cols) {
    extern __shared__ float scratch[];
    const float* row = in + (size_t)blockIdx.x * cols;
    float* orow = out + (size_t)blockIdx.x * cols;
    float mx = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) mx = fmaxf(mx, row[c]);
    scratch[threadIdx.x] = mx;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + h]);
        __syncthreads();
    }
    mx = scratch[0];
    __syncthreads();
    float total = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { float e = expf(row[c] - mx); orow[c] = e; total += e; }
    scratch[threadIdx.x] = total;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) scratch[threadIdx.x] += scratch[threadIdx.x + h];
        __syncthreads();
    }
    float scale = 1.f / scratch[0];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) orow[c] *= scale;
}

extern "C" __global__ void adamStep(float* w, const float* g, float* m, float* v, float lr, float b1, float b2,
                                    float eps, int step, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float mi = b1 * m[i] + (1.f - b1) * g[i];
    float vi = b2 * v[i] + (1.f - b2) * g[i] * g[i];
    m[i] = mi; v[i] = vi;
    float mhat = mi / (1.f - powf(b1, (float)step));
    float vhat = vi / (1.f - powf(b2, (float)step));
    w[i] -= lr * mhat / (sqrtf(vhat) + eps);
}

extern "C" __global__ void geluK(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float t = x[i]; y[i] = 0.5f * t * (1.f + tanhf(0.7978845608f * (t + 0.044715f * t * t * t))); }
}

extern "C" __global__ void xentLoss(const float* probs, const int* labels, float* loss, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) atomicAdd(loss, -logf(fmaxf(probs[r * cols + labels[r]], 1e-12f)));
}
