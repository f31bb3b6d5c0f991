// Cooperative launches with grid-wide synchronization (cg::this_grid().sync() as nvcc lowers it) through
// cudaLaunchCooperativeKernel, cudaLaunchKernelExC's cooperative attribute and a captured graph: a multi-block
// reduction in the style of NVIDIA's reductionMultiBlockCG sample and an iterative stencil whose every step reads
// other blocks' results, against host results; the occupancy rule (all blocks co-resident:
// cudaErrorCooperativeLaunchTooLarge one block beyond it) and grid.is_valid() in a plain launch (true: a GPU gives
// every launch of a kernel that asks a grid workspace; an H100 with CUDA 13 said so).
// Prints "PASS emu_coop".
#include <cooperative_groups.h>
#include <cstdio>
#include <vector>

#include "check.h"

namespace cg = cooperative_groups;

// Sum of in[0..n) into *out: each block reduces a grid-stride slice into partial[block], the grid syncs, block 0
// reduces the partials.
__global__ void reduce_grid(const int *in, int *partial, long long *out, int n) {
    cg::grid_group grid = cg::this_grid();
    cg::thread_block block = cg::this_thread_block();
    __shared__ int s[256];
    int sum = 0;
    for (int i = grid.thread_rank(); i < n; i += grid.size()) sum += in[i];
    s[block.thread_rank()] = sum;
    block.sync();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (block.thread_rank() < k) s[block.thread_rank()] += s[block.thread_rank() + k];
        block.sync();
    }
    if (block.thread_rank() == 0) partial[blockIdx.x] = s[0];
    grid.sync();
    if (blockIdx.x == 0 && block.thread_rank() == 0) {
        long long t = 0;
        for (int b = 0; b < gridDim.x; b++) t += partial[b];
        *out = t;
    }
}

// `steps` Jacobi steps of a 1D ring: v[i] = (v[i-1] + 2 v[i] + v[i+1]) / 4 in integers, every step reading the
// neighbours other blocks wrote before the grid synchronized.
__global__ void stencil(int *a, int *b, int n, int steps) {
    cg::grid_group grid = cg::this_grid();
    for (int s = 0; s < steps; s++) {
        for (int i = grid.thread_rank(); i < n; i += grid.size())
            b[i] = (a[(i + n - 1) % n] + 2 * a[i] + a[(i + 1) % n]) / 4;
        grid.sync();
        int *t = a; a = b; b = t;
    }
}

__global__ void valid(int *out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) *out = cg::this_grid().is_valid();
}

int main() {
    int dev = 0, coop = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    EXPECT(coop == 1 && sms > 0);

    // the reduction at the largest grid the occupancy allows
    const int threads = 256, n = 1 << 20;
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reduce_grid, threads, 0));
    EXPECT(per_sm > 0);
    int blocks = per_sm * sms;
    std::vector<int> h(n);
    long long want = 0;
    for (int i = 0; i < n; i++) { h[i] = (i * 2654435761u >> 7) % 1000 - 500; want += h[i]; }
    int *in, *partial;
    long long *out;
    CHECK(cudaMalloc(&in, n * sizeof(int)));
    CHECK(cudaMalloc(&partial, (blocks + 1) * sizeof(int)));
    CHECK(cudaMalloc(&out, sizeof(long long)));
    CHECK(cudaMemcpy(in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    int nn = n;
    void *args[] = {&in, &partial, &out, &nn};
    CHECK(cudaMemset(out, 0, sizeof(long long)));
    CHECK(cudaLaunchCooperativeKernel((void *)reduce_grid, blocks, threads, args, 0, 0));
    long long got = 0;
    CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got == want);

    // one block more than can be resident: refused before anything runs
    EXPECT_ERR(cudaLaunchCooperativeKernel((void *)reduce_grid, blocks + 1, threads, args, 0, 0),
               cudaErrorCooperativeLaunchTooLarge);
    EXPECT(cudaGetLastError() == cudaErrorCooperativeLaunchTooLarge);     // not sticky: read once, then gone
    CHECK(cudaGetLastError());

    // the same through cudaLaunchKernelExC with the cooperative attribute, on a smaller grid
    CHECK(cudaMemset(out, 0, sizeof(long long)));
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(sms);
    cfg.blockDim = dim3(threads);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelExC(&cfg, (void *)reduce_grid, args));
    got = 0;
    CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got == want);

    // the stencil, captured into a graph and launched twice
    const int m = 3000, steps = 25;
    std::vector<int> ring(m), ref(m), tmp(m);
    for (int i = 0; i < m; i++) ring[i] = (i * 7919) % 1000;
    ref = ring;
    for (int s = 0; s < 2 * steps; s++) {
        for (int i = 0; i < m; i++) tmp[i] = (ref[(i + m - 1) % m] + 2 * ref[i] + ref[(i + 1) % m]) / 4;
        ref.swap(tmp);
    }
    int *a, *b;
    CHECK(cudaMalloc(&a, m * sizeof(int)));
    CHECK(cudaMalloc(&b, m * sizeof(int)));
    CHECK(cudaMemcpy(a, ring.data(), m * sizeof(int), cudaMemcpyHostToDevice));
    int mm = m, ss = steps;           // steps is odd: a graph launch leaves its result in b; swap roles between
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    void *sargs[] = {&a, &b, &mm, &ss};
    void *sargs2[] = {&b, &a, &mm, &ss};
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CHECK(cudaLaunchCooperativeKernel((void *)stencil, sms, 128, sargs, 0, st));
    CHECK(cudaLaunchCooperativeKernel((void *)stencil, sms, 128, sargs2, 0, st));
    CHECK(cudaStreamEndCapture(st, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    CHECK(cudaGraphLaunch(ge, st));
    CHECK(cudaStreamSynchronize(st));
    std::vector<int> res(m);
    CHECK(cudaMemcpy(res.data(), a, m * sizeof(int), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < m; i++) bad += res[i] != ref[i];
    EXPECT(bad == 0);

    // a plain launch has a grid workspace too (an H100, CUDA 13): the grid group is valid there
    int *v;
    CHECK(cudaMalloc(&v, sizeof(int)));
    CHECK(cudaMemset(v, 0xff, sizeof(int)));
    valid<<<2, 32>>>(v);
    int isvalid = -1;
    CHECK(cudaMemcpy(&isvalid, v, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(isvalid == 1);
    CHECK(cudaMemset(v, 0xff, sizeof(int)));
    void *vargs[] = {&v};
    CHECK(cudaLaunchCooperativeKernel((void *)valid, 2, 32, vargs, 0, 0));
    CHECK(cudaMemcpy(&isvalid, v, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(isvalid == 1);

    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(st));
    printf("PASS emu_coop\n");
    return 0;
}
