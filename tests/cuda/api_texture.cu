// CUDA arrays, texture and surface objects through libvcudart, checked against host references: array allocation
// and queries, every copy form (2D, deprecated 1D, 3D, array to array, device memory, async), texture fetches from
// arrays and linear memory (point and linear filtering, clamp/wrap/mirror/border addressing, normalized coordinates,
// element and normalized-float reads of 8/16-bit integers, 1D/2D/3D/layered, tex1Dfetch, gather), txq, surfaces
// (read, write, boundary modes), graphs with array copies, descriptor queries and CUDA's error codes. The host
// reference implements the sampling rules of the CUDA Programming Guide on its own. Prints "OK <checks>" on success.
// With the argument "trap": a surface read outside the surface with cudaBoundaryModeTrap (a sticky fault).
#include <cuda_runtime.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

static long checks = 0;
#define OKC(cond) do { EXPECT(cond); checks++; } while (0)
#define NEAR(a, b) (fabsf((a) - (b)) <= 2e-5f * (1.0f + fabsf(b)))

// A filtered fetch against the host reference: a difference is printed (the first 40) and counted, and main fails
// at its end, so one run (on a real GPU too) shows every difference rather than the first.
static long mismatches = 0;
static void near_check(const char *what, int i, float got, float want) {
    checks++;
    if (!NEAR(got, want) && mismatches++ < 40) printf("%s i %d: got %.9g want %.9g\n", what, i, got, want);
}

// ------------------------------------------------------------------------------------------------ host reference
struct Ref {
    int w, h, d;               // texels (h = 1 / d = 1 for fewer dimensions)
    int dims;                  // 1, 2 or 3
    std::vector<float> v;      // already converted to float (normalized reads converted by the caller)
    cudaTextureAddressMode addr[3];
    bool linear, normalized;
    float border;
    float at(int i, int j, int k) const { return v[((size_t)k * h + j) * w + i]; }
};

// texel index i of dimension n under address mode m; false when outside under border addressing
static bool addr_index(int &i, int n, cudaTextureAddressMode m) {
    if (m == cudaAddressModeWrap) { i = ((i % n) + n) % n; return true; }
    if (m == cudaAddressModeMirror) { int t = ((i % (2 * n)) + 2 * n) % (2 * n); i = t < n ? t : 2 * n - 1 - t; return true; }
    bool in = i >= 0 && i < n;
    i = i < 0 ? 0 : (i >= n ? n - 1 : i);
    return m == cudaAddressModeClamp || in;
}

// A coordinate in texel units. A normalized one is held in fixed point with 21 fraction bits (toward -inf) before
// it is scaled; point filtering wraps/mirrors the coordinate, linear filtering the texel indices (real-GPU run 3).
static double coord(double x, int n, const Ref &r, cudaTextureAddressMode m) {
    if (r.normalized) {
        x = floor(ldexp(x, 21)) / 2097152.0;
        if (!r.linear && m == cudaAddressModeWrap) x = x - floor(x);
        else if (!r.linear && m == cudaAddressModeMirror) {
            double t = floor(x); double f = x - t;
            x = (((long long)t) % 2 == 0) ? f : 1.0 - f;
        }
        x *= n;
    }
    return x;
}

// p / 256 to the nearest integer, a tie up or down
static long round256(long p, bool tie_up) {
    long q = p / 256, rem = p % 256;
    return q + (rem > 128 || (rem == 128 && tie_up));
}

// A texel's weight in 1/256 units from its factors f (alpha or 1 - alpha in 1/256 units; up[k]: alpha), as the GPU
// holds it: 2D one rounding, a tie up when both factors are alpha or both 1 - alpha (the four weights sum to 1); 3D
// x with z first (a tie up when x's is alpha), then with y as in 2D (real-GPU runs 1-3: every tex_2d/tex_3d/tex_3d_fine
// result of tools/gpu_probes/diff_kernels.cu)
static long weight256(int dims, const long *f, const int *up) {
    if (dims == 1) return f[0];
    if (dims == 2) return round256(f[0] * f[1], up[0] == up[1]);
    return round256(round256(f[0] * f[2], up[0]) * f[1], up[0] == up[1]);
}

static float ref_fetch(const Ref &r, float fx, float fy = 0, float fz = 0) {
    int n[3] = {r.w, r.h, r.d};
    double c[3] = {fx, fy, fz};
    cudaTextureAddressMode m[3];
    for (int k = 0; k < 3; k++) {
        m[k] = r.addr[k];
        if (!r.normalized && (m[k] == cudaAddressModeWrap || m[k] == cudaAddressModeMirror)) m[k] = cudaAddressModeClamp;
        c[k] = coord(c[k], n[k], r, m[k]);
    }
    if (!r.linear) {
        int idx[3] = {0, 0, 0};
        bool in = true;
        for (int k = 0; k < r.dims; k++) { idx[k] = (int)floor(c[k]); in &= addr_index(idx[k], n[k], m[k]); }
        return in ? r.at(idx[0], idx[1], idx[2]) : r.border;
    }
    int base[3] = {0, 0, 0};
    long alpha[3] = {0, 0, 0};
    for (int k = 0; k < r.dims; k++) {
        // clamp addressing clamps the coordinate to [0.5, n - 0.5] (shows in 3D only: real-GPU run 3)
        double x = m[k] == cudaAddressModeClamp ? fmin(fmax(c[k], 0.5), n[k] - 0.5) : c[k];
        double xb = x - 0.5;
        base[k] = (int)floor(xb);
        alpha[k] = (long)floor((xb - floor(xb)) * 256.0 + 0.5);    // 9-bit fixed point: 8 fraction bits
    }
    double acc = 0;
    for (int corner = 0; corner < (1 << r.dims); corner++) {
        long f[3];
        int up[3], idx[3] = {0, 0, 0};
        bool in = true;
        for (int k = 0; k < r.dims; k++) {
            up[k] = (corner >> k) & 1;
            idx[k] = base[k] + up[k];
            in &= addr_index(idx[k], n[k], m[k]);
            f[k] = up[k] ? alpha[k] : 256 - alpha[k];
        }
        acc += weight256(r.dims, f, up) / 256.0 * (in ? r.at(idx[0], idx[1], idx[2]) : r.border);
    }
    return (float)acc;
}

// ------------------------------------------------------------------------------------------------ kernels
__global__ void fetch1d(cudaTextureObject_t t, const float *xs, float *out, int n) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) out[i] = tex1D<float>(t, xs[i]);
}
__global__ void fetch2d(cudaTextureObject_t t, const float *xs, const float *ys, float *out, int n) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) out[i] = tex2D<float>(t, xs[i], ys[i]);
}
__global__ void fetch2d4(cudaTextureObject_t t, const float *xs, const float *ys, float4 *out, int n) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) out[i] = tex2D<float4>(t, xs[i], ys[i]);
}
__global__ void fetch2du4(cudaTextureObject_t t, const float *xs, const float *ys, uchar4 *out, int n) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) out[i] = tex2D<uchar4>(t, xs[i], ys[i]);
}
__global__ void fetch3d(cudaTextureObject_t t, const float *xs, const float *ys, const float *zs, float *out, int n) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) out[i] = tex3D<float>(t, xs[i], ys[i], zs[i]);
}
__global__ void fetch_layered(cudaTextureObject_t t, const float *xs, const float *ys, int layer, float *out, int n) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) out[i] = tex2DLayered<float>(t, xs[i], ys[i], layer);
}
__global__ void fetch_index(cudaTextureObject_t t, int *out, int n, int offset) {
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < n) out[i] = tex1Dfetch<int>(t, i + offset);
}
__global__ void gather(cudaTextureObject_t t, float x, float y, float4 *out) {
    if (threadIdx.x == 0) out[0] = tex2Dgather<float4>(t, x, y, 1);
}
__global__ void query(cudaTextureObject_t t, cudaSurfaceObject_t s, unsigned *out) {
    unsigned w, h, sw;
    asm("txq.width.b32 %0, [%1];" : "=r"(w) : "l"(t));
    asm("txq.height.b32 %0, [%1];" : "=r"(h) : "l"(t));
    asm("suq.width.b32 %0, [%1];" : "=r"(sw) : "l"(s));
    out[0] = w; out[1] = h; out[2] = sw;
}
__global__ void surf_double(cudaSurfaceObject_t s, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) {
        int v = surf2Dread<int>(s, x * 4, y);
        surf2Dwrite<int>(2 * v + y, s, x * 4, y);
    }
}
__global__ void surf_edges(cudaSurfaceObject_t s, int *out) {
    int i = threadIdx.x;
    out[i] = surf2Dread<int>(s, (i - 4) * 4, 0, cudaBoundaryModeClamp);      // clamps x
    out[8 + i] = surf2Dread<int>(s, (i - 4) * 4, 1, cudaBoundaryModeZero);   // 0 outside
    surf2Dwrite<int>(-7, s, 1000 * 4, 0, cudaBoundaryModeZero);              // dropped
}
__global__ void surf_trap(cudaSurfaceObject_t s, int *out) { out[0] = surf2Dread<int>(s, 4000, 0); }

// ------------------------------------------------------------------------------------------------ helpers
template <typename T> static T *dev_copy(const std::vector<T> &v) {
    T *p;
    CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
    CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
template <typename T> static std::vector<T> host_copy(const T *p, size_t n) {
    std::vector<T> v(n);
    CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

static cudaTextureObject_t make_tex(cudaArray_t a, cudaTextureAddressMode m, cudaTextureFilterMode f, bool norm,
                                    cudaTextureReadMode rm = cudaReadModeElementType, float border = 0) {
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = a;
    cudaTextureDesc td = {};
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = m;
    td.filterMode = f;
    td.readMode = rm;
    td.normalizedCoords = norm;
    for (int k = 0; k < 4; k++) td.borderColor[k] = border;
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
    return t;
}

// ------------------------------------------------------------------------------------------------ tests
static void test_arrays_and_copies() {
    const int W = 37, H = 11;
    cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &f4, W, H));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned flags = 9;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, a));
    OKC(got.x == 32 && got.f == cudaChannelFormatKindFloat && ext.width == W && ext.height == H && ext.depth == 0 && flags == 0);
    std::vector<float> img(W * H), back(W * H, -1);
    for (int i = 0; i < W * H; i++) img[i] = 0.25f * i - 3;
    CHECK(cudaMemcpy2DToArray(a, 0, 0, img.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), a, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    OKC(memcmp(img.data(), back.data(), img.size() * 4) == 0);
    // a window at an offset, and the deprecated row-after-row form
    std::vector<float> win(5 * 3, 9.5f);
    CHECK(cudaMemcpy2DToArray(a, 2 * sizeof(float), 4, win.data(), 5 * sizeof(float), 5 * sizeof(float), 3, cudaMemcpyHostToDevice));
    std::vector<float> run(W + 10);
    for (size_t i = 0; i < run.size(); i++) run[i] = 1000.0f + i;
    CHECK(cudaMemcpyToArray(a, (W - 3) * sizeof(float), 8, run.data(), run.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), a, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            float e = img[y * W + x];
            if (y >= 4 && y < 7 && x >= 2 && x < 7) e = 9.5f;
            int lin = (y - 8) * W + x - (W - 3);
            if (lin >= 0 && lin < (int)run.size()) e = run[lin];
            OKC(back[y * W + x] == e);
        }
    std::vector<float> part(W + 10);
    CHECK(cudaMemcpyFromArray(part.data(), a, (W - 3) * sizeof(float), 8, part.size() * sizeof(float), cudaMemcpyDeviceToHost));
    OKC(memcmp(part.data(), run.data(), part.size() * 4) == 0);

    // device memory <-> array, array -> array, async on a stream
    float *d;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&d, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2DFromArray(d, pitch, a, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToDevice));
    cudaArray_t b;
    CHECK(cudaMallocArray(&b, &f4, W, H));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemcpy2DToArrayAsync(b, 0, 0, d, pitch, W * sizeof(float), H, cudaMemcpyDeviceToDevice, s));
    std::vector<float> viaB(W * H);
    CHECK(cudaMemcpy2DFromArrayAsync(viaB.data(), W * sizeof(float), b, 0, 0, W * sizeof(float), H, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    OKC(memcmp(viaB.data(), back.data(), viaB.size() * 4) == 0);
    CHECK(cudaMemcpy2DArrayToArray(b, 4, 1, a, 0, 0, 8, 2, cudaMemcpyDeviceToDevice));
    float two[2];
    CHECK(cudaMemcpy2DFromArray(two, 8, b, 4, 1, 8, 1, cudaMemcpyDeviceToHost));
    OKC(two[0] == back[0] && two[1] == back[1]);

    // 3D: a host volume into a 3D array and a pitched device volume back out, through cudaMemcpy3D
    const int X = 9, Y = 5, Z = 4;
    cudaArray_t vol;
    CHECK(cudaMalloc3DArray(&vol, &f4, make_cudaExtent(X, Y, Z)));
    std::vector<float> v3(X * Y * Z), w3(X * Y * Z, 0);
    for (size_t i = 0; i < v3.size(); i++) v3[i] = (float)(i * 3 % 101);
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr(v3.data(), X * sizeof(float), X, Y);
    p.dstArray = vol;
    p.extent = make_cudaExtent(X, Y, Z);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    cudaPitchedPtr dv;
    CHECK(cudaMalloc3D(&dv, make_cudaExtent(X * sizeof(float), Y, Z)));
    cudaMemcpy3DParms q = {};
    q.srcArray = vol;
    q.dstPtr = dv;
    q.extent = make_cudaExtent(X, Y, Z);
    q.kind = cudaMemcpyDeviceToDevice;
    CHECK(cudaMemcpy3D(&q));
    cudaMemcpy3DParms r = {};
    r.srcPtr = dv;
    r.dstPtr = make_cudaPitchedPtr(w3.data(), X * sizeof(float), X, Y);
    r.extent = make_cudaExtent(X * sizeof(float), Y, Z);
    r.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&r));
    OKC(memcmp(v3.data(), w3.data(), v3.size() * 4) == 0);
    // an interior box at offsets, array to host
    std::vector<float> box(3 * 2 * 2);
    cudaMemcpy3DParms bx = {};
    bx.srcArray = vol;
    bx.srcPos = make_cudaPos(2, 1, 1);
    bx.dstPtr = make_cudaPitchedPtr(box.data(), 3 * sizeof(float), 3, 2);
    bx.extent = make_cudaExtent(3, 2, 2);
    bx.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&bx));
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 2; y++)
            for (int x = 0; x < 3; x++) OKC(box[(z * 2 + y) * 3 + x] == v3[((z + 1) * Y + y + 1) * X + x + 2]);

    // errors
    cudaChannelFormatDesc three = cudaCreateChannelDesc(8, 8, 8, 0, cudaChannelFormatKindUnsigned);
    cudaArray_t bad;
    EXPECT_ERR(cudaMallocArray(&bad, &three, 4, 4), cudaErrorInvalidChannelDescriptor);
    EXPECT_ERR(cudaMallocArray(&bad, &f4, 0, 4), cudaErrorInvalidValue);
    EXPECT_ERR(cudaMemcpy2DToArray(a, W * sizeof(float) - 4, 0, img.data(), 8, 8, 1, cudaMemcpyHostToDevice),
               cudaErrorInvalidValue);                                      // past the end of a row
    EXPECT_ERR(cudaMemcpy2DToArray(a, 0, H, img.data(), 8, 8, 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT_ERR(cudaArrayGetInfo(&got, &ext, &flags, (cudaArray_t)&img), cudaErrorInvalidResourceHandle);
    cudaGetLastError();
    checks += 5;

    CHECK(cudaFreeArray(a)); CHECK(cudaFreeArray(b)); CHECK(cudaFreeArray(vol));
    CHECK(cudaFree(d)); CHECK(cudaFree(dv.ptr));
    CHECK(cudaStreamDestroy(s));
}

static void test_float_textures() {
    const int W = 13, H = 7, N = 96;
    cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &f4, W, H));
    Ref r;
    r.w = W; r.h = H; r.d = 1; r.dims = 2;
    r.v.resize(W * H);
    for (int i = 0; i < W * H; i++) r.v[i] = sinf(0.37f * i) * 10;
    CHECK(cudaMemcpy2DToArray(a, 0, 0, r.v.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice));
    std::vector<float> xs(N), ys(N);
    for (int i = 0; i < N; i++) { xs[i] = -2.3f + 0.19f * i; ys[i] = 9.1f - 0.13f * i; }
    std::vector<float> nx(N), ny(N);
    for (int i = 0; i < N; i++) { nx[i] = -0.7f + 0.029f * i; ny[i] = 1.9f - 0.041f * i; }
    float *dx = dev_copy(xs), *dy = dev_copy(ys), *dnx = dev_copy(nx), *dny = dev_copy(ny), *out;
    CHECK(cudaMalloc(&out, N * sizeof(float)));
    struct Case { cudaTextureAddressMode m; cudaTextureFilterMode f; bool norm; float border; };
    Case cases[] = {{cudaAddressModeClamp, cudaFilterModePoint, false, 0}, {cudaAddressModeClamp, cudaFilterModeLinear, false, 0},
                    {cudaAddressModeBorder, cudaFilterModePoint, false, -5.5f}, {cudaAddressModeBorder, cudaFilterModeLinear, false, 2},
                    {cudaAddressModeWrap, cudaFilterModePoint, true, 0}, {cudaAddressModeWrap, cudaFilterModeLinear, true, 0},
                    {cudaAddressModeMirror, cudaFilterModePoint, true, 0}, {cudaAddressModeMirror, cudaFilterModeLinear, true, 0},
                    {cudaAddressModeClamp, cudaFilterModeLinear, true, 0}, {cudaAddressModeWrap, cudaFilterModeLinear, false, 0}};
    for (const Case &c : cases) {
        cudaTextureObject_t t = make_tex(a, c.m, c.f, c.norm, cudaReadModeElementType, c.border);
        r.addr[0] = r.addr[1] = r.addr[2] = c.m;
        r.linear = c.f == cudaFilterModeLinear;
        r.normalized = c.norm;
        r.border = c.border;
        const float *px = c.norm ? dnx : dx, *py = c.norm ? dny : dy;
        fetch2d<<<1, N>>>(t, px, py, out, N);
        std::vector<float> got = host_copy(out, N);
        char what[64];
        snprintf(what, sizeof what, "mode %d filter %d norm %d", c.m, c.f, c.norm);
        for (int i = 0; i < N; i++)
            near_check(what, i, got[i], ref_fetch(r, c.norm ? nx[i] : xs[i], c.norm ? ny[i] : ys[i]));
        CHECK(cudaDestroyTextureObject(t));
    }
    // 1D array texture, linear filtering
    cudaArray_t a1;
    CHECK(cudaMallocArray(&a1, &f4, 20));
    Ref r1 = r;
    r1.w = 20; r1.h = 1; r1.dims = 1;
    r1.v.assign(r.v.begin(), r.v.begin() + 20);
    CHECK(cudaMemcpyToArray(a1, 0, 0, r1.v.data(), 20 * 4, cudaMemcpyHostToDevice));
    cudaTextureObject_t t1 = make_tex(a1, cudaAddressModeClamp, cudaFilterModeLinear, false);
    r1.addr[0] = cudaAddressModeClamp; r1.linear = true; r1.normalized = false;
    fetch1d<<<1, N>>>(t1, dx, out, N);
    std::vector<float> g1 = host_copy(out, N);
    for (int i = 0; i < N; i++) near_check("1D linear", i, g1[i], ref_fetch(r1, xs[i]));
    // descriptor queries
    cudaResourceDesc rd;
    cudaTextureDesc td;
    CHECK(cudaGetTextureObjectResourceDesc(&rd, t1));
    CHECK(cudaGetTextureObjectTextureDesc(&td, t1));
    OKC(rd.resType == cudaResourceTypeArray && rd.res.array.array == a1 && td.filterMode == cudaFilterModeLinear);
    CHECK(cudaDestroyTextureObject(t1));
    EXPECT_ERR(cudaGetTextureObjectTextureDesc(&td, t1), cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK(cudaFreeArray(a1));

    // 3D, trilinear; 2D layered
    const int X = 6, Y = 5, Z = 4;
    cudaArray_t v;
    CHECK(cudaMalloc3DArray(&v, &f4, make_cudaExtent(X, Y, Z)));
    Ref r3;
    r3.w = X; r3.h = Y; r3.d = Z; r3.dims = 3;
    r3.v.resize(X * Y * Z);
    for (int i = 0; i < X * Y * Z; i++) r3.v[i] = (float)((i * 7) % 23) - 4;
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr(r3.v.data(), X * 4, X, Y);
    p.dstArray = v;
    p.extent = make_cudaExtent(X, Y, Z);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    cudaTextureObject_t t3 = make_tex(v, cudaAddressModeClamp, cudaFilterModeLinear, false);
    r3.addr[0] = r3.addr[1] = r3.addr[2] = cudaAddressModeClamp; r3.linear = true; r3.normalized = false; r3.border = 0;
    std::vector<float> zs(N);
    for (int i = 0; i < N; i++) zs[i] = 0.05f * i - 0.4f;
    float *dz = dev_copy(zs);
    fetch3d<<<1, N>>>(t3, dx, dy, dz, out, N);
    std::vector<float> g3 = host_copy(out, N);
    for (int i = 0; i < N; i++) near_check("3D linear", i, g3[i], ref_fetch(r3, xs[i], ys[i], zs[i]));
    CHECK(cudaDestroyTextureObject(t3));
    cudaArray_t lay;
    CHECK(cudaMalloc3DArray(&lay, &f4, make_cudaExtent(X, Y, Z), cudaArrayLayered));
    p.dstArray = lay;
    CHECK(cudaMemcpy3D(&p));
    cudaTextureObject_t tl = make_tex(lay, cudaAddressModeClamp, cudaFilterModeLinear, false);
    for (int layer = 0; layer < Z; layer += 3) {
        Ref rl = r3;
        rl.d = 1; rl.dims = 2;
        rl.v.assign(r3.v.begin() + layer * X * Y, r3.v.begin() + (layer + 1) * X * Y);
        fetch_layered<<<1, N>>>(tl, dx, dy, layer, out, N);
        std::vector<float> gl = host_copy(out, N);
        for (int i = 0; i < N; i++) near_check(layer ? "layer 3" : "layer 0", i, gl[i], ref_fetch(rl, xs[i], ys[i]));
    }
    CHECK(cudaDestroyTextureObject(tl));

    // gather: component y of the 2x2 footprint of a float2 texture
    cudaChannelFormatDesc f2 = cudaCreateChannelDesc<float2>();
    cudaArray_t a2;
    CHECK(cudaMallocArray(&a2, &f2, 4, 4, cudaArrayTextureGather));
    std::vector<float2> v2(16);
    for (int i = 0; i < 16; i++) v2[i] = make_float2(i, 100 + i);
    CHECK(cudaMemcpy2DToArray(a2, 0, 0, v2.data(), 4 * 8, 4 * 8, 4, cudaMemcpyHostToDevice));
    cudaTextureObject_t tg = make_tex(a2, cudaAddressModeClamp, cudaFilterModePoint, false);
    float4 *g4;
    CHECK(cudaMalloc(&g4, sizeof(float4)));
    gather<<<1, 32>>>(tg, 2.2f, 1.7f, g4);     // footprint texels (1..2, 0..1)... i = floor(1.7), j = floor(1.2)
    float4 gh;
    CHECK(cudaMemcpy(&gh, g4, sizeof gh, cudaMemcpyDeviceToHost));
    int i0 = (int)floorf(2.2f - 0.5f), j0 = (int)floorf(1.7f - 0.5f);
    OKC(gh.x == 100 + (j0 + 1) * 4 + i0 && gh.y == 100 + (j0 + 1) * 4 + i0 + 1 && gh.z == 100 + j0 * 4 + i0 + 1 &&
        gh.w == 100 + j0 * 4 + i0);
    CHECK(cudaDestroyTextureObject(tg));
    CHECK(cudaFree(g4));

    CHECK(cudaFreeArray(a)); CHECK(cudaFreeArray(a2)); CHECK(cudaFreeArray(v)); CHECK(cudaFreeArray(lay));
    CHECK(cudaFree(dx)); CHECK(cudaFree(dy)); CHECK(cudaFree(dz)); CHECK(cudaFree(dnx)); CHECK(cudaFree(dny));
    CHECK(cudaFree(out));
}

static void test_integer_textures_and_linear_memory() {
    const int W = 8, H = 6, N = 64;
    cudaChannelFormatDesc u4 = cudaCreateChannelDesc<uchar4>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &u4, W, H));
    std::vector<uchar4> img(W * H);
    for (int i = 0; i < W * H; i++) img[i] = make_uchar4(i * 5, 255 - i, (i * 37) & 255, 7);
    CHECK(cudaMemcpy2DToArray(a, 0, 0, img.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice));
    std::vector<float> xs(N), ys(N);
    for (int i = 0; i < N; i++) { xs[i] = 0.3f + 0.13f * i; ys[i] = 0.2f + 0.09f * i; }
    float *dx = dev_copy(xs), *dy = dev_copy(ys);
    // element reads: the texel's bytes
    cudaTextureObject_t te = make_tex(a, cudaAddressModeClamp, cudaFilterModePoint, false);
    uchar4 *ou;
    CHECK(cudaMalloc(&ou, N * sizeof(uchar4)));
    fetch2du4<<<1, N>>>(te, dx, dy, ou, N);
    std::vector<uchar4> gu = host_copy(ou, N);
    for (int i = 0; i < N; i++) {
        int x = (int)floorf(xs[i]), y = (int)floorf(ys[i]);
        x = x < 0 ? 0 : x >= W ? W - 1 : x; y = y < 0 ? 0 : y >= H ? H - 1 : y;
        uchar4 e = img[y * W + x];
        OKC(gu[i].x == e.x && gu[i].y == e.y && gu[i].z == e.z && gu[i].w == e.w);
    }
    // normalized-float reads, linearly filtered
    cudaTextureObject_t tn = make_tex(a, cudaAddressModeClamp, cudaFilterModeLinear, false, cudaReadModeNormalizedFloat);
    float4 *of;
    CHECK(cudaMalloc(&of, N * sizeof(float4)));
    fetch2d4<<<1, N>>>(tn, dx, dy, of, N);
    std::vector<float4> gf = host_copy(of, N);
    for (int ch = 0; ch < 4; ch++) {
        Ref r;
        r.w = W; r.h = H; r.d = 1; r.dims = 2; r.linear = true; r.normalized = false; r.border = 0;
        r.addr[0] = r.addr[1] = r.addr[2] = cudaAddressModeClamp;
        for (int i = 0; i < W * H; i++) {
            unsigned char c = ch == 0 ? img[i].x : ch == 1 ? img[i].y : ch == 2 ? img[i].z : img[i].w;
            r.v.push_back(c / 255.0f);
        }
        for (int i = 0; i < N; i++) {
            float g = ch == 0 ? gf[i].x : ch == 1 ? gf[i].y : ch == 2 ? gf[i].z : gf[i].w;
            near_check(ch == 0 ? "unorm8 x" : ch == 1 ? "unorm8 y" : ch == 2 ? "unorm8 z" : "unorm8 w", i, g,
                       ref_fetch(r, xs[i], ys[i]));
        }
    }
    // linear filtering of an element-type integer texture is refused, as NVIDIA's runtime refuses it (by itself)
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = a;
    cudaTextureDesc td = {};
    td.filterMode = cudaFilterModeLinear;
    cudaTextureObject_t bad;
    EXPECT_ERR(cudaCreateTextureObject(&bad, &rd, &td, nullptr), cudaErrorInvalidFilterSetting);
    cudaGetLastError();
    checks++;

    // tex1Dfetch over linear memory: by index, 0 outside
    std::vector<int> lin(300);
    for (int i = 0; i < 300; i++) lin[i] = i * i - 7;
    int *dl = dev_copy(lin), *oi;
    CHECK(cudaMalloc(&oi, N * sizeof(int)));
    cudaResourceDesc lr = {};
    lr.resType = cudaResourceTypeLinear;
    lr.res.linear.devPtr = dl;
    lr.res.linear.desc = cudaCreateChannelDesc<int>();
    lr.res.linear.sizeInBytes = 300 * sizeof(int);
    cudaTextureDesc ltd = {};
    ltd.readMode = cudaReadModeElementType;
    cudaTextureObject_t tl;
    CHECK(cudaCreateTextureObject(&tl, &lr, &ltd, nullptr));
    fetch_index<<<1, N>>>(tl, oi, N, 260);
    std::vector<int> gi = host_copy(oi, N);
    for (int i = 0; i < N; i++) OKC(gi[i] == (i + 260 < 300 ? lin[i + 260] : 0));
    // a pitched 2D texture over cudaMallocPitch memory
    float *pm;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&pm, &pitch, 10 * sizeof(float), 5));
    std::vector<float> pv(50);
    for (int i = 0; i < 50; i++) pv[i] = 0.5f * i;
    CHECK(cudaMemcpy2D(pm, pitch, pv.data(), 40, 40, 5, cudaMemcpyHostToDevice));
    cudaResourceDesc pr = {};
    pr.resType = cudaResourceTypePitch2D;
    pr.res.pitch2D.devPtr = pm;
    pr.res.pitch2D.desc = cudaCreateChannelDesc<float>();
    pr.res.pitch2D.width = 10;
    pr.res.pitch2D.height = 5;
    pr.res.pitch2D.pitchInBytes = pitch;
    cudaTextureDesc ptd = {};
    ptd.filterMode = cudaFilterModeLinear;
    ptd.addressMode[0] = ptd.addressMode[1] = cudaAddressModeClamp;
    cudaTextureObject_t tp;
    CHECK(cudaCreateTextureObject(&tp, &pr, &ptd, nullptr));
    float *o2;
    CHECK(cudaMalloc(&o2, N * sizeof(float)));
    fetch2d<<<1, N>>>(tp, dx, dy, o2, N);
    std::vector<float> gp = host_copy(o2, N);
    Ref rp;
    rp.w = 10; rp.h = 5; rp.d = 1; rp.dims = 2; rp.v = pv; rp.linear = true; rp.normalized = false; rp.border = 0;
    rp.addr[0] = rp.addr[1] = rp.addr[2] = cudaAddressModeClamp;
    for (int i = 0; i < N; i++) near_check("pitched linear", i, gp[i], ref_fetch(rp, xs[i], ys[i]));

    CHECK(cudaDestroyTextureObject(te)); CHECK(cudaDestroyTextureObject(tn)); CHECK(cudaDestroyTextureObject(tl));
    CHECK(cudaDestroyTextureObject(tp));
    CHECK(cudaFreeArray(a)); CHECK(cudaFree(dl)); CHECK(cudaFree(oi)); CHECK(cudaFree(pm)); CHECK(cudaFree(o2));
    CHECK(cudaFree(ou)); CHECK(cudaFree(of)); CHECK(cudaFree(dx)); CHECK(cudaFree(dy));
}

static void test_surfaces_and_graphs(bool trap) {
    const int W = 16, H = 4;
    cudaChannelFormatDesc i1 = cudaCreateChannelDesc<int>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &i1, W, H, cudaArraySurfaceLoadStore));
    std::vector<int> img(W * H);
    for (int i = 0; i < W * H; i++) img[i] = i * 3 - 20;
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = a;
    cudaSurfaceObject_t s;
    CHECK(cudaCreateSurfaceObject(&s, &rd));
    cudaTextureObject_t t = make_tex(a, cudaAddressModeClamp, cudaFilterModePoint, false);
    int *o;
    CHECK(cudaMalloc(&o, 64 * sizeof(int)));
    if (trap) {
        surf_trap<<<1, 1>>>(s, o);
        cudaError_t e = cudaDeviceSynchronize();
        printf("trap %s\n", cudaGetErrorName(e));
        return;
    }
    // a graph: upload through a memcpy node, double in place through the surface, read back through the texture
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    std::vector<int> back(W * H);
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemcpy2DToArrayAsync(a, 0, 0, img.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice, st));
    surf_double<<<H, W, 0, st>>>(s, W, H);
    CHECK(cudaMemcpy2DFromArrayAsync(back.data(), W * 4, a, 0, 0, W * 4, H, cudaMemcpyDeviceToHost, st));
    CHECK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    CHECK(cudaGraphLaunch(x, st));
    CHECK(cudaStreamSynchronize(st));
    for (int y = 0; y < H; y++)
        for (int i = 0; i < W; i++) OKC(back[y * W + i] == 2 * img[y * W + i] + y);
    CHECK(cudaGraphLaunch(x, st));                    // the upload resets the array each time
    CHECK(cudaStreamSynchronize(st));
    for (int i = 0; i < W * H; i++) OKC(back[i] == 2 * img[i] + i / W);
    // boundary modes
    surf_edges<<<1, 8>>>(s, o);
    std::vector<int> edge = host_copy(o, 16);
    for (int i = 0; i < 8; i++) {
        int cx = i - 4 < 0 ? 0 : i - 4;
        OKC(edge[i] == back[cx]);
        OKC(edge[8 + i] == (i - 4 < 0 ? 0 : back[W + i - 4]));
    }
    unsigned *q;
    CHECK(cudaMalloc(&q, 3 * sizeof(unsigned)));
    query<<<1, 1>>>(t, s, q);
    std::vector<unsigned> qh = host_copy(q, 3);
    OKC(qh[0] == W && qh[1] == H && qh[2] == W);
    cudaResourceDesc got;
    CHECK(cudaGetSurfaceObjectResourceDesc(&got, s));
    OKC(got.res.array.array == a);
    // a surface needs cudaArraySurfaceLoadStore
    cudaArray_t plain;
    CHECK(cudaMallocArray(&plain, &i1, 4, 4));
    rd.res.array.array = plain;
    cudaSurfaceObject_t bad;
    EXPECT_ERR(cudaCreateSurfaceObject(&bad, &rd), cudaErrorInvalidValue);
    EXPECT_ERR(cudaDestroySurfaceObject(12345), cudaErrorInvalidValue);
    cudaGetLastError();
    checks += 2;
    CHECK(cudaGraphExecDestroy(x)); CHECK(cudaGraphDestroy(g)); CHECK(cudaStreamDestroy(st));
    CHECK(cudaDestroySurfaceObject(s)); CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFreeArray(a)); CHECK(cudaFreeArray(plain)); CHECK(cudaFree(o)); CHECK(cudaFree(q));
}

int main(int argc, char **argv) {
    bool trap = argc > 1 && !strcmp(argv[1], "trap");
    if (!trap) {
        test_arrays_and_copies();
        test_float_textures();
        test_integer_textures_and_linear_memory();
    }
    test_surfaces_and_graphs(trap);
    EXPECT(mismatches == 0);
    if (!trap) printf("OK %ld\n", checks);
    return 0;
}
