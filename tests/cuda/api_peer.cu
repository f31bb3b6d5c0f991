// Copies between GPUs through libvcudart, checked byte for byte: cudaMemcpyPeer/PeerAsync and cudaMemcpy(Default)
// between GPUs of one daemon and of two (daemon to daemon, in chunks), ordered with the kernels around them; peer
// access queries and CUDA's error codes. Needs two GPUs. Prints "OK <checks>" on success.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

static long checks = 0;
#define OKC(cond) do { EXPECT(cond); checks++; } while (0)

__global__ void iota(unsigned *p, unsigned k, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = (unsigned)i * 2654435761u + k;
}

__global__ void copy_add(unsigned *dst, const unsigned *src, unsigned k, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] + k;
}

__global__ void add_k(unsigned *p, unsigned k, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += k;
}

int main(int argc, char **argv) {
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    EXPECT(n >= 2);
    const size_t big = argc > 1 ? (size_t)atol(argv[1]) : (70u << 20);   // > one 64 MiB chunk
    const size_t words = big / 4;
    unsigned *a, *b, *c;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&a, big));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc(&b, big));
    CHECK(cudaMalloc(&c, 4096));
    std::vector<unsigned> host(words);

    // GPU0 writes, the copy follows, GPU1 reads after it
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemset(a, 0xAB, big));
    iota<<<64, 256>>>(a + 100, 7, 64 * 256);
    CHECK(cudaMemcpyPeer(b, 1, a, 0, big));
    CHECK(cudaSetDevice(1));
    add_k<<<64, 256>>>(b + 100, 1, 64 * 256);
    CHECK(cudaMemcpy(host.data(), b, big, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < 100; i++) OKC(host[i] == 0xABABABABu);
    for (size_t i = 0; i < 64 * 256; i++) OKC(host[100 + i] == (unsigned)i * 2654435761u + 8);
    size_t bad = 0;
    for (size_t i = 100 + 64 * 256; i < words; i++) bad += host[i] != 0xABABABABu;
    OKC(bad == 0);

    // the other way, at offsets, on streams, and through cudaMemcpy with cudaMemcpyDefault
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    iota<<<1, 1024, 0, s>>>(c, 99, 1024);
    CHECK(cudaMemcpyPeerAsync(a + 5, 0, c, 1, 4096, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaSetDevice(0));
    std::vector<unsigned> small(1030);
    CHECK(cudaMemcpy(small.data(), a, small.size() * 4, cudaMemcpyDeviceToHost));
    OKC(small[4] == 0xABABABABu && small[1029] == 929u * 2654435761u + 7);   // a[1029] is iota's (from 100 on)
    for (int i = 0; i < 1024; i++) OKC(small[5 + i] == (unsigned)i * 2654435761u + 99);
    CHECK(cudaMemcpy(b + 3, a + 5, 4096, cudaMemcpyDefault));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMemcpy(small.data(), b, small.size() * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 1024; i++) OKC(small[3 + i] == (unsigned)i * 2654435761u + 99);

    // a 3D copy between the GPUs' pitched memory
    {
        cudaPitchedPtr src, dst;
        CHECK(cudaSetDevice(0));
        CHECK(cudaMalloc3D(&src, make_cudaExtent(40, 6, 3)));
        std::vector<unsigned char> vol(40 * 6 * 3), out(40 * 6 * 3, 0);
        for (size_t i = 0; i < vol.size(); i++) vol[i] = (unsigned char)(i * 13);
        cudaMemcpy3DParms up = {};
        up.srcPtr = make_cudaPitchedPtr(vol.data(), 40, 40, 6);
        up.dstPtr = src;
        up.extent = make_cudaExtent(40, 6, 3);
        up.kind = cudaMemcpyHostToDevice;
        CHECK(cudaMemcpy3D(&up));
        CHECK(cudaSetDevice(1));
        CHECK(cudaMalloc3D(&dst, make_cudaExtent(40, 6, 3)));
        cudaMemcpy3DPeerParms pp = {};
        pp.srcPtr = src;
        pp.srcDevice = 0;
        pp.dstPtr = dst;
        pp.dstDevice = 1;
        pp.extent = make_cudaExtent(40, 6, 3);
        CHECK(cudaMemcpy3DPeer(&pp));
        cudaMemcpy3DParms down = {};
        down.srcPtr = dst;
        down.dstPtr = make_cudaPitchedPtr(out.data(), 40, 40, 6);
        down.extent = make_cudaExtent(40, 6, 3);
        down.kind = cudaMemcpyDeviceToHost;
        CHECK(cudaMemcpy3D(&down));
        OKC(vol == out);
        pp.srcDevice = n + 5;
        EXPECT_ERR(cudaMemcpy3DPeer(&pp), cudaErrorInvalidDevice);
        cudaGetLastError();
        CHECK(cudaFree(dst.ptr));
        CHECK(cudaSetDevice(0));
        CHECK(cudaFree(src.ptr));
    }

    // peer access: answered from the daemons' snapshots; copies work either way
    int can = -1;
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 0));
    OKC(can == 0);
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 1));
    if (!can) {
        CHECK(cudaSetDevice(0));
        EXPECT_ERR(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessUnsupported);
        EXPECT_ERR(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessUnsupported);
    } else {
        // kernels of GPU0 read and write GPU1's memory directly
        CHECK(cudaSetDevice(0));
        EXPECT_ERR(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
        CHECK(cudaDeviceEnablePeerAccess(1, 0));
        EXPECT_ERR(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
        cudaGetLastError();
        CHECK(cudaMemset(a, 0, 4096));
        copy_add<<<4, 256>>>(a, c, 5, 1024);              // a (GPU0) = c (GPU1) + 5
        add_k<<<4, 256>>>(c, 2, 1024);                    // c (GPU1) += 2, from GPU0
        CHECK(cudaDeviceSynchronize());
        std::vector<unsigned> ha(1024), hc(1024);
        CHECK(cudaMemcpy(ha.data(), a, 4096, cudaMemcpyDeviceToHost));
        CHECK(cudaSetDevice(1));
        CHECK(cudaMemcpy(hc.data(), c, 4096, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 1024; i++) OKC(ha[i] == (unsigned)i * 2654435761u + 99 + 5 && hc[i] == ha[i] - 3);
        CHECK(cudaSetDevice(0));
        CHECK(cudaDeviceDisablePeerAccess(1));
        checks += 3;
    }
    EXPECT_ERR(cudaDeviceEnablePeerAccess(n + 3, 0), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaDeviceCanAccessPeer(&can, 0, n + 3), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaMemcpyPeer(b, 0, a, 0, 16), cudaErrorInvalidValue);      // b is not GPU0's
    EXPECT_ERR(cudaMemcpyPeer(b, 1, a, 0, big + 4), cudaErrorInvalidValue);  // past the end
    cudaGetLastError();
    checks += 5;

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(a));
    printf("OK %ld\n", checks);
    return 0;
}
