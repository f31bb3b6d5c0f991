// Emulator end-to-end program in the style of NVIDIA's warp-level reduction and scan samples: warpSize (PTX's
// predefined WARP_SZ) in loop bounds and lane arithmetic, shuffles, ballots with %lanemask_lt, and the invariants of
// the special registers a program may read through inline PTX. Self-checking against host results.
#include <cstdio>
#include <cstdlib>
#include "check.h"

__device__ __forceinline__ unsigned lane_id() { unsigned r; asm("mov.u32 %0, %%laneid;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned lanemask_lt() { unsigned r; asm("mov.u32 %0, %%lanemask_lt;" : "=r"(r)); return r; }

__device__ int warpReduceSum(int v) {
    for (int offset = warpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
    return v;
}

// Block sum: each warp reduces, lane 0 of each warp stores to shared memory, the first warp reduces those.
__global__ void blockReduce(const int *in, int *out, int n) {
    __shared__ int partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % warpSize, wid = threadIdx.x / warpSize;
    int v = warpReduceSum(i < n ? in[i] : 0);
    if (lane == 0) partial[wid] = v;
    __syncthreads();
    int nw = (blockDim.x + warpSize - 1) / warpSize;
    v = threadIdx.x < nw ? partial[lane] : 0;
    if (wid == 0) v = warpReduceSum(v);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

// Inclusive scan within each warp (shfl_up), then across the warps of the block through shared memory.
__global__ void blockScan(const int *in, int *out, int n) {
    __shared__ int sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = lane_id(), wid = threadIdx.x / warpSize;
    int v = i < n ? in[i] : 0;
    for (int d = 1; d < warpSize; d *= 2) {
        int t = __shfl_up_sync(0xffffffff, v, d, warpSize);
        if (lane >= d) v += t;
    }
    if (lane == warpSize - 1) sums[wid] = v;
    __syncthreads();
    if (wid == 0) {
        int s = lane < blockDim.x / warpSize ? sums[lane] : 0;
        for (int d = 1; d < warpSize; d *= 2) {
            int t = __shfl_up_sync(0xffffffff, s, d, warpSize);
            if (lane >= d) s += t;
        }
        sums[lane] = s;
    }
    __syncthreads();
    if (wid > 0) v += sums[wid - 1];
    if (i < n) out[i] = v;
}

// Stream compaction of positive values within each warp: position = popc(ballot & lanemask_lt).
__global__ void warpCompact(const int *in, int *out, int *counts, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    unsigned keep = __ballot_sync(0xffffffff, v > 0);
    int pos = __popc(keep & lanemask_lt());
    int warp = i / warpSize;
    if (v > 0) out[warp * warpSize + pos] = v;
    if (lane_id() == 0) counts[warp] = __popc(keep);
}

// Invariants of special registers (valid on any GPU): bit k of each word is one check.
__global__ void specials(unsigned *flags) {
    extern __shared__ int dyn[];
    __shared__ int stat[64];
    unsigned smid, nsmid, warpid, nwarpid, total, dynsz, lane, eq, le, ge, gt, lt;
    unsigned long long t0, t1, gt0;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(warpid));
    asm volatile("mov.u32 %0, %%nwarpid;" : "=r"(nwarpid));
    asm volatile("mov.u32 %0, %%total_smem_size;" : "=r"(total));
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynsz));
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    asm volatile("mov.u32 %0, %%lanemask_eq;" : "=r"(eq));
    asm volatile("mov.u32 %0, %%lanemask_le;" : "=r"(le));
    asm volatile("mov.u32 %0, %%lanemask_ge;" : "=r"(ge));
    asm volatile("mov.u32 %0, %%lanemask_gt;" : "=r"(gt));
    asm volatile("mov.u32 %0, %%lanemask_lt;" : "=r"(lt));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt0));
    if (threadIdx.x < 64) stat[threadIdx.x] = threadIdx.x;
    __syncthreads();
    dyn[threadIdx.x] = stat[(threadIdx.x + 1) % 64];
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1));
    unsigned f = 0;
    f |= (smid < nsmid) << 0;
    f |= (warpid < nwarpid) << 1;
    f |= (total >= 64 * 4 + dynsz) << 2;
    f |= (dynsz == blockDim.x * 4) << 3;
    f |= (lane == threadIdx.x % warpSize) << 4;
    f |= (eq == (1u << lane)) << 5;
    f |= (le == (eq | lt)) << 6;
    f |= (ge == ~lt) << 7;
    f |= (gt == (ge & ~eq)) << 8;
    f |= (t1 > t0) << 9;
    f |= (gt0 > 0) << 10;
    f |= (warpSize == 32) << 11;
    flags[blockIdx.x * blockDim.x + threadIdx.x] = f + (dyn[threadIdx.x] == (int)((threadIdx.x + 1) % 64)) * 4096;
}

int main() {
    const int n = 3000, block = 256, grid = (n + block - 1) / block;
    int *h = (int *)malloc(n * sizeof(int)), *r = (int *)malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) h[i] = (i * 7919) % 201 - 100;
    int *din, *dout, *dcnt;
    CHECK(cudaMalloc(&din, n * sizeof(int)));
    CHECK(cudaMalloc(&dout, n * sizeof(int)));
    CHECK(cudaMalloc(&dcnt, n * sizeof(int)));
    CHECK(cudaMemcpy(din, h, n * sizeof(int), cudaMemcpyHostToDevice));

    blockReduce<<<grid, block>>>(din, dout, n);
    CHECK(cudaMemcpy(r, dout, grid * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < grid; b++) {
        int s = 0;
        for (int i = b * block; i < n && i < (b + 1) * block; i++) s += h[i];
        EXPECT(r[b] == s);
    }

    blockScan<<<grid, block>>>(din, dout, n);
    CHECK(cudaMemcpy(r, dout, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0, s = 0; b < n; b++) {
        s = (b % block == 0 ? 0 : s) + h[b];
        EXPECT(r[b] == s);
    }

    CHECK(cudaMemset(dout, 0, n * sizeof(int)));
    warpCompact<<<grid, block>>>(din, dout, dcnt, n);
    int nwarps = grid * block / 32;
    int *cnt = (int *)malloc(nwarps * sizeof(int));
    CHECK(cudaMemcpy(cnt, dcnt, nwarps * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(r, dout, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int w = 0; w < nwarps && w * 32 < n; w++) {
        int k = 0;
        for (int i = w * 32; i < n && i < w * 32 + 32; i++)
            if (h[i] > 0) { EXPECT(r[w * 32 + k] == h[i]); k++; }
        EXPECT(cnt[w] == k);
    }

    unsigned *dflags, flags[2 * 96];
    CHECK(cudaMalloc(&dflags, sizeof flags));
    specials<<<2, 96, 96 * 4>>>(dflags);
    CHECK(cudaMemcpy(flags, dflags, sizeof flags, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 2 * 96; i++) {
        if (flags[i] != 0x1FFFu) { printf("FAIL specials thread %d flags %#x\n", i, flags[i]); return 1; }
    }
    CHECK(cudaDeviceSynchronize());
    printf("PASS emu_warp\n");
    return 0;
}
