// Kernels whose CTAs talk, for stage 3 (emu/translator/ctaatomic.py; tests/emu/test_emu_ctaatomic.py runs them
// through EmuModule as PTX, against the lockstep path and host models). Each has a __syncthreads().
#include <cstdint>

// A shared histogram of bytes per CTA (atom.shared.add), merged into global counters (atom.global.add.u32 and
// .u64), as CUB's radix histogram does.
extern "C" __global__ void histo(const uint32_t *in, uint32_t *bins, unsigned long long *total, int n) {
    __shared__ uint32_t h[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t v = in[i];
        atomicAdd(&h[v & 255], 1u);
        atomicAdd(&h[(v >> 8) & 255], 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        if (h[i]) atomicAdd(&bins[i], h[i]);
        atomicAdd(total, (unsigned long long)h[i]);
    }
}

// Every atomic operation and type on contended addresses, each thread keeping what it read: shared ones per CTA,
// global ones on one word per CTA (one instruction per address: the lockstep path's lane order is the CTAs'
// order there too).
extern "C" __global__ void every_op(const uint32_t *in, uint32_t *g32, unsigned long long *g64, float *gf,
                                    double *gd, uint32_t *old) {
    __shared__ uint32_t s[16];
    __shared__ unsigned long long s64[4];
    __shared__ float sf;
    __shared__ double sd;
    int t = threadIdx.x, c = blockIdx.x, i = c * blockDim.x + t;
    if (t < 16) s[t] = in[t] * 7u;
    if (t < 4) s64[t] = 0xFFFFFFFF00000000ull + t;
    if (t == 0) { sf = 0.5f; sd = 0.25; }
    __syncthreads();
    uint32_t v = in[i], k = v & 3;
    uint32_t *o = old + 20 * i;
    o[0] = atomicAdd(&s[k], v);
    o[1] = atomicMin((int *)&s[4 + k], (int)(v - 1000u));
    o[2] = atomicMax(&s[8], v);
    o[3] = atomicAnd(&s[9], v | 0x0F0F0F0Fu);
    o[4] = atomicOr(&s[10], v & 0x01010101u);
    o[5] = atomicXor(&s[11], v);
    o[6] = atomicExch(&s[12], v);
    o[7] = atomicCAS(&s[13], t & 2 ? v : s[13], v);
    o[8] = atomicInc(&s[14], 37u);
    o[9] = atomicDec(&s[15], 29u);
    unsigned long long w = atomicAdd(&s64[k], (unsigned long long)v << 20);
    o[10] = (uint32_t)w; o[11] = (uint32_t)(w >> 32);
    o[12] = (uint32_t)atomicMin((long long *)&s64[3], (long long)v - 99999);
    o[13] = __float_as_uint(atomicAdd(&sf, __uint_as_float((v & 0x007FFFFFu) | 0x3F000000u)));
    double d = atomicAdd(&sd, (double)v * 1e-3);
    o[14] = (uint32_t)__double_as_longlong(d); o[15] = (uint32_t)(__double_as_longlong(d) >> 32);
    o[16] = atomicAdd(&g32[c], v);
    o[17] = (uint32_t)atomicMax(&g64[c], (unsigned long long)v * v);
    o[18] = __float_as_uint(atomicExch(&gf[c], (float)v));
    o[19] = (uint32_t)__double_as_longlong(atomicAdd(&gd[c], (double)v));
    atomicAdd(&g32[gridDim.x], 1u);                     // red.global.add (result unused)
    __syncthreads();
    if (t < 16) g32[gridDim.x + 1 + 16 * c + t] = s[t];
}

// A decoupled look-back: each CTA sums its tile, takes a tile number from a global counter, publishes its
// aggregate (flag 1) and, once it knows its prefix, its inclusive sum (flag 2) with volatile stores and fences;
// it walks back over earlier tiles spinning on their flags. Host model: the tiles' exclusive prefix sums.
extern "C" __global__ void lookback(const uint32_t *in, uint32_t *out, uint32_t *counter, volatile uint32_t *flag,
                                    volatile uint32_t *agg, volatile uint32_t *incl) {
    __shared__ uint32_t part[256];
    __shared__ uint32_t tile, prefix;
    if (threadIdx.x == 0) tile = atomicAdd(counter, 1u);
    __syncthreads();
    uint32_t x = in[tile * blockDim.x + threadIdx.x];
    part[threadIdx.x] = x;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        uint32_t sum = part[0], p = 0;
        agg[tile] = sum;
        __threadfence();
        flag[tile] = tile == 0 ? 2 : 1;
        if (tile == 0) incl[0] = sum;
        for (int j = (int)tile - 1; j >= 0; j--) {
            uint32_t f;
            while ((f = flag[j]) == 0) { }
            __threadfence();
            if (f == 2) { p += incl[j]; break; }
            p += agg[j];
        }
        if (tile) { incl[tile] = p + sum; __threadfence(); flag[tile] = 2; }
        prefix = p;
    }
    __syncthreads();
    out[tile * blockDim.x + threadIdx.x] = prefix;
}

// CTA 0 waits for the last CTA of its chunk (a spin on a flag set later); every CTA then meets at a hand-made grid
// barrier (an arrival counter, a spin until all arrived), with acquire/release accesses.
extern "C" __global__ void wait_later(uint32_t *flag, uint32_t *count, uint32_t *out) {
    __syncthreads();
    if (threadIdx.x == 0) {
        if (blockIdx.x == 0) {
            while (*(volatile uint32_t *)flag == 0) { }
            out[0] = *(volatile uint32_t *)(flag + 1);
        } else if (blockIdx.x == gridDim.x - 1) {
            flag[1] = 12345;
            __threadfence();
            *(volatile uint32_t *)flag = 1;
        }
        atomicAdd(count, 1u);
        uint32_t seen;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
        } while (seen < gridDim.x);
        asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(out + 1 + blockIdx.x), "r"(seen) : "memory");
    }
    __syncthreads();
}

// __syncthreads_or / _and / _count (bar.red) on diverged and converged paths.
extern "C" __global__ void bar_reduce(const uint32_t *in, uint32_t *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t v = in[i];
    int a = __syncthreads_or(v == 77u);
    int b = __syncthreads_and(v != 5u);
    int c = __syncthreads_count(v & 1u);
    out[3 * i] = a; out[3 * i + 1] = b; out[3 * i + 2] = c;
}
