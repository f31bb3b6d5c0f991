// The workload of NVIDIA's scan sample at its defaults, written here: exclusive prefix sums of N uints (13 * 2^20 / 2)
// cut into equal arrays, each size scanned `cycles` (100) times. Short arrays (4 .. 1024 elements): one kernel, each
// 256-thread block scans 1024 elements as uint4 per thread with a log-step shared-memory scan (two barriers per
// step). Large arrays (8K .. 256K elements): the same per-block scan, a scan of the blocks' totals per array, and a
// uniform add of those offsets. Every size is checked against a host scan.
//     scan_batches [N] [cycles (100)] [first large length (8192)] [last large length (262144)] [short: 1|0]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); exit(1); } } while (0)

typedef unsigned int uint;
static const uint BLOCK = 256;                 // threads per block; each scans 4 elements
static const uint TILE = 4 * BLOCK;

// Inclusive log-step scan of one value per thread over groups of `size` threads (size a power of two <= BLOCK).
__device__ uint scanGroupInclusive(uint v, volatile uint *s, uint size)
{
    uint pos = 2 * threadIdx.x - (threadIdx.x & (size - 1));
    s[pos] = 0;
    pos += size;
    s[pos] = v;
    for (uint offset = 1; offset < size; offset <<= 1) {
        __syncthreads();
        uint t = s[pos] + s[pos - offset];
        __syncthreads();
        s[pos] = t;
    }
    return s[pos];
}

__device__ uint4 scanTileExclusive(uint4 a, volatile uint *s, uint size)
{
    uint4 inc = a;
    inc.y += inc.x;
    inc.z += inc.y;
    inc.w += inc.z;
    uint before = scanGroupInclusive(inc.w, s, size / 4) - inc.w;
    return make_uint4(before, before + inc.x, before + inc.y, before + inc.z);
}

__global__ void scanTiles(uint4 *dst, const uint4 *src, uint size)
{
    __shared__ uint s[2 * BLOCK];
    uint pos = blockIdx.x * blockDim.x + threadIdx.x;
    dst[pos] = scanTileExclusive(src[pos], s, size);
}

// Exclusive scan of the tiles' totals, per array of `tilesPerArray` tiles.
__global__ void scanTotals(uint *buf, const uint *dst, const uint *src, uint ntiles, uint tilesPerArray)
{
    __shared__ uint s[2 * BLOCK];
    uint pos = blockIdx.x * blockDim.x + threadIdx.x;
    uint v = 0;
    if (pos < ntiles)
        v = dst[TILE - 1 + TILE * pos] + src[TILE - 1 + TILE * pos];
    uint r = scanGroupInclusive(v, s, tilesPerArray) - v;
    if (pos < ntiles)
        buf[pos] = r;
}

__global__ void addOffsets(uint4 *data, const uint *buf)
{
    __shared__ uint off;
    if (threadIdx.x == 0)
        off = buf[blockIdx.x];
    __syncthreads();
    uint pos = blockIdx.x * blockDim.x + threadIdx.x;
    uint4 v = data[pos];
    v.x += off;
    v.y += off;
    v.z += off;
    v.w += off;
    data[pos] = v;
}

static bool check(const std::vector<uint> &in, const std::vector<uint> &out, uint n, uint len)
{
    for (uint a = 0; a < n; a += len) {
        uint sum = 0;
        for (uint i = a; i < a + len; i++) {
            if (out[i] != sum) { printf("FAIL scan_batches: length %u, element %u: %u, expected %u\n", len, i, out[i], sum); return false; }
            sum += in[i];
        }
    }
    return true;
}

int main(int argc, char **argv)
{
    const uint n = argc > 1 ? (uint)atoi(argv[1]) : 13 * 1048576 / 2;
    const int cycles = argc > 2 ? atoi(argv[2]) : 100;
    const uint firstLarge = argc > 3 ? (uint)atoi(argv[3]) : 8 * BLOCK;
    const uint lastLarge = argc > 4 ? (uint)atoi(argv[4]) : TILE * BLOCK;
    const bool shortArrays = argc <= 5 || atoi(argv[5]) != 0;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<uint> in(n), out(n);
    unsigned seed = 2009;
    for (uint i = 0; i < n; i++) { seed = seed * 1103515245u + 12345u; in[i] = (seed >> 16) & 0xff; }
    uint *dIn, *dOut, *dBuf;
    CHECK(cudaMalloc(&dIn, n * sizeof(uint)));
    CHECK(cudaMalloc(&dOut, n * sizeof(uint)));
    CHECK(cudaMalloc(&dBuf, (n / TILE + 1) * sizeof(uint)));
    CHECK(cudaMemcpy(dIn, in.data(), n * sizeof(uint), cudaMemcpyHostToDevice));
    int sizes = 0;
    for (uint len = 4; shortArrays && len <= TILE; len <<= 1, sizes++) {
        if (n % TILE) { printf("FAIL: N must be a multiple of %u\n", TILE); return 1; }
        for (int c = 0; c < cycles; c++)
            scanTiles<<<n / TILE, BLOCK>>>((uint4 *)dOut, (const uint4 *)dIn, len);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(out.data(), dOut, n * sizeof(uint), cudaMemcpyDeviceToHost));
        if (!check(in, out, n, len)) return 1;
    }
    for (uint len = firstLarge; len <= lastLarge; len <<= 1, sizes++) {
        if (n % len) { printf("FAIL: N must be a multiple of %u\n", len); return 1; }
        const uint ntiles = n / TILE;
        for (int c = 0; c < cycles; c++) {
            scanTiles<<<ntiles, BLOCK>>>((uint4 *)dOut, (const uint4 *)dIn, TILE);
            scanTotals<<<(ntiles + BLOCK - 1) / BLOCK, BLOCK>>>(dBuf, dOut, dIn, ntiles, len / TILE);
            addOffsets<<<ntiles, BLOCK>>>((uint4 *)dOut, dBuf);
        }
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(out.data(), dOut, n * sizeof(uint), cudaMemcpyDeviceToHost));
        if (!check(in, out, n, len)) return 1;
    }
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("%u uints, %d sizes x %d cycles: %.1f s\n", n, sizes, cycles, total);
    CHECK(cudaFree(dIn));
    CHECK(cudaFree(dOut));
    CHECK(cudaFree(dBuf));
    printf("PASS scan_batches\n");
    return 0;
}
