// Kernels whose results the real-GPU check compares bit for bit between the emulated GPU and a real one
// (tools/gpu_probes/gpu_diff_kernels.py builds and runs this through pyvgpu against each daemon).
//   diff_kernels OUTFILE    writes every group's raw results to OUTFILE, one line "group NAME BYTES" per group to
//                           stdout in the same order; exit 1 on any CUDA error
// Inputs are the same on every run: xorshift bit patterns mixed with special values (zeros, denormals, infinities,
// NaNs with payloads, extremes); they are written first, as the groups input_f32_{a,b,c} and input_f64_{a,b,c}, so
// the comparison can compute reference values. Add a group: a kernel writing `per` results per input, one run_group
// line, and its slots in isa_bounds.py (bit for bit unless a slot names the ISA's error bound).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static const int N = 1 << 14;   // inputs per group

__global__ void f32_arith(const float *a, const float *b, const float *c, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i], y = b[i], z = c[i];
    float *r = o + 8 * i;
    r[0] = __fadd_rn(x, y); r[1] = __fmul_rn(x, y); r[2] = fmaf(x, y, z); r[3] = x / y;
    r[4] = sqrtf(x); r[5] = 1.0f / x; r[6] = fminf(x, y); r[7] = fmaxf(x, y);
}

__global__ void f32_approx(const float *a, const float *b, const float *c, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i];
    float *r = o + 6 * i;
    r[0] = __sinf(x); r[1] = __cosf(x); r[2] = __expf(x); r[3] = __logf(x); r[4] = rsqrtf(x); r[5] = __fdividef(x, b[i]);
}

__global__ void f32_libm(const float *a, const float *b, const float *c, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i], y = b[i];
    float *r = o + 6 * i;
    r[0] = sinf(x); r[1] = expf(x); r[2] = logf(x); r[3] = powf(x, y); r[4] = tanhf(x); r[5] = erff(x);
}

__global__ void f32_convert(const float *a, const float *b, const float *c, uint32_t *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i];
    uint32_t *r = o + 7 * i;
    r[0] = (uint32_t)__float2int_rn(x); r[1] = (uint32_t)__float2int_rz(x); r[2] = (uint32_t)__float2int_rd(x);
    r[3] = (uint32_t)__float2int_ru(x); r[4] = __float2uint_rz(x);
    r[5] = __half_as_ushort(__float2half_rn(x));
    r[6] = __float_as_uint(__int2float_rn((int)__float_as_uint(b[i])));
}

__global__ void f64_arith(const double *a, const double *b, const double *c, double *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double x = a[i], y = b[i], z = c[i];
    double *r = o + 6 * i;
    r[0] = __dadd_rn(x, y); r[1] = __dmul_rn(x, y); r[2] = fma(x, y, z); r[3] = x / y; r[4] = sqrt(x);
    r[5] = (double)(float)x;
}

// The signs and NaNs of f32 negation, absolute value, subtraction and copysign (the ISA leaves a NaN's unspecified).
__global__ void f32_signs(const float *a, const float *b, const float *c, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i], y = b[i];
    float *r = o + 4 * i;
    r[0] = -x; r[1] = fabsf(x); r[2] = __fsub_rn(x, y); r[3] = copysignf(x, y);
}

// The approximate instructions in their .ftz forms and those CUDA's intrinsics do not reach (inline PTX).
__global__ void f32_approx_ftz(const float *a, const float *b, const float *c, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i], y = b[i];
    float *r = o + 11 * i;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r[0]) : "f"(x));
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r[1]) : "f"(x));
    asm("sin.approx.ftz.f32 %0, %1;" : "=f"(r[2]) : "f"(x));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r[3]) : "f"(x));
    asm("rcp.approx.f32 %0, %1;" : "=f"(r[4]) : "f"(x));
    asm("sqrt.approx.f32 %0, %1;" : "=f"(r[5]) : "f"(x));
    asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r[6]) : "f"(x));
    asm("tanh.approx.f32 %0, %1;" : "=f"(r[7]) : "f"(x));
    asm("div.full.f32 %0, %1, %2;" : "=f"(r[8]) : "f"(x), "f"(y));
    asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(r[9]) : "f"(x), "f"(y));
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r[10]) : "f"(x));
}

// f64 signs, NaN operand order, min/max of NaNs and conversions of NaN and out-of-range values to integers, as bits.
__global__ void f64_more(const double *a, const double *b, const double *c, uint64_t *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double x = a[i], y = b[i], z = c[i];
    uint64_t *r = o + 10 * i;
    r[0] = __double_as_longlong(-x); r[1] = __double_as_longlong(fabs(x));
    r[2] = __double_as_longlong(__dsub_rn(x, y)); r[3] = __double_as_longlong(fmin(x, y));
    r[4] = __double_as_longlong(fmax(x, y)); r[5] = __double_as_longlong(__fma_rn(z, y, x));
    r[6] = (uint64_t)__double2ll_rz(x); r[7] = (uint32_t)__double2int_rz(x);
    r[8] = (uint64_t)__float2ll_rz((float)x); r[9] = (uint32_t)__double2uint_rz(x);
}

// The gross f64 approximations of the ISA (upper word only) and rsqrt.approx.f64.
__global__ void f64_approx(const double *a, const double *b, const double *c, double *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double x = a[i];
    double *r = o + 3 * i;
    asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r[0]) : "d"(x));
    asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(r[1]) : "d"(x));
    asm("rsqrt.approx.f64 %0, %1;" : "=d"(r[2]) : "d"(x));
}

__global__ void int_ops(const uint32_t *a, const uint32_t *b, const uint32_t *c, uint32_t *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t x = a[i], y = b[i], z = c[i];
    uint32_t *r = o + 8 * i;
    r[0] = __umulhi(x, y); r[1] = (uint32_t)__mulhi((int)x, (int)y); r[2] = __popc(x); r[3] = __clz(x);
    r[4] = __brev(x); r[5] = __funnelshift_l(x, y, z); r[6] = __byte_perm(x, y, z);
    r[7] = (uint32_t)__dp4a((int)x, (int)y, (int)z);
}

__global__ void warp_ops(const uint32_t *a, const uint32_t *b, const uint32_t *c, uint32_t *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;              // n is a multiple of 32: whole warps
    uint32_t x = a[i];
    uint32_t *r = o + 4 * i;
    r[0] = __shfl_xor_sync(0xffffffffu, x, 5);
    r[1] = __shfl_up_sync(0xffffffffu, x, 3);
    r[2] = __ballot_sync(0xffffffffu, x & 1u);
    r[3] = __match_any_sync(0xffffffffu, x & 3u);
}

// Linear filtering weights: a float texture holding a single 1.0 (at texel 3 of each dimension, zeros elsewhere)
// sampled on a grid over [2.5, 4.5) per dimension, so every result is one texel weight exactly: the fixed-point
// alpha of each dimension (1D: steps of 1/1024 reach the rounding ties) and, in 2D and 3D, how the per-texel
// products are held. Result i of tex_1d is x = 2.5 + i/1024; of tex_2d x = 2.5 + (i % 512)/256,
// y = 2.5 + (i / 512)/256; of tex_3d x, y, z = 2.5 + (i % 32, i / 32 % 32, i / 1024)/16; of tex_3d_fine (dims 4)
// x, y, z = 2.5 + u/256 with u in [0, 512) from a hash of i: alphas in 1/256 steps, where rounding a texel's product
// of three factors once and forming the weights by inclusion-exclusion of rounded pairwise products differ.
__device__ __host__ unsigned mix32(unsigned x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

__global__ void tex_sample(cudaTextureObject_t t, int dims, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (dims == 1) o[i] = tex1D<float>(t, 2.5f + (i % 2048) / 1024.0f);
    else if (dims == 2) o[i] = tex2D<float>(t, 2.5f + (i % 512) / 256.0f, 2.5f + (i / 512) / 256.0f);
    else if (dims == 3)
        o[i] = tex3D<float>(t, 2.5f + (i % 32) / 16.0f, 2.5f + (i / 32 % 32) / 16.0f, 2.5f + (i / 1024) / 16.0f);
    else {
        unsigned h = mix32((unsigned)i);
        o[i] = tex3D<float>(t, 2.5f + (h & 511) / 256.0f, 2.5f + (h >> 9 & 511) / 256.0f,
                            2.5f + (h >> 18 & 511) / 256.0f);
    }
}

// Coordinates anywhere (tex_2d_coords): a 13 x 7 float texture of small integers sampled, linearly filtered, at
// coordinates from a hash of i in [lo, lo + span), unnormalized (clamp, border) and normalized (wrap, mirror). Every
// weighted sum is exact in float32, so any difference is in which texels and which 1/256 weights the GPU takes:
// its conversion of a coordinate to fixed point, x - 0.5 and frac, and the normalized scaling and wrapping.
__global__ void tex_coords(cudaTextureObject_t t, float lo, float span, float *o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    // explicit roundings (no contraction to fma): a host model computes the same coordinates
    float x = __fadd_rn(lo, __fmul_rn(span, (mix32(2u * i + 1u) >> 8) * (1.0f / 16777216.0f)));
    float y = __fadd_rn(lo, __fmul_rn(span, (mix32(2u * i + 2u) >> 8) * (1.0f / 16777216.0f)));
    o[i] = tex2D<float>(t, x, y);
}

static void run_texture_group(FILE *out, const char *name, int kind, int n) {
    const int side = 8, dims = kind > 3 ? 3 : kind;
    cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
    cudaExtent ext = make_cudaExtent(side, dims > 1 ? side : 0, dims > 2 ? side : 0);
    cudaArray_t a;
    CK(cudaMalloc3DArray(&a, &f, ext));
    std::vector<float> texels((size_t)side * (dims > 1 ? side : 1) * (dims > 2 ? side : 1), 0.0f);
    texels[dims == 1 ? 3 : dims == 2 ? 3 * side + 3 : (3 * side + 3) * side + 3] = 1.0f;
    cudaMemcpy3DParms cp = {};
    cp.srcPtr = make_cudaPitchedPtr(texels.data(), side * sizeof(float), side, dims > 1 ? side : 1);
    cp.dstArray = a;
    cp.extent = make_cudaExtent(side, dims > 1 ? side : 1, dims > 2 ? side : 1);
    cp.kind = cudaMemcpyHostToDevice;
    CK(cudaMemcpy3D(&cp));
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = a;
    cudaTextureDesc td = {};
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModeLinear;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t t;
    CK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
    float *d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    tex_sample<<<(n + 255) / 256, 256>>>(t, kind, d, n);
    CK(cudaGetLastError());
    std::vector<float> host(n);
    CK(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (fwrite(host.data(), 1, n * sizeof(float), out) != n * sizeof(float)) { perror("write"); exit(1); }
    printf("group %s %zu\n", name, n * sizeof(float));
    CK(cudaDestroyTextureObject(t)); CK(cudaFree(d)); CK(cudaFreeArray(a));
}

static void run_texture_coords(FILE *out, const char *name) {
    const int W = 13, H = 7, n = 4096;
    struct Mode { cudaTextureAddressMode m; bool norm; float lo, span; };
    const Mode modes[] = {{cudaAddressModeClamp, false, -2.0f, 17.0f}, {cudaAddressModeBorder, false, -2.0f, 17.0f},
                          {cudaAddressModeWrap, true, -1.5f, 4.0f}, {cudaAddressModeMirror, true, -1.5f, 4.0f}};
    cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CK(cudaMallocArray(&a, &f, W, H));
    std::vector<float> texels(W * H);
    for (int i = 0; i < W * H; i++) texels[i] = (float)((i * 7) % 23 - 11);
    CK(cudaMemcpy2DToArray(a, 0, 0, texels.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = a;
    float *d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    std::vector<float> host(n);
    for (const Mode &m : modes) {
        cudaTextureDesc td = {};
        td.addressMode[0] = td.addressMode[1] = m.m;
        td.filterMode = cudaFilterModeLinear;
        td.readMode = cudaReadModeElementType;
        td.normalizedCoords = m.norm;
        cudaTextureObject_t t;
        CK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
        tex_coords<<<n / 256, 256>>>(t, m.lo, m.span, d, n);
        CK(cudaGetLastError());
        CK(cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
        if (fwrite(host.data(), 1, n * sizeof(float), out) != n * sizeof(float)) { perror("write"); exit(1); }
        CK(cudaDestroyTextureObject(t));
    }
    printf("group %s %zu\n", name, sizeof(modes) / sizeof(modes[0]) * n * sizeof(float));
    CK(cudaFree(d)); CK(cudaFreeArray(a));
}

template <typename TI, typename TO>
static void run_group(FILE *out, const char *name, void (*kernel)(const TI *, const TI *, const TI *, TO *, int),
                      int per, const std::vector<TI> &a, const std::vector<TI> &b, const std::vector<TI> &c) {
    size_t in_bytes = N * sizeof(TI), out_bytes = (size_t)N * per * sizeof(TO);
    TI *da, *db, *dc;
    TO *dout;
    CK(cudaMalloc(&da, in_bytes)); CK(cudaMalloc(&db, in_bytes)); CK(cudaMalloc(&dc, in_bytes));
    CK(cudaMalloc(&dout, out_bytes));
    CK(cudaMemcpy(da, a.data(), in_bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), in_bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dc, c.data(), in_bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xA5, out_bytes));    // poison: an unwritten result shows
    kernel<<<(N + 255) / 256, 256>>>(da, db, dc, dout, N);
    CK(cudaGetLastError());
    std::vector<TO> host((size_t)N * per);
    CK(cudaMemcpy(host.data(), dout, out_bytes, cudaMemcpyDeviceToHost));
    if (fwrite(host.data(), 1, out_bytes, out) != out_bytes) { perror("write"); exit(1); }
    printf("group %s %zu\n", name, out_bytes);
    CK(cudaFree(da)); CK(cudaFree(db)); CK(cudaFree(dc)); CK(cudaFree(dout));
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_bits() {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}

// Every 8th input a special value, the rest random bit patterns (every exponent) or ordinary numbers.
static std::vector<uint32_t> bits32(int salt) {
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u,
                                       0xff800000u, 0x7fc00000u, 0x7fa00001u, 0xffc12345u, 0x7f7fffffu,
                                       0x3f800000u, 0xbf800000u, 0x4b000000u, 0x3effffffu, 0x4f000000u,
                                       0xcf000001u};
    std::vector<uint32_t> v(N);
    for (int i = 0; i < N; i++) {
        uint64_t r = next_bits() + salt;
        v[i] = (i % 8 == 0) ? special[(i / 8 + salt) % 16] : (i % 8 < 5) ? (uint32_t)r
             : (0x3c000000u + (uint32_t)(r % 0x0c000000u)) ^ ((uint32_t)(r >> 40) & 0x80000000u);
    }
    return v;
}

static std::vector<uint64_t> bits64(int salt) {
    static const uint64_t special[] = {0ull, 0x8000000000000000ull, 1ull, 0x7ff0000000000000ull,
                                       0xfff0000000000000ull, 0x7ff8000000000000ull, 0x7ff0000000000001ull,
                                       0x3ff0000000000000ull};
    std::vector<uint64_t> v(N);
    for (int i = 0; i < N; i++) {
        uint64_t r = next_bits() + salt;
        v[i] = (i % 8 == 0) ? special[(i / 8 + salt) % 8] : (i % 8 < 5) ? r
             : (0x3f00000000000000ull + r % 0x0180000000000000ull) ^ ((r >> 3) & 0x8000000000000000ull);
    }
    return v;
}

template <typename T>
static void write_input(FILE *out, const char *name, const std::vector<T> &v) {
    size_t bytes = v.size() * sizeof(T);
    if (fwrite(v.data(), 1, bytes, out) != bytes) { perror("write"); exit(1); }
    printf("group %s %zu\n", name, bytes);
}

template <typename T, typename B>
static std::vector<T> as(const std::vector<B> &bits) {
    std::vector<T> v(bits.size());
    memcpy(v.data(), bits.data(), bits.size() * sizeof(B));
    return v;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTFILE\n", argv[0]);
        return 2;
    }
    FILE *out = fopen(argv[1], "wb");
    if (!out) { perror(argv[1]); return 1; }
    std::vector<uint32_t> a = bits32(0), b = bits32(5), c = bits32(11);
    std::vector<uint64_t> a64 = bits64(0), b64 = bits64(3), c64 = bits64(6);
    std::vector<float> fa = as<float>(a), fb = as<float>(b), fc = as<float>(c);
    std::vector<double> da = as<double>(a64), db = as<double>(b64), dc = as<double>(c64);
    write_input(out, "input_f32_a", a); write_input(out, "input_f32_b", b); write_input(out, "input_f32_c", c);
    write_input(out, "input_f64_a", a64); write_input(out, "input_f64_b", b64); write_input(out, "input_f64_c", c64);
    run_group(out, "f32_arith", f32_arith, 8, fa, fb, fc);
    run_group(out, "f32_convert", f32_convert, 7, fa, fb, fc);
    run_group(out, "f32_libm", f32_libm, 6, fa, fb, fc);
    run_group(out, "f32_approx", f32_approx, 6, fa, fb, fc);
    run_group(out, "f64_arith", f64_arith, 6, da, db, dc);
    run_group(out, "int_ops", int_ops, 8, a, b, c);
    run_group(out, "warp_ops", warp_ops, 4, a, b, c);
    run_group(out, "f32_signs", f32_signs, 4, fa, fb, fc);
    run_group(out, "f32_approx_ftz", f32_approx_ftz, 11, fa, fb, fc);
    run_group(out, "f64_more", f64_more, 10, da, db, dc);
    run_group(out, "f64_approx", f64_approx, 3, da, db, dc);
    run_texture_group(out, "tex_1d", 1, 2048);
    run_texture_group(out, "tex_2d", 2, 512 * 512);
    run_texture_group(out, "tex_3d", 3, 32 * 32 * 32);
    run_texture_group(out, "tex_3d_fine", 4, 1 << 14);
    run_texture_coords(out, "tex_2d_coords");
    fclose(out);
    return 0;
}
