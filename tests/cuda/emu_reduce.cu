// Emulator end-to-end program: the reduction patterns of NVIDIA's reduction sample and of cooperative groups,
// written for pyvgpu's tests (issue 19 part 1). Every kernel sums ints and is checked against the host:
//   k0-k3   shared-memory trees (interleaved with modulo, strided index, sequential, first add during load)
//   k4-k6   shuffle tail of a tile32 for the first warp, unrolled by block size, grid-stride accumulation
//   k7      warp sums with __shfl_down_sync under the block's lane mask, then the warp sums reduced by the first
//           lanes only, under the mask __ballot_sync gives (sources outside the mask read 0 on NVIDIA GPUs)
//   k8      cg::reduce over tiled_partition<32>
//   k9      cg::reduce over tiled_partition of 64-512 threads (multi-warp tiles, block_tile_memory)
//   k10     tiles of 64-1024 threads synchronised by named barriers with thread counts (__barrier_sync_count)
//   k11     tiled_partition<1..32>, coalesced_threads, labeled_partition with cg::reduce
// Usage: emu_reduce [n]   (default 16M ints for the grid-stride kernels, n/64 for the trees)
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include "check.h"

namespace cg = cooperative_groups;

__global__ void k0(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    cg::thread_block b = cg::this_thread_block();
    unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0;
    cg::sync(b);
    for (unsigned d = 1; d < blockDim.x; d *= 2) {
        if (t % (2 * d) == 0) s[t] += s[t + d];
        cg::sync(b);
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

__global__ void k1(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0;
    __syncthreads();
    for (unsigned d = 1; d < blockDim.x; d *= 2) {
        unsigned at = 2 * d * t;
        if (at < blockDim.x) s[at] += s[at + d];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

__global__ void k2(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0;
    __syncthreads();
    for (unsigned d = blockDim.x / 2; d > 0; d >>= 1) {
        if (t < d) s[t] += s[t + d];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

__global__ void k3(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x * 2 + t;
    int v = (i < n ? in[i] : 0) + (i + blockDim.x < n ? in[i + blockDim.x] : 0);
    s[t] = v;
    __syncthreads();
    for (unsigned d = blockDim.x / 2; d > 0; d >>= 1) {
        if (t < d) s[t] = v = v + s[t + d];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = v;
}

template <unsigned B>
__device__ int tile_tail(int v, const int *s) {
    cg::thread_block b = cg::this_thread_block();
    cg::thread_block_tile<32> w = cg::tiled_partition<32>(b);
    if (b.thread_rank() < 32) {
        if (B >= 64) v += s[threadIdx.x + 32];
        for (int o = w.size() / 2; o > 0; o /= 2) v += w.shfl_down(v, o);
    }
    return v;
}

template <unsigned B>
__global__ void k4(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    unsigned t = threadIdx.x, i = blockIdx.x * B * 2 + t;
    int v = (i < n ? in[i] : 0) + (i + B < n ? in[i + B] : 0);
    s[t] = v;
    __syncthreads();
    for (unsigned d = B / 2; d > 32; d >>= 1) {
        if (t < d) s[t] = v = v + s[t + d];
        __syncthreads();
    }
    v = tile_tail<B>(v, s);
    if (t == 0) out[blockIdx.x] = v;
}

// The block's values unrolled down to 64, then the first warp's shuffles (the block sum in thread 0).
template <unsigned B>
__device__ int unrolled_tree(int v, int *s) {
    unsigned t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    if (B >= 512 && t < 256) s[t] = v = v + s[t + 256];
    __syncthreads();
    if (B >= 256 && t < 128) s[t] = v = v + s[t + 128];
    __syncthreads();
    if (B >= 128 && t < 64) s[t] = v = v + s[t + 64];
    __syncthreads();
    return tile_tail<B>(v, s);
}

template <unsigned B>
__global__ void k5(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    unsigned t = threadIdx.x, i = blockIdx.x * B * 2 + t;
    int v = (i < n ? in[i] : 0) + (i + B < n ? in[i + B] : 0);
    v = unrolled_tree<B>(v, s);
    if (t == 0) out[blockIdx.x] = v;
}

template <unsigned B>
__device__ int grid_stride_sum(const int *in, unsigned n) {
    int v = 0;
    for (unsigned i = blockIdx.x * B * 2 + threadIdx.x; i < n; i += B * 2 * gridDim.x) {
        v += in[i];
        if (i + B < n) v += in[i + B];
    }
    return v;
}

template <unsigned B>
__global__ void k6(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    unsigned t = threadIdx.x;
    int v = grid_stride_sum<B>(in, n);
    v = unrolled_tree<B>(v, s);
    if (t == 0) out[blockIdx.x] = v;
}

__device__ __forceinline__ int warp_sum(unsigned mask, int v) {
    for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down_sync(mask, v, o);
    return v;
}

template <unsigned B>
__global__ void k7(const int *__restrict__ in, int *__restrict__ out, unsigned n) {
    extern __shared__ int s[];
    unsigned t = threadIdx.x;
    const unsigned mask = B >= 32 ? 0xffffffffu : (1u << B) - 1;
    int v = warp_sum(mask, grid_stride_sum<B>(in, n));
    if (t % warpSize == 0) s[t / warpSize] = v;
    __syncthreads();
    const unsigned nwarps = B / warpSize > 0 ? B / warpSize : 1;
    const unsigned firsts = __ballot_sync(mask, t < nwarps);
    if (t < nwarps) v = warp_sum(firsts, s[t]);
    if (t == 0) out[blockIdx.x] = v;
}

__global__ void k8(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    cg::thread_block b = cg::this_thread_block();
    cg::thread_block_tile<32> w = cg::tiled_partition<32>(b);
    int v = 0;
    for (unsigned i = blockIdx.x * b.size() + b.thread_rank(); i < n; i += gridDim.x * b.size()) v += in[i];
    s[b.thread_rank()] = v;
    for (unsigned d = b.size() / 2; d >= 32; d >>= 1) {
        b.sync();
        if (b.thread_rank() < d) s[b.thread_rank()] = v = v + s[b.thread_rank() + d];
    }
    b.sync();
    if (w.meta_group_rank() == 0) v = cg::reduce(w, v, cg::plus<int>());
    if (b.thread_rank() == 0) out[blockIdx.x] = v;
}

template <unsigned B, unsigned G>
__global__ void k9(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    __shared__ cg::block_tile_memory<B> scratch;
    auto b = cg::this_thread_block(scratch);
    auto tile = cg::tiled_partition<G>(b);
    int v = grid_stride_sum<B>(in, n);
    v = cg::reduce(tile, v, cg::plus<int>());
    if (tile.thread_rank() == 0) s[tile.meta_group_rank()] = v;
    cg::sync(b);
    if (threadIdx.x == 0) {
        int r = 0;
        for (unsigned k = 0; k < tile.meta_group_size(); k++) r += s[k];
        out[blockIdx.x] = r;
    }
}

// Tiles of G threads (64-1024) that synchronise among themselves with named barrier 1 + tile, count G: a tree
// over the tile's slice of shared memory.
template <unsigned B, unsigned G>
__global__ void k10(const int *in, int *out, unsigned n) {
    extern __shared__ int s[];
    unsigned t = threadIdx.x, tile = t / G, r = t % G;
    int v = grid_stride_sum<B>(in, n);
    int *ts = s + tile * G;
    ts[r] = v;
    __barrier_sync_count(1 + tile, G);
    for (unsigned d = G / 2; d > 0; d >>= 1) {
        if (r < d) ts[r] = v = v + ts[r + d];
        __barrier_sync_count(1 + tile, G);
    }
    __syncthreads();
    if (t == 0) {
        int sum = 0;
        for (unsigned k = 0; k < B / G; k++) sum += s[k * G];
        out[blockIdx.x] = sum;
    }
}

// Per tile size 1..32: tile sums into out[tile index]; then sums of the positive values through coalesced
// groups (atomicAdd by each group's leader), and sums per label 0..3 through labeled_partition.
template <unsigned G>
__global__ void k11_tiles(const int *in, int *out, unsigned n) {
    auto w = cg::tiled_partition<G>(cg::this_thread_block());
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = cg::reduce(w, i < n ? in[i] : 0, cg::plus<int>());
    if (w.thread_rank() == 0) out[i / G] = v;
}

__global__ void k11_groups(const int *in, int *pos, int *labels, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    if (v > 0) {
        cg::coalesced_group g = cg::coalesced_threads();
        int sum = cg::reduce(g, v, cg::plus<int>());
        if (g.thread_rank() == 0) atomicAdd(pos, sum);
    }
    auto w = cg::tiled_partition<32>(cg::this_thread_block());
    int label = ((v % 4) + 4) % 4;
    cg::coalesced_group part = cg::labeled_partition(w, label);
    int sum = cg::reduce(part, v, cg::plus<int>());
    if (part.thread_rank() == 0) atomicAdd(&labels[label], sum);
}

static long long host_sum(const std::vector<int> &h, size_t a, size_t b) {
    long long s = 0;
    for (size_t i = a; i < b && i < h.size(); i++) s += h[i];
    return s;
}

static void expect_total(const char *name, int *dout, int blocks, long long want) {
    std::vector<int> r(blocks);
    CHECK(cudaMemcpy(r.data(), dout, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    long long got = 0;
    for (int b = 0; b < blocks; b++) got += r[b];
    if ((int)got != (int)want) {
        printf("FAIL %s: sum %lld, host %lld\n", name, got, want);
        exit(1);
    }
    printf("ok %s\n", name);
}

int main(int argc, char **argv) {
    unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 1u << 24;
    unsigned ntree = n / 64 > 4096 ? n / 64 : 4096;
    std::vector<int> h(n);
    for (unsigned i = 0; i < n; i++) h[i] = (int)((i * 2654435761u) >> 24) - 128;
    int *din, *dout, *dlab;
    CHECK(cudaMalloc(&din, n * sizeof(int)));
    CHECK(cudaMalloc(&dout, (n / 1 + 64) * sizeof(int)));
    CHECK(cudaMalloc(&dlab, 5 * sizeof(int)));
    CHECK(cudaMemcpy(din, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    const long long all = host_sum(h, 0, n), tree = host_sum(h, 0, ntree);
    const int T = 256, G = 64;

    int blocks = (ntree + T - 1) / T;
    k0<<<blocks, T, T * sizeof(int)>>>(din, dout, ntree); expect_total("k0", dout, blocks, tree);
    k1<<<blocks, T, T * sizeof(int)>>>(din, dout, ntree); expect_total("k1", dout, blocks, tree);
    k2<<<blocks, T, T * sizeof(int)>>>(din, dout, ntree); expect_total("k2", dout, blocks, tree);
    blocks = (ntree + 2 * T - 1) / (2 * T);
    k3<<<blocks, T, T * sizeof(int)>>>(din, dout, ntree); expect_total("k3", dout, blocks, tree);
    k4<T><<<blocks, T, T * sizeof(int)>>>(din, dout, ntree); expect_total("k4", dout, blocks, tree);
    k5<T><<<blocks, T, T * sizeof(int)>>>(din, dout, ntree); expect_total("k5", dout, blocks, tree);
    k6<T><<<G, T, T * sizeof(int)>>>(din, dout, n); expect_total("k6", dout, G, all);
    k7<T><<<G, T, (T / 32 + 1) * sizeof(int)>>>(din, dout, n); expect_total("k7/256", dout, G, all);
    k7<64><<<G, 64, 3 * sizeof(int)>>>(din, dout, n); expect_total("k7/64", dout, G, all);
    k7<1024><<<G / 4, 1024, 33 * sizeof(int)>>>(din, dout, n); expect_total("k7/1024", dout, G / 4, all);
    k8<<<G, T, T * sizeof(int)>>>(din, dout, n); expect_total("k8", dout, G, all);
    k9<128, 64><<<G, 128, 2 * sizeof(int)>>>(din, dout, n); expect_total("k9/64", dout, G, all);
    k9<256, 128><<<G, 256, 2 * sizeof(int)>>>(din, dout, n); expect_total("k9/128", dout, G, all);
    k9<1024, 512><<<G / 4, 1024, 2 * sizeof(int)>>>(din, dout, n); expect_total("k9/512", dout, G / 4, all);
    k10<256, 64><<<G, 256, 256 * sizeof(int)>>>(din, dout, n); expect_total("k10/64", dout, G, all);
    k10<512, 256><<<G, 512, 512 * sizeof(int)>>>(din, dout, n); expect_total("k10/256", dout, G, all);
    k10<1024, 1024><<<G / 4, 1024, 1024 * sizeof(int)>>>(din, dout, n); expect_total("k10/1024", dout, G / 4, all);

    // tiles of 1..32: per-tile sums against the host
    const unsigned nt = 4096 + 77;
    std::vector<int> r(nt);
#define TILES(S)                                                                                       \
    {                                                                                                  \
        CHECK(cudaMemset(dout, 0, nt * sizeof(int)));                                                  \
        k11_tiles<S><<<(nt + 127) / 128, 128>>>(din, dout, nt);                                        \
        CHECK(cudaMemcpy(r.data(), dout, nt * sizeof(int), cudaMemcpyDeviceToHost));                   \
        for (unsigned k = 0; k * S < nt; k++)                                                          \
            if ((long long)r[k] != host_sum(h, k * S, std::min(k * S + S, nt))) {                      \
                printf("FAIL tile %d index %u: %d\n", S, k, r[k]);                                       \
                return 1;                                                                              \
            }                                                                                          \
        printf("ok tiles of %d\n", S);                                                                 \
    }
    TILES(1) TILES(2) TILES(4) TILES(8) TILES(16) TILES(32)

    CHECK(cudaMemset(dlab, 0, 5 * sizeof(int)));
    k11_groups<<<(nt + 127) / 128, 128>>>(din, dlab + 4, dlab, nt);
    int lab[5];
    CHECK(cudaMemcpy(lab, dlab, sizeof lab, cudaMemcpyDeviceToHost));
    long long wantpos = 0, wantlab[4] = {0, 0, 0, 0};
    for (unsigned i = 0; i < (nt + 127) / 128 * 128; i++) {
        int v = i < nt ? h[i] : 0;
        if (v > 0) wantpos += v;
        wantlab[((v % 4) + 4) % 4] += v;
    }
    EXPECT(lab[4] == wantpos);
    for (int k = 0; k < 4; k++) EXPECT(lab[k] == wantlab[k]);
    printf("ok coalesced_threads and labeled_partition\n");
    CHECK(cudaDeviceSynchronize());
    printf("PASS emu_reduce\n");
    return 0;
}
