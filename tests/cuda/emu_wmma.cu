// Warp matrix operations of sm_75 against host results: a tiled GEMM D = alpha A B + beta C with wmma m16n16k16
// (f16 inputs, f32 accumulators scaled element by element, as NVIDIA's simpleWMMA does) over 64x48x80 matrices;
// m32n8k16 and m8n32k16 with f16 accumulators and mixed row/col layouts; s8 and u8 inputs with s32 accumulators
// from shared memory, wrapping or clamped by .satfinite; and mma.sync m16n8k8 (f16 -> f32) and m8n8k16 (s8 -> s32) through
// inline PTX with every lane's registers placed as the PTX ISA's fragment figures say.
// Prints "PASS emu_wmma".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#include <cuda_fp16.h>
#include <mma.h>

#include "check.h"

using namespace nvcuda;

static const int M = 64, N = 48, K = 80;     // multiples of 16

// One warp per 16x16 tile of D; A row-major M x K, B column-major K x N, C and D row-major M x N.
__global__ void gemm(const half *a, const half *b, const float *c, float *d, float alpha, float beta) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int tm = warp / (N / 16), tn = warp % (N / 16);
    if (tm >= M / 16) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, fc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(fa, a + tm * 16 * K + k, K);
        wmma::load_matrix_sync(fb, b + tn * 16 * K + k, K);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::load_matrix_sync(fc, c + tm * 16 * N + tn * 16, N, wmma::mem_row_major);
    for (int i = 0; i < fc.num_elements; i++) fc.x[i] = alpha * acc.x[i] + beta * fc.x[i];
    wmma::store_matrix_sync(d + tm * 16 * N + tn * 16, fc, N, wmma::mem_row_major);
}

// m32n8k16: A 32x16 column-major, B 16x8 row-major, C/D 32x8 f16 column-major; C doubled before the product.
__global__ void tall(const half *a, const half *b, half *c) {
    wmma::fragment<wmma::matrix_a, 32, 8, 16, half, wmma::col_major> fa;
    wmma::fragment<wmma::matrix_b, 32, 8, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 32, 8, 16, half> fc;
    wmma::load_matrix_sync(fa, a, 32);
    wmma::load_matrix_sync(fb, b, 8);
    wmma::load_matrix_sync(fc, c, 32, wmma::mem_col_major);
    for (int i = 0; i < fc.num_elements; i++) fc.x[i] = fc.x[i] * __float2half(2.0f);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 32, wmma::mem_col_major);
}

// m8n32k16: A 8x16 row-major, B 16x32 column-major, C/D 8x32 f16 row-major.
__global__ void wide(const half *a, const half *b, half *c) {
    wmma::fragment<wmma::matrix_a, 8, 32, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 8, 32, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 8, 32, 16, half> fc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(fc, c, 32, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 32, wmma::mem_row_major);
}

// s8 x s8 or u8 x u8 -> s32 (m16n16k16) from shared memory; sat: the .satfinite form.
template <typename T>
__global__ void ints(const T *a, const T *b, int *c, int sat) {
    __shared__ T sa[256], sb[256];
    for (int i = threadIdx.x; i < 256; i += 32) { sa[i] = a[i]; sb[i] = b[i]; }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, int> fc;
    wmma::load_matrix_sync(fa, sa, 16);
    wmma::load_matrix_sync(fb, sb, 16);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    if (sat) wmma::mma_sync(fc, fa, fb, fc, true);
    else wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

// mma.sync.m16n8k8 f16 x f16 + f32: A 16x8 row-major, B 8x8 (k x n) row-major in memory, C/D 16x8 row-major.
__global__ void mma_f16(const half *a, const half *b, const float *c, float *d) {
    int lane = threadIdx.x, group = lane >> 2, tig = lane & 3;
    half2 a0 = __halves2half2(a[group * 8 + tig * 2], a[group * 8 + tig * 2 + 1]);
    half2 a1 = __halves2half2(a[(group + 8) * 8 + tig * 2], a[(group + 8) * 8 + tig * 2 + 1]);
    half2 b0 = __halves2half2(b[(tig * 2) * 8 + group], b[(tig * 2 + 1) * 8 + group]);
    float c0 = c[group * 8 + tig * 2], c1 = c[group * 8 + tig * 2 + 1];
    float c2 = c[(group + 8) * 8 + tig * 2], c3 = c[(group + 8) * 8 + tig * 2 + 1];
    unsigned ra0, ra1, rb0;
    memcpy(&ra0, &a0, 4); memcpy(&ra1, &a1, 4); memcpy(&rb0, &b0, 4);
    float d0, d1, d2, d3;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%7, %8, %9, %10};"
                 : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
                 : "r"(ra0), "r"(ra1), "r"(rb0), "f"(c0), "f"(c1), "f"(c2), "f"(c3));
    d[group * 8 + tig * 2] = d0; d[group * 8 + tig * 2 + 1] = d1;
    d[(group + 8) * 8 + tig * 2] = d2; d[(group + 8) * 8 + tig * 2 + 1] = d3;
}

// mma.sync.m8n8k16 s8 x s8 + s32: A 8x16 row-major, B 16x8 (k x n) row-major in memory, C/D 8x8 row-major.
__global__ void mma_s8(const signed char *a, const signed char *b, const int *c, int *d) {
    int lane = threadIdx.x, group = lane >> 2, tig = lane & 3;
    unsigned ra = 0, rb = 0;
    for (int i = 0; i < 4; i++) {
        ra |= (unsigned)(unsigned char)a[group * 16 + tig * 4 + i] << (8 * i);
        rb |= (unsigned)(unsigned char)b[(tig * 4 + i) * 8 + group] << (8 * i);
    }
    int c0 = c[group * 8 + tig * 2], c1 = c[group * 8 + tig * 2 + 1], d0, d1;
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0, %1}, {%2}, {%3}, {%4, %5};"
                 : "=r"(d0), "=r"(d1) : "r"(ra), "r"(rb), "r"(c0), "r"(c1));
    d[group * 8 + tig * 2] = d0; d[group * 8 + tig * 2 + 1] = d1;
}

static unsigned rng = 12345;
static int small(int span) { rng = rng * 1103515245u + 12345u; return (int)((rng >> 16) % span) - span / 2; }

template <typename T>
static T *upload(const std::vector<T> &v) {
    T *p;
    CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
    CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}

template <typename T>
static std::vector<T> download(const T *p, size_t n) {
    std::vector<T> v(n);
    CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

// Values k/4 with |k| < span/2: exact in f16, their products and sums exact in f32 (and, with span 8, in f16),
// so every result is exact whatever order the tensor cores add in.
static std::vector<half> halves(size_t n, std::vector<float> &f, int span = 64) {
    std::vector<half> h(n);
    f.resize(n);
    for (size_t i = 0; i < n; i++) { f[i] = small(span) / 4.0f; h[i] = __float2half(f[i]); }
    return h;
}

int main() {
    // GEMM with wmma m16n16k16, alpha/beta applied to the fragments
    std::vector<float> fa, fb, fc(M * N);
    std::vector<half> ha = halves(M * K, fa), hb = halves(K * N, fb);      // hb: column-major (n * K + k)
    for (auto &x : fc) x = small(100) / 2.0f;
    half *da = upload(ha), *db = upload(hb);
    float *dc = upload(fc), *dd;
    CHECK(cudaMalloc(&dd, M * N * sizeof(float)));
    const float alpha = 0.5f, beta = -2.0f;
    gemm<<<(M / 16) * (N / 16) / 4, 128>>>(da, db, dc, dd, alpha, beta);
    CHECK(cudaGetLastError());
    std::vector<float> got = download(dd, M * N);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0;
            for (int k = 0; k < K; k++) s += fa[i * K + k] * fb[j * K + k];
            bad += got[i * N + j] != alpha * s + beta * fc[i * N + j];
        }
    EXPECT(bad == 0);

    // m32n8k16 / m8n32k16 with f16 accumulators
    for (int shape = 0; shape < 2; shape++) {
        int m = shape ? 8 : 32, n = shape ? 32 : 8;
        std::vector<float> xa, xb, xc;
        std::vector<half> ya = halves(m * 16, xa, 8), yb = halves(16 * n, xb, 8), yc = halves(m * n, xc, 8);
        half *pa = upload(ya), *pb = upload(yb), *pc = upload(yc);
        if (shape) wide<<<1, 32>>>(pa, pb, pc);
        else tall<<<1, 32>>>(pa, pb, pc);
        CHECK(cudaGetLastError());
        std::vector<half> r = download(pc, m * n);
        bad = 0;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                // tall: A col-major (k * 32 + i), B row-major (k * 8 + j), C col-major (j * 32 + i), C doubled
                // wide: A row-major (i * 16 + k), B col-major (j * 16 + k), C row-major (i * 32 + j)
                float s = shape ? xc[i * 32 + j] : 2 * xc[j * 32 + i];
                for (int k = 0; k < 16; k++)
                    s += shape ? xa[i * 16 + k] * xb[j * 16 + k] : xa[k * 32 + i] * xb[k * 8 + j];
                float g = __half2float(shape ? r[i * 32 + j] : r[j * 32 + i]);
                bad += g != s;
            }
        EXPECT(bad == 0);
        CHECK(cudaFree(pa)); CHECK(cudaFree(pb)); CHECK(cudaFree(pc));
    }

    // s8 x s8 and u8 x u8 -> s32, wrapping and .satfinite
    for (int sat = 0; sat < 4; sat++) {
        bool u8 = sat >= 2;
        std::vector<signed char> ia(256), ib(256);
        for (int i = 0; i < 256; i++) { ia[i] = (signed char)small(256); ib[i] = (signed char)small(256); }
        std::vector<int> ic(256);
        for (int i = 0; i < 256; i++) ic[i] = i % 3 == 0 ? 2147483000 - i : i % 3 == 1 ? -2147483000 + i : small(1000);
        signed char *pa = upload(ia), *pb = upload(ib);
        int *pc = upload(ic);
        if (u8) ints<unsigned char><<<1, 32>>>((unsigned char *)pa, (unsigned char *)pb, pc, sat & 1);
        else ints<signed char><<<1, 32>>>(pa, pb, pc, sat & 1);
        CHECK(cudaGetLastError());
        std::vector<int> r = download(pc, 256);
        bad = 0;
        int clamped = 0;
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                long long s = ic[i * 16 + j];
                for (int k = 0; k < 16; k++)
                    s += u8 ? (long long)(unsigned char)ia[i * 16 + k] * (unsigned char)ib[k * 16 + j]
                            : (long long)ia[i * 16 + k] * ib[k * 16 + j];
                long long want = (sat & 1) ? (s > 2147483647LL ? 2147483647LL : s < -2147483648LL ? -2147483648LL : s)
                                           : (long long)(int)(unsigned)(s & 0xffffffffLL);
                clamped += want != s;
                bad += r[i * 16 + j] != (int)want;
            }
        EXPECT(bad == 0);
        EXPECT(clamped > 0);           // some sums leave the int range: wrapped, or clamped by .satfinite
        CHECK(cudaFree(pa)); CHECK(cudaFree(pb)); CHECK(cudaFree(pc));
    }

    // mma.sync m16n8k8 f16 -> f32
    {
        std::vector<float> xa, xb, xc(128);
        std::vector<half> ya = halves(128, xa), yb = halves(64, xb);
        for (auto &x : xc) x = small(100) / 8.0f;
        half *pa = upload(ya), *pb = upload(yb);
        float *pc = upload(xc), *pd;
        CHECK(cudaMalloc(&pd, 128 * sizeof(float)));
        mma_f16<<<1, 32>>>(pa, pb, pc, pd);
        CHECK(cudaGetLastError());
        std::vector<float> r = download(pd, 128);
        bad = 0;
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                float s = xc[i * 8 + j];
                for (int k = 0; k < 8; k++) s += xa[i * 8 + k] * xb[k * 8 + j];
                bad += r[i * 8 + j] != s;
            }
        EXPECT(bad == 0);
        CHECK(cudaFree(pa)); CHECK(cudaFree(pb)); CHECK(cudaFree(pc)); CHECK(cudaFree(pd));
    }

    // mma.sync m8n8k16 s8 -> s32
    {
        std::vector<signed char> xa(128), xb(128);
        std::vector<int> xc(64);
        for (auto &x : xa) x = (signed char)small(256);
        for (auto &x : xb) x = (signed char)small(256);
        for (auto &x : xc) x = small(100000);
        signed char *pa = upload(xa), *pb = upload(xb);
        int *pc = upload(xc), *pd;
        CHECK(cudaMalloc(&pd, 64 * sizeof(int)));
        mma_s8<<<1, 32>>>(pa, pb, pc, pd);
        CHECK(cudaGetLastError());
        std::vector<int> r = download(pd, 64);
        bad = 0;
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++) {
                int s = xc[i * 8 + j];
                for (int k = 0; k < 16; k++) s += xa[i * 16 + k] * xb[k * 8 + j];
                bad += r[i * 8 + j] != s;
            }
        EXPECT(bad == 0);
        CHECK(cudaFree(pa)); CHECK(cudaFree(pb)); CHECK(cudaFree(pc)); CHECK(cudaFree(pd));
    }

    CHECK(cudaFree(da)); CHECK(cudaFree(db)); CHECK(cudaFree(dc)); CHECK(cudaFree(dd));
    printf("PASS emu_wmma\n");
    return 0;
}
