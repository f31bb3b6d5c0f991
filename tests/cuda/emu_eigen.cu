// Emulator end-to-end program in the style of NVIDIA's eigenvalues sample: the eigenvalues of a symmetric
// tridiagonal matrix by bisection with Sturm counts, one interval per thread, in one block. Intervals live in shared
// memory (float bounds, 16-bit eigenvalue counts); each level splits every interval, keeps the first non-empty
// child in place and compacts the second children behind them with a scan written as device functions that
// synchronize the block. Pointers into the shared arrays are offset by one (an exclusive scan as `list + 1`), and
// the superdiagonal is read at index tid - 1 of a pointer one past the allocation's start (its element -1 is 0).
// The matrix has known eigenvalues: diagonal 2, off-diagonal -1 gives 2 - 2 cos(k pi / (n + 1)), k = 1..n.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include "check.h"

#define MAXT 128

__device__ unsigned short lcounts[16];      // the first counts, for the host's check of the checksum

__device__ int ceilPow2(int n) {
    if ((n & (n - 1)) == 0) return n;
    int e;
    frexpf((float)n, &e);
    return 1 << e;
}

__device__ float midpoint(float l, float r) {
    return (l < 0) == (r < 0) ? l + (r - l) * 0.5f : (l + r) * 0.5f;
}

// Number of eigenvalues smaller than x (all threads load the matrix into shared memory; active ones count).
__device__ unsigned sturmCount(const float *g_d, const float *g_s, unsigned n, float x, bool active, float *s_d,
                               float *s_s) {
    __syncthreads();
    if (threadIdx.x < n) {
        s_d[threadIdx.x] = g_d[threadIdx.x];
        s_s[threadIdx.x] = *(g_s + threadIdx.x - 1);        // g_s[-1] is 0
    }
    __syncthreads();
    unsigned count = 0;
    if (active) {
        float delta = 1.0f;
        for (unsigned k = 0; k < n; k++) {
            delta = s_d[k] - x - (s_s[k] * s_s[k]) / delta;
            count += delta < 0 ? 1 : 0;
        }
    }
    return count;
}

// In-place exclusive scan of list[0..m) (m a power of two; Blelloch's up-sweep and down-sweep, each level
// separated by a block barrier): list[i] becomes the sum of the old list[0..i).
__device__ void scanExclusive(unsigned short *list, int m) {
    int offset = 1;
    for (int d = m >> 1; d > 0; d >>= 1) {
        __syncthreads();
        if ((int)threadIdx.x < d) {
            int ai = offset * (2 * threadIdx.x + 1) - 1, bi = offset * (2 * threadIdx.x + 2) - 1;
            list[bi] += list[ai];
        }
        offset <<= 1;
    }
    __syncthreads();
    if (threadIdx.x == 0) list[m - 1] = 0;
    for (int d = 1; d < m; d <<= 1) {
        offset >>= 1;
        __syncthreads();
        if ((int)threadIdx.x < d) {
            int ai = offset * (2 * threadIdx.x + 1) - 1, bi = offset * (2 * threadIdx.x + 2) - 1;
            unsigned short t = list[ai];
            list[ai] = list[bi];
            list[bi] += t;
        }
    }
    __syncthreads();
}

__device__ void storeInterval(unsigned addr, float *s_left, float *s_right, unsigned short *s_lc,
                              unsigned short *s_rc, float l, float r, unsigned lc, unsigned rc, float eps) {
    s_lc[addr] = lc;
    s_rc[addr] = rc;
    if (fabsf(r - l) <= fmaxf(1e-30f, fmaxf(fabsf(l), fabsf(r)) * eps)) {
        float m = midpoint(l, r);
        s_left[addr] = m;
        s_right[addr] = m;
    } else {
        s_left[addr] = l;
        s_right[addr] = r;
    }
}

__global__ void bisect(const float *g_d, const float *g_s, unsigned n, float lg, float ug, unsigned lgc,
                       unsigned ugc, float eps, float *g_eig, unsigned *g_levels) {
    __shared__ float s_left[2 * MAXT], s_right[2 * MAXT], s_d[MAXT], s_s[MAXT];
    __shared__ unsigned short s_lc[2 * MAXT], s_rc[2 * MAXT], s_list[2 * MAXT + 1];
    __shared__ unsigned num_active, converged, any_second;
    const unsigned tid = threadIdx.x;
    unsigned short *s_list_exc = s_list + 1;       // s_list[0] stays 0: an exclusive scan seen as list - 1
    float left = 0, right = 0, mid = 0;
    unsigned lc = 0, rc = 0, mc = 0, second = 0, levels = 0;
    s_left[tid] = s_right[tid] = 0;
    s_lc[tid] = s_rc[tid] = 0;
    s_list[tid] = 0;
    if (tid == 0) {
        s_left[0] = lg; s_right[0] = ug; s_lc[0] = lgc; s_rc[0] = ugc;
        num_active = 1;
        s_list[2 * MAXT] = 0;
    }
    while (true) {
        __syncthreads();
        if (tid == 0) { converged = 1; any_second = 0; }
        __syncthreads();
        const unsigned na = num_active;
        if (tid < na) {
            left = s_left[tid]; right = s_right[tid]; lc = s_lc[tid]; rc = s_rc[tid];
            if (left != right) { mid = midpoint(left, right); atomicExch(&converged, 0u); }
        }
        __syncthreads();
        if (converged) break;
        levels++;
        mc = sturmCount(g_d, g_s, n, mid, tid < na && left != right, s_d, s_s);
        __syncthreads();
        second = 0;
        s_list_exc[tid] = 0;
        if (tid < na) {
            if (left == right) {
                storeInterval(tid, s_left, s_right, s_lc, s_rc, left, right, lc, rc, eps);
            } else if (lc != mc && mc != rc) {          // both children hold eigenvalues
                storeInterval(tid, s_left, s_right, s_lc, s_rc, left, mid, lc, mc, eps);
                second = 1;
                s_list_exc[tid] = 1;
                atomicExch(&any_second, 1u);
            } else if (lc != mc) {
                storeInterval(tid, s_left, s_right, s_lc, s_rc, left, mid, lc, mc, eps);
            } else {
                storeInterval(tid, s_left, s_right, s_lc, s_rc, mid, right, mc, rc, eps);
            }
        }
        __syncthreads();
        if (any_second) {
            const int m = ceilPow2(na);
            // the last flag, before the scan replaces the flags by their exclusive prefix sums
            const unsigned last = s_list_exc[na - 1];
            scanExclusive(s_list_exc, m);
            if (second) {
                unsigned addr = na + s_list_exc[tid];
                storeInterval(addr, s_left, s_right, s_lc, s_rc, mid, right, mc, rc, eps);
            }
            __syncthreads();
            if (tid == 0) num_active = na + s_list_exc[na - 1] + last;
        }
    }
    __syncthreads();
    // every interval holds one eigenvalue now, and its left count says which
    if (tid < num_active) g_eig[s_lc[tid]] = s_left[tid];
    if (tid < 16) lcounts[tid] = s_lc[tid];
    // Every thread (all together: no divergence) checksums the counts of the first eight intervals through a
    // pointer that walks one element ahead (loads at offset -1, as stepped pointers into shared lists give).
    const unsigned short *w = s_lc + 1;
    unsigned chk = 0;
    for (unsigned k = 0; k < n / 12; k++, w += 2) chk += w[-1] * (k + 1) + w[0];     // n / 12 = 8
    if (tid == 0) { g_levels[0] = levels; g_levels[1] = chk; }
}

int main() {
    const unsigned n = 96;
    float d[n], s[n + 1];
    for (unsigned i = 0; i < n; i++) { d[i] = 2.0f; s[i + 1] = -1.0f; }
    s[0] = 0.0f;
    s[n] = 0.0f;
    float lg = 2.0f - 2.0f - 1e-3f, ug = 2.0f + 2.0f + 1e-3f;     // Gerschgorin interval, widened
    float *dd, *ds, *deig;
    unsigned *dlev;
    CHECK(cudaMalloc(&dd, sizeof d));
    CHECK(cudaMalloc(&ds, sizeof s));
    CHECK(cudaMalloc(&deig, n * sizeof(float)));
    CHECK(cudaMalloc(&dlev, 2 * sizeof(unsigned)));
    CHECK(cudaMemcpy(dd, d, sizeof d, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(ds, s, sizeof s, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(deig, 0xFF, n * sizeof(float)));
    CHECK(cudaMemset(dlev, 0, 2 * sizeof(unsigned)));
    bisect<<<1, MAXT>>>(dd, ds + 1, n, lg, ug, 0, n, 1e-6f, deig, dlev);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    float eig[n];
    unsigned lev[2];
    CHECK(cudaMemcpy(eig, deig, sizeof eig, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(lev, dlev, sizeof lev, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (unsigned k = 0; k < n; k++) {
        double exact = 2.0 - 2.0 * cos((double)(k + 1) * M_PI / (n + 1));      // ascending
        double err = fabs(eig[k] - exact);
        if (err > worst) worst = err;
    }
    EXPECT(worst < 1e-4);
    EXPECT(lev[0] > 10 && lev[0] < 40);
    unsigned short counts[16];
    CHECK(cudaMemcpyFromSymbol(counts, lcounts, sizeof counts));
    unsigned chk = 0;
    for (int k = 0; k < 8; k++) chk += counts[2 * k] * (k + 1) + counts[2 * k + 1];
    EXPECT(lev[1] == chk);
    printf("PASS emu_eigen (%u eigenvalues, %u levels, max error %.2g)\n", n, lev[0], worst);
    return 0;
}
