// The SIMD and scalar video instructions (PTX ISA "Video Instructions"): CUDA's SIMD intrinsics that lower to
// them (__vabsdiffu4, __vsadu4) and the others through inline PTX, with operand selectors, .sat, secondary
// operations, merges and masks, on random registers; checked against a host model written from the ISA's
// pseudo-code, corrected where a real GPU (H100, ptxas for sm_90) does otherwise: a .h1 merge keeps the result's
// bits 16-31, vset's secondary operation takes c signed by .atype, vmad is 64-bit signed arithmetic (IMAD.WIDE),
// scalar .sat and .min/.max are ptxas's (sat_gpu, scalar).
// Prints "PASS emu_video".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

static const int N = 4096, R = 24;   // inputs, results per input

__global__ void video(const uint32_t *A, const uint32_t *B, const uint32_t *C, uint32_t *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t a = A[i], b = B[i], c = C[i], d;
    uint32_t *o = out + (size_t)i * R;
    o[0] = __vabsdiffu4(a, b);
    o[1] = __vsadu4(a, b);
#define V(k, text, ...) asm(text : "=r"(d) : __VA_ARGS__); o[k] = d;
    V(2, "vadd4.s32.s32.s32.sat %0, %1, %2, %3;", "r"(a), "r"(b), "r"(c))
    V(3, "vsub2.u32.u32.u32.sat %0, %1, %2, %3;", "r"(a), "r"(b), "r"(c))
    V(4, "vavrg4.u32.u32.u32 %0.b31, %1.b3210, %2.b7654, %3;", "r"(a), "r"(b), "r"(c))
    V(5, "vavrg2.s32.s32.s32 %0, %1, %2, %3;", "r"(a), "r"(b), "r"(c))
    V(6, "vmin2.s32.s32.u32.add %0.h1, %1.h00, %2.h23, %3;", "r"(a), "r"(b), "r"(c))
    V(7, "vmax4.u32.s32.u32 %0.b20, %1.b0123, %2.b5577, %3;", "r"(a), "r"(b), "r"(c))
    V(8, "vset4.u32.u32.lt %0, %1, %2, %3;", "r"(a), "r"(b), "r"(c))
    V(9, "vset2.s32.s32.ge.add %0, %1, %2, %3;", "r"(a), "r"(b), "r"(c))
    V(10, "vabsdiff2.s32.s32.s32.sat %0, %1.h31, %2.h20, %3;", "r"(a), "r"(b), "r"(c))
    V(11, "vsub4.s32.u32.s32.add %0.b10, %1, %2, %3;", "r"(a), "r"(b), "r"(c))
    V(12, "vadd.s32.s32.u32.sat %0, %1.b0, %2.h1;", "r"(a), "r"(b))
    V(13, "vsub.s32.s32.s32.sat.min %0, %1, %2, %3;", "r"(a), "r"(b), "r"(c))
    V(14, "vabsdiff.u32.u32.u32 %0.h1, %1.h0, %2.b3, %3;", "r"(a), "r"(b), "r"(c))
    V(15, "vmin.s32.u32.s32.add %0, %1.b2, %2, %3;", "r"(a), "r"(b), "r"(c))
    V(16, "vmax.u32.s32.s32.sat %0.b2, %1.h1, %2.b1, %3;", "r"(a), "r"(b), "r"(c))
    V(17, "vshl.u32.u32.u32.clamp.add %0, %1.b1, %2.b0, %3;", "r"(a), "r"(b), "r"(c))
    V(18, "vshr.s32.s32.u32.wrap %0, %1, %2;", "r"(a), "r"(b))
    V(19, "vmad.s32.s32.u32.sat %0, -%1.h0, %2.h1, %3;", "r"(a), "r"(b), "r"(c))
    V(20, "vmad.u32.u32.u32.shr15 %0, %1, %2, %3;", "r"(a), "r"(b), "r"(c))
    V(21, "vmad.s32.u32.u32.po %0, %1.b3, %2.h0, %3;", "r"(a), "r"(b), "r"(c))
    V(22, "vset.s32.u32.lt.max %0, %1, %2.b1, %3;", "r"(a), "r"(b), "r"(c))
    V(23, "vshl.s32.s32.u32.sat.wrap %0.h0, %1.b3, %2, %3;", "r"(a), "r"(b), "r"(c))
#undef V
}

// ------------------------------------------------------------------------------------------------ host model
static int64_t sx(uint64_t v, int bits, bool sign) {
    v &= (bits == 64) ? ~0ull : ((1ull << bits) - 1);
    if (sign && bits < 64 && (v >> (bits - 1)) & 1) return (int64_t)v - (int64_t)(1ull << bits);
    return (int64_t)v;
}
// partSelectSignExtend: sel "" word, "b0".."b3", "h0"/"h1"
static int64_t part(uint32_t x, bool sign, const char *sel) {
    if (!sel[0]) return sx(x, 32, sign);
    int k = sel[1] - '0';
    return sel[0] == 'b' ? sx(x >> (8 * k), 8, sign) : sx(x >> (16 * k), 16, sign);
}
static int64_t clampv(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }
static int64_t sat_to(int64_t v, int bits, bool sign) {
    return sign ? clampv(v, -(1ll << (bits - 1)), (1ll << (bits - 1)) - 1) : clampv(v, 0, (1ll << bits) - 1);
}
static uint32_t merge(const char *dsel, int64_t t, uint32_t c) {
    if (!dsel[0]) return (uint32_t)t;
    int k = dsel[1] - '0', bits = dsel[0] == 'b' ? 8 : 16;
    uint32_t field = (uint32_t)(((1ull << bits) - 1) << (bits * k));
    int shift = dsel[0] == 'h' && k == 1 ? 0 : bits * k;   // the GPU merges .h1 unshifted
    return (uint32_t)(((uint64_t)t << shift) & field) | (c & ~field);
}
enum Op { ADD, SUB, AVRG, ABSDIFF, MIN, MAX, SLT, SGE };
static int64_t apply(Op op, int64_t x, int64_t y) {
    switch (op) {
    case ADD: return x + y;
    case SUB: return x - y;
    case AVRG: return x + y >= 0 ? (x + y + 1) >> 1 : (x + y) >> 1;
    case ABSDIFF: return x > y ? x - y : y - x;
    case MIN: return x < y ? x : y;
    case MAX: return x > y ? x : y;
    case SLT: return x < y;
    case SGE: return x >= y;
    }
    return 0;
}
// SIMD: n elements; asel/bsel digit strings (rightmost: element 0); mask: positions ("" all)
static uint32_t simd(Op op, int n, bool ds, bool as, bool bs, bool sat, bool acc, const char *mask, const char *asel,
                     const char *bsel, uint32_t a, uint32_t b, uint32_t c) {
    int bits = 32 / n;
    uint64_t ab = ((uint64_t)b << 32) | a;
    int64_t out = acc ? (int64_t)c : 0;
    int la = 0, lb = 0;
    while (asel[la]) la++;
    while (bsel[lb]) lb++;
    for (int i = 0; i < n; i++) {
        int ka = asel[la - 1 - i] - '0', kb = bsel[lb - 1 - i] - '0';
        int64_t t = apply(op, sx(ab >> (bits * ka), bits, as), sx(ab >> (bits * kb), bits, bs));
        if (sat) t = sat_to(t, bits, ds);
        bool in = !mask[0];
        for (const char *m = mask; *m; m++) in |= (*m - '0') == i;
        if (acc) out += in ? t : 0;
        else out |= (int64_t)(((uint64_t)(in ? t : (int64_t)(c >> (bits * i))) & ((1ull << bits) - 1)) << (bits * i));
    }
    return (uint32_t)out;
}
// .sat of a scalar result as ptxas for sm_90 lowers it (the ISA clamps to the destination field's range by .dtype;
// an H100 gave ptxas's numbers, run 3). A shift: .s32 clamps the s34 value to s32, .u32 only above 2^32 - 1, and a
// field takes the low bits. Any other operation: no field: .s32 to s32, .u32 only below 0 (the low 32 bits above);
// a field: outside [0, 2^32) becomes 2^32 - 1, then the unsigned minimum with the field's largest value by .dtype.
static int64_t sat_gpu(int64_t t, bool shift, int bits, bool ds) {
    const int64_t m32 = 0xffffffffll;
    if (shift || bits == 32) {
        if (ds) return clampv(t, INT32_MIN, INT32_MAX);
        return shift ? (t > m32 ? m32 : t) : (t < 0 ? 0 : (t & m32));
    }
    int64_t u = (t < 0 || t > m32) ? m32 : t, top = ds ? (1ll << (bits - 1)) - 1 : (1ll << bits) - 1;
    return u > top ? top : u;
}
// scalar: the s34 result, .sat, then a secondary operation with c or a merge. ptxas's .min/.max compare the result's
// low 32 bits, sign-extended, with c signed by .dtype; for .u32 as 64-bit unsigned values with c zero-extended, so a
// result with bit 31 set is the larger whatever c is.
static uint32_t scalar(int64_t t, bool ds, bool sat, char secop, const char *dsel, uint32_t c, bool shift = false) {
    t = sx((uint64_t)t, 34, true);
    if (sat) t = sat_gpu(t, shift, dsel[0] == 'b' ? 8 : dsel[0] == 'h' ? 16 : 32, ds);
    if (secop == '+') t += c;
    else if (secop) {
        int64_t t32 = t & 0xffffffffll;
        int64_t kt = ds ? sx(t32, 32, true) : (t32 >> 31 ? t32 + (1ll << 32) : t32), kc = sx(c, 32, ds);
        t = (secop == '<' ? kt < kc : kt > kc) ? t32 : c;
    }
    return merge(dsel, t, c);
}
// the GPU's vmad: the selected operands as signed 32-bit values, c sign-extended, a 64-bit sum
static uint32_t vmad(bool as, bool bs, const char *asel, const char *bsel, bool na, bool po, bool sat, int scale,
                     uint32_t a, uint32_t b, uint32_t c) {
    bool sfinal = as || bs || na;
    int64_t tmp = (int64_t)(int32_t)(uint32_t)part(a, as, asel) * (int32_t)(uint32_t)part(b, bs, bsel);
    int lsb = po ? 1 : 0;
    if (na) { tmp = ~tmp; lsb = 1; }
    int64_t v = tmp + (int32_t)c + lsb;
    int64_t r = v >> scale;
    if (sat) r = sfinal ? clampv(r, INT32_MIN, INT32_MAX)
                        : (v < 0 ? (scale ? 0xffffffffll : 0) : clampv(r, 0, 0xffffffffll));
    return (uint32_t)r;
}

static void model(uint32_t a, uint32_t b, uint32_t c, uint32_t *e) {
    e[0] = simd(ABSDIFF, 4, false, false, false, false, false, "", "3210", "7654", a, b, 0);
    e[1] = simd(ABSDIFF, 4, false, false, false, false, true, "", "3210", "7654", a, b, 0);
    e[2] = simd(ADD, 4, true, true, true, true, false, "", "3210", "7654", a, b, c);
    e[3] = simd(SUB, 2, false, false, false, true, false, "", "10", "32", a, b, c);
    e[4] = simd(AVRG, 4, false, false, false, false, false, "31", "3210", "7654", a, b, c);
    e[5] = simd(AVRG, 2, true, true, true, false, false, "", "10", "32", a, b, c);
    e[6] = simd(MIN, 2, true, true, false, false, true, "1", "00", "23", a, b, c);
    e[7] = simd(MAX, 4, false, true, false, false, false, "20", "0123", "5577", a, b, c);
    e[8] = simd(SLT, 4, false, false, false, false, false, "", "3210", "7654", a, b, c);
    e[9] = simd(SGE, 2, false, true, true, false, true, "", "10", "32", a, b, c);
    e[10] = simd(ABSDIFF, 2, true, true, true, true, false, "", "31", "20", a, b, c);
    e[11] = simd(SUB, 4, true, false, true, false, true, "10", "3210", "7654", a, b, c);
    e[12] = scalar(part(a, true, "b0") + part(b, false, "h1"), true, true, 0, "", 0);
    e[13] = scalar(part(a, true, "") - part(b, true, ""), true, true, '<', "", c);
    int64_t x = part(a, false, "h0"), y = part(b, false, "b3");
    e[14] = scalar(x > y ? x - y : y - x, false, false, 0, "h1", c);
    x = part(a, false, "b2"); y = part(b, true, "");
    e[15] = scalar(x < y ? x : y, true, false, '+', "", c);
    x = part(a, true, "h1"); y = part(b, true, "b1");
    e[16] = scalar(x > y ? x : y, false, true, 0, "b2", c);
    int64_t sh = part(b, false, "b0");
    sh = sh > 32 ? 32 : sh;
    e[17] = scalar((int64_t)((uint64_t)part(a, false, "b1") << sh), false, false, '+', "", c, true);
    e[18] = scalar(part(a, true, "") >> (part(b, false, "") & 31), true, false, 0, "", 0, true);
    e[19] = vmad(true, false, "h0", "h1", true, false, true, 0, a, b, c);
    e[20] = vmad(false, false, "", "", false, false, false, 15, a, b, c);
    e[21] = vmad(false, false, "b3", "h0", false, true, false, 0, a, b, c);
    e[22] = scalar(part(a, true, "") < part(b, false, "b1"), true, false, '>', "", c);   // c signed: .atype s32
    e[23] = scalar((int64_t)((uint64_t)part(a, true, "b3") << (part(b, false, "") & 31)), true, true, 0, "h0", c, true);
}

int main() {
    std::vector<uint32_t> a(N), b(N), c(N);
    uint64_t s = 0x2545F4914F6CDD1Dull;
    const uint32_t special[] = {0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff,
                                0x00ff00ff, 0xff00ff00, 32, 31, 33};
    for (int i = 0; i < N; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        a[i] = i < 16 ? special[i] : (uint32_t)s;
        b[i] = i < 256 ? special[i % 16] : (uint32_t)(s >> 32);
        c[i] = (uint32_t)(s >> 16) ^ (i % 3 ? 0 : 0xffff0000u);
    }
    uint32_t *da, *db, *dc, *dout;
    CHECK(cudaMalloc(&da, N * 4)); CHECK(cudaMalloc(&db, N * 4)); CHECK(cudaMalloc(&dc, N * 4));
    CHECK(cudaMalloc(&dout, (size_t)N * R * 4));
    CHECK(cudaMemcpy(da, a.data(), N * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), N * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dc, c.data(), N * 4, cudaMemcpyHostToDevice));
    video<<<N / 128, 128>>>(da, db, dc, dout, N);
    CHECK(cudaGetLastError());
    std::vector<uint32_t> got((size_t)N * R);
    CHECK(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0, per[R] = {0};
    for (int i = 0; i < N; i++) {
        uint32_t e[R];
        model(a[i], b[i], c[i], e);
        for (int k = 0; k < R; k++)
            if (got[(size_t)i * R + k] != e[k] && per[k]++ < 3 && bad++ < 40)    // the first 3 of each result
                printf("input %d result %d: a %08x b %08x c %08x got %08x want %08x\n", i, k, a[i], b[i], c[i],
                       got[(size_t)i * R + k], e[k]);
    }
    for (int k = 0; k < R; k++)
        if (per[k]) printf("result %d: %d of %d inputs differ\n", k, per[k], N);
    for (int k = 0; k < R; k++) EXPECT(per[k] == 0);
    printf("PASS emu_video\n");
    return 0;
}
