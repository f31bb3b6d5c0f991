// Emulator end-to-end program: tiled matmul, block reduction, dynamic shared memory, warp shuffles, vote/ballot.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)
#define TILE 16

extern "C" __global__ void matmulTiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
        int ak = t * TILE + threadIdx.x, bk = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" __global__ void blockReduce(const int* in, int* out, int n) {
    __shared__ int s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

extern "C" __global__ void warpReduce(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    __shared__ float w[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) w[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < (blockDim.x + 31) / 32 ? w[lane] : 0.f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

// shfl up/idx and the in-range predicate through inclusive warp scans
extern "C" __global__ void warpScan(const int* in, int* out, int* bcast) {
    int lane = threadIdx.x & 31;
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int o = 1; o < 32; o <<= 1) { int u = __shfl_up_sync(0xffffffff, v, o); if (lane >= o) v += u; }
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
    bcast[blockIdx.x * blockDim.x + threadIdx.x] = __shfl_sync(0xffffffff, v, 7);
}

extern "C" __global__ void voteKernel(const int* in, unsigned* ballots, int* anyall) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[i];
    unsigned b = __ballot_sync(0xffffffff, v > 0);
    int an = __any_sync(0xffffffff, v > 5), al = __all_sync(0xffffffff, v >= 0);
    if ((threadIdx.x & 31) == 0) { ballots[i / 32] = b; anyall[i / 32] = an * 2 + al; }
    int cnt = __syncthreads_count(v > 0);
    if (threadIdx.x == 0) anyall[1000 + blockIdx.x] = cnt;
}

extern "C" __global__ void dynSmem(const float* in, float* out, int n) {
    extern __shared__ float buf[];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    buf[t] = i < n ? in[i] : 0.f;
    __syncthreads();
    if (i < n) out[i] = buf[blockDim.x - 1 - t] * 2.f;
}

int main() {
    const int M = 70, N = 50, K = 45;
    float *A = (float*)malloc(M * K * 4), *B = (float*)malloc(K * N * 4), *C = (float*)malloc(M * N * 4);
    for (int i = 0; i < M * K; i++) A[i] = (i % 7) * 0.25f - 0.5f;
    for (int i = 0; i < K * N; i++) B[i] = (i % 5) * 0.5f - 1.f;
    float *dA, *dB, *dC;
    CHECK(cudaMalloc(&dA, M * K * 4)); CHECK(cudaMalloc(&dB, K * N * 4)); CHECK(cudaMalloc(&dC, M * N * 4));
    CHECK(cudaMemcpy(dA, A, M * K * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, B, K * N * 4, cudaMemcpyHostToDevice));
    matmulTiled<<<dim3((N + 15) / 16, (M + 15) / 16), dim3(16, 16)>>>(dA, dB, dC, M, N, K);
    CHECK(cudaMemcpy(C, dC, M * N * 4, cudaMemcpyDeviceToHost));
    for (int r = 0; r < M; r++) for (int c = 0; c < N; c++) {
        float acc = 0.f;   // exact: all products and sums are multiples of 1/8 well inside f32
        for (int k = 0; k < K; k++) acc += A[r * K + k] * B[k * N + c];
        if (C[r * N + c] != acc) { printf("FAIL matmul %d %d: %f vs %f\n", r, c, C[r * N + c], acc); return 1; }
    }

    const int n = 5000, nb = (n + 255) / 256;
    int* in = (int*)malloc(n * 4); int* out = (int*)malloc(nb * 4);
    for (int i = 0; i < n; i++) in[i] = (i * 37) % 101 - 50;
    int *din, *dout; CHECK(cudaMalloc(&din, n * 4)); CHECK(cudaMalloc(&dout, nb * 4));
    CHECK(cudaMemcpy(din, in, n * 4, cudaMemcpyHostToDevice));
    blockReduce<<<nb, 256>>>(din, dout, n);
    CHECK(cudaMemcpy(out, dout, nb * 4, cudaMemcpyDeviceToHost));
    for (int b = 0; b < nb; b++) { int s = 0; for (int i = b * 256; i < n && i < (b + 1) * 256; i++) s += in[i];
        if (out[b] != s) { printf("FAIL blockReduce %d\n", b); return 1; } }

    float* fin = (float*)malloc(n * 4); float* fout = (float*)malloc(nb * 4);
    for (int i = 0; i < n; i++) fin[i] = (float)((i % 13) - 6);
    float *dfin, *dfout; CHECK(cudaMalloc(&dfin, n * 4)); CHECK(cudaMalloc(&dfout, nb * 4));
    CHECK(cudaMemcpy(dfin, fin, n * 4, cudaMemcpyHostToDevice));
    warpReduce<<<nb, 256>>>(dfin, dfout, n);
    CHECK(cudaMemcpy(fout, dfout, nb * 4, cudaMemcpyDeviceToHost));
    for (int b = 0; b < nb; b++) { float s = 0; for (int i = b * 256; i < n && i < (b + 1) * 256; i++) s += fin[i];
        if (fout[b] != s) { printf("FAIL warpReduce %d: %f vs %f\n", b, fout[b], s); return 1; } }

    int *dscan, *dbc; CHECK(cudaMalloc(&dscan, 256 * 4)); CHECK(cudaMalloc(&dbc, 256 * 4));
    warpScan<<<2, 128>>>(din, dscan, dbc);
    int scan[256], bc[256];
    CHECK(cudaMemcpy(scan, dscan, 1024, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(bc, dbc, 1024, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 256; i++) { int s = 0; for (int j = i & ~31; j <= i; j++) s += in[j];
        if (scan[i] != s) { printf("FAIL warpScan %d\n", i); return 1; }
        int s7 = 0; for (int j = i & ~31; j <= (i & ~31) + 7; j++) s7 += in[j];
        if (bc[i] != s7) { printf("FAIL shfl idx %d\n", i); return 1; } }

    unsigned* dballot; int* danyall;
    CHECK(cudaMalloc(&dballot, 64 * 4)); CHECK(cudaMalloc(&danyall, 1100 * 4));
    voteKernel<<<8, 256>>>(din, dballot, danyall);
    unsigned ballot[64]; int anyall[1100];
    CHECK(cudaMemcpy(ballot, dballot, 64 * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(anyall, danyall, 1100 * 4, cudaMemcpyDeviceToHost));
    for (int w = 0; w < 64; w++) { unsigned b = 0; int an = 0, al = 1;
        for (int l = 0; l < 32; l++) { int v = in[w * 32 + l]; if (v > 0) b |= 1u << l; if (v > 5) an = 1; if (v < 0) al = 0; }
        if (ballot[w] != b || anyall[w] != an * 2 + al) { printf("FAIL vote warp %d\n", w); return 1; } }
    for (int blk = 0; blk < 8; blk++) { int c = 0; for (int i = blk * 256; i < (blk + 1) * 256; i++) c += in[i] > 0;
        if (anyall[1000 + blk] != c) { printf("FAIL syncthreads_count %d\n", blk); return 1; } }

    float* dd; CHECK(cudaMalloc(&dd, n * 4));
    dynSmem<<<nb, 256, 256 * sizeof(float)>>>(dfin, dd, n);
    CHECK(cudaMemcpy(fout = (float*)malloc(n * 4), dd, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) { int b = i / 256, t = i % 256, j = b * 256 + 255 - t;
        float e = (j < n ? fin[j] : 0.f) * 2.f; if (fout[i] != e) { printf("FAIL dynSmem %d\n", i); return 1; } }
    printf("PASS emu_shared\n");
    return 0;
}
