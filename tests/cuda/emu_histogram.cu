// Emulator end-to-end program in the style of NVIDIA's histogram samples: 256-bin histograms with per-warp
// sub-histograms in shared memory updated by shared-memory atomics (four bytes per 32-bit word), partial histograms
// per block merged by a second kernel with a shared-memory tree reduction; and a 64-bin variant with per-thread
// 8-bit counters in shared memory (no atomics) flushed before they can overflow. Self-checking against the host.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "check.h"

#define BINS 256
#define WARPS_PER_BLOCK 6
#define BLOCK (WARPS_PER_BLOCK * 32)
#define PARTIALS 60
#define MERGE_BLOCK 256

__device__ __forceinline__ void addByte(unsigned *warpHist, unsigned b) { atomicAdd(warpHist + b, 1u); }

__device__ __forceinline__ void addWord(unsigned *warpHist, unsigned w) {
    addByte(warpHist, (w >> 0) & 0xFFu);
    addByte(warpHist, (w >> 8) & 0xFFu);
    addByte(warpHist, (w >> 16) & 0xFFu);
    addByte(warpHist, (w >> 24) & 0xFFu);
}

__global__ void histogram256Kernel(unsigned *partial, const unsigned *data, unsigned words) {
    __shared__ unsigned hist[WARPS_PER_BLOCK * BINS];
    unsigned *warpHist = hist + (threadIdx.x / warpSize) * BINS;
    for (unsigned i = threadIdx.x; i < WARPS_PER_BLOCK * BINS; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (unsigned pos = blockIdx.x * blockDim.x + threadIdx.x; pos < words; pos += blockDim.x * gridDim.x)
        addWord(warpHist, data[pos]);
    __syncthreads();
    for (unsigned bin = threadIdx.x; bin < BINS; bin += blockDim.x) {
        unsigned sum = 0;
        for (unsigned w = 0; w < WARPS_PER_BLOCK; w++) sum += hist[bin + w * BINS];
        partial[blockIdx.x * BINS + bin] = sum;
    }
}

// One block per bin: sum that bin over all partial histograms.
__global__ void mergeHistogram256Kernel(unsigned *hist, const unsigned *partial, unsigned count) {
    __shared__ unsigned data[MERGE_BLOCK];
    unsigned sum = 0;
    for (unsigned i = threadIdx.x; i < count; i += MERGE_BLOCK) sum += partial[blockIdx.x + i * BINS];
    data[threadIdx.x] = sum;
    for (unsigned stride = MERGE_BLOCK / 2; stride > 0; stride >>= 1) {
        __syncthreads();
        if (threadIdx.x < stride) data[threadIdx.x] += data[threadIdx.x + stride];
    }
    if (threadIdx.x == 0) hist[blockIdx.x] = data[0];
}

// 64 bins (the top 6 bits of each byte) with one 8-bit counter per bin and thread: thread t's counters start at a
// scrambled byte position (spreading a warp over the shared-memory banks) and step by the block size per bin. The
// byte array is cleared with 32-bit stores; the grid is large enough that each thread counts at most 240 bytes (no
// counter wraps); then 64 threads each sum one bin over all threads' counters, from a rotating start position.
#define BINS64 64
#define BLOCK64 64
__device__ __forceinline__ void addByte64(unsigned char *base, unsigned b) { base[(b >> 2) * BLOCK64]++; }

__device__ __forceinline__ void addWord64(unsigned char *base, unsigned w) {
    addByte64(base, (w >> 0) & 0xFFu);
    addByte64(base, (w >> 8) & 0xFFu);
    addByte64(base, (w >> 16) & 0xFFu);
    addByte64(base, (w >> 24) & 0xFFu);
}

__global__ void histogram64Kernel(unsigned *partial, const uint4 *data, unsigned n16) {
    __shared__ unsigned char counters[BINS64 * BLOCK64];
    const unsigned t = threadIdx.x;
    const unsigned pos0 = (t & ~63u) | ((t & 15u) << 2) | ((t & 48u) >> 4);
    unsigned char *mine = counters + pos0;
    for (unsigned i = 0; i < BINS64 / 4; i++) ((unsigned *)counters)[t + i * BLOCK64] = 0;
    __syncthreads();
    for (unsigned pos = blockIdx.x * blockDim.x + t; pos < n16; pos += blockDim.x * gridDim.x) {
        uint4 v = data[pos];
        addWord64(mine, v.x);
        addWord64(mine, v.y);
        addWord64(mine, v.z);
        addWord64(mine, v.w);
    }
    __syncthreads();
    if (t < BINS64) {
        const unsigned char *bin = counters + t * BLOCK64;
        unsigned sum = 0, p = 4 * (t & 15);
#pragma unroll
        for (unsigned i = 0; i < BLOCK64 / 4; i++) {
            sum += bin[p + 0] + bin[p + 1] + bin[p + 2] + bin[p + 3];
            p = (p + 4) & (BLOCK64 - 1);
        }
        partial[blockIdx.x * BINS64 + t] = sum;
    }
}

int main(int argc, char **argv) {
    unsigned bytes = argc > 1 ? (unsigned)atoi(argv[1]) : (1u << 20);
    bytes &= ~15u;
    unsigned char *h = (unsigned char *)malloc(bytes);
    unsigned rng = 2024;
    for (unsigned i = 0; i < bytes; i++) { rng = rng * 1664525u + 1013904223u; h[i] = (unsigned char)(rng >> 24); }
    unsigned ref[BINS] = {0}, ref64[BINS64] = {0};
    for (unsigned i = 0; i < bytes; i++) { ref[h[i]]++; ref64[h[i] >> 2]++; }

    unsigned *d, *dpartial, *dhist;
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMalloc(&dpartial, PARTIALS * BINS * sizeof(unsigned)));
    CHECK(cudaMalloc(&dhist, BINS * sizeof(unsigned)));
    CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));

    histogram256Kernel<<<PARTIALS, BLOCK>>>(dpartial, d, bytes / 4);
    CHECK(cudaGetLastError());
    mergeHistogram256Kernel<<<BINS, MERGE_BLOCK>>>(dhist, dpartial, PARTIALS);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    unsigned hist[BINS];
    CHECK(cudaMemcpy(hist, dhist, sizeof hist, cudaMemcpyDeviceToHost));
    for (int b = 0; b < BINS; b++) EXPECT(hist[b] == ref[b]);

    // Enough blocks that no thread counts more than 240 bytes (15 uint4 words): no 8-bit counter can wrap.
    unsigned blocks64 = (bytes + BLOCK64 * 240 - 1) / (BLOCK64 * 240);
    unsigned *d64;
    CHECK(cudaMalloc(&d64, blocks64 * BINS64 * sizeof(unsigned)));
    histogram64Kernel<<<blocks64, BLOCK64>>>(d64, (const uint4 *)d, bytes / 16);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    unsigned *p64 = (unsigned *)malloc(blocks64 * BINS64 * sizeof(unsigned));
    CHECK(cudaMemcpy(p64, d64, blocks64 * BINS64 * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int b = 0; b < BINS64; b++) {
        unsigned s = 0;
        for (unsigned k = 0; k < blocks64; k++) s += p64[k * BINS64 + b];
        EXPECT(s == ref64[b]);
    }
    printf("PASS emu_histogram (%u bytes)\n", bytes);
    return 0;
}
