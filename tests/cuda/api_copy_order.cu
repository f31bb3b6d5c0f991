// A synchronous cudaMemcpy from page-locked memory to the device has landed when it returns (CUDA's "API
// synchronization behavior": such a copy is synchronous with respect to the host), so a kernel launched right after
// on a cudaStreamNonBlocking stream, which does not wait for the default stream, reads the new bytes. Through pyvgpu
// the daemon copies from its own pageable buffer, and such a copy returns once the bytes are staged (GPU run 6 saw
// the same gap in the managed push: api_managed.cu:195): on a GPU this program finds old bytes if the daemon does not
// order the two. Each round writes a new value, copies it, and samples 256 words (the last one included: the
// copy's tail lands last) on the non-blocking stream. Arguments: [bytes] [rounds]. Prints "OK <checks>".
#include <cstdio>
#include <cstdlib>

#include "check.h"

__global__ void sample(const unsigned *p, size_t n, unsigned want, unsigned *bad)
{
    size_t i = (n - 1) - (size_t)threadIdx.x * (n / blockDim.x);
    if (p[i] != want)
        atomicAdd(bad, 1u);
}

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)32 << 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 12;
    size_t n = bytes / sizeof(unsigned);
    EXPECT(n >= 256 && rounds > 0);
    unsigned *h, *hbad, *d, *bad;
    CHECK(cudaMallocHost(&h, bytes));
    CHECK(cudaMallocHost(&hbad, sizeof *hbad));
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMalloc(&bad, sizeof *bad));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    long checks = 0;
    for (int r = 0; r < rounds; r++) {
        unsigned want = 0x9e3779b9u * (unsigned)(r + 1);
        for (size_t i = 0; i < n; i++)
            h[i] = want;
        CHECK(cudaMemsetAsync(bad, 0, sizeof *bad, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
        sample<<<1, 256, 0, s>>>(d, n, want, bad);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(hbad, bad, sizeof *hbad, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        if (*hbad) {
            printf("FAIL %s round %d of %d: %u of 256 sampled words still old after cudaMemcpy from page-locked "
                   "memory (%zu bytes), read on a non-blocking stream\n", __FILE__, r + 1, rounds, *hbad, bytes);
            return 1;
        }
        checks++;
    }
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(bad));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFreeHost(hbad));
    printf("OK %ld\n", checks);
    return 0;
}
