// Emulator end-to-end program: every atomic kind under contention, and a CAS loop (float atomic max).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 1; } } while (0)

// ints[0] add, [1] sub, [2] min, [3] max, [4] and, [5] or, [6] xor, [7] exch, [8] cas counter
// uints[0] inc(wrap 15), [1] dec(wrap 15); ulls[0] add; dbl[0] add; flt[0] add
extern "C" __global__ void atomicsAll(int* ints, unsigned* uints, unsigned long long* ulls, float* flt,
                                      double* dbl, int* slots, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    slots[i] = atomicAdd(&ints[0], 1);          // live result: every slot distinct
    atomicSub(&ints[1], i);
    atomicMin(&ints[2], 1000 - i);
    atomicMax(&ints[3], i * 3);
    atomicAnd(&ints[4], ~(1 << (i % 31)));
    atomicOr(&ints[5], 1 << (i % 17));
    atomicXor(&ints[6], i);
    atomicExch(&ints[7], i);
    int old = ints[8], assumed;
    do { assumed = old; old = atomicCAS(&ints[8], assumed, assumed + 2); } while (old != assumed);
    atomicInc(&uints[0], 15u);
    atomicDec(&uints[1], 15u);
    atomicAdd(&ulls[0], (unsigned long long)i << 20);
    atomicAdd(&flt[0], 0.5f);
    atomicAdd(&dbl[0], 0.25);
}

__device__ float atomicMaxFloat(float* addr, float v) {
    int* a = (int*)addr;
    int old = *a, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= v) break;
        old = atomicCAS(a, assumed, __float_as_int(v));
    } while (old != assumed);
    return __int_as_float(old);
}

extern "C" __global__ void casMax(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicMaxFloat(out, in[i]);
}

extern "C" __global__ void histo(const int* in, int* bins, int n) {
    __shared__ int sb[16];
    if (threadIdx.x < 16) sb[threadIdx.x] = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&sb[in[i] & 15], 1);
    __syncthreads();
    if (threadIdx.x < 16) atomicAdd(&bins[threadIdx.x], sb[threadIdx.x]);
}

int main() {
    const int n = 2000;
    int *dints, *dslots; unsigned* duints; unsigned long long* dulls; float* dflt; double* ddbl;
    CHECK(cudaMalloc(&dints, 9 * 4)); CHECK(cudaMalloc(&dslots, n * 4)); CHECK(cudaMalloc(&duints, 8));
    CHECK(cudaMalloc(&dulls, 8)); CHECK(cudaMalloc(&dflt, 4)); CHECK(cudaMalloc(&ddbl, 8));
    int ints[9] = {0, 0, 1 << 30, -5, -1, 0, 0, -1, 0};
    unsigned uints[2] = {0, 0};
    CHECK(cudaMemcpy(dints, ints, sizeof ints, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(duints, uints, sizeof uints, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dulls, 0, 8)); CHECK(cudaMemset(dflt, 0, 4)); CHECK(cudaMemset(ddbl, 0, 8));
    atomicsAll<<<(n + 127) / 128, 128>>>(dints, duints, dulls, dflt, ddbl, dslots, n);
    CHECK(cudaGetLastError());
    int slots[n];
    unsigned long long ull; float f; double d;
    CHECK(cudaMemcpy(ints, dints, sizeof ints, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(uints, duints, sizeof uints, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(slots, dslots, sizeof slots, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&ull, dulls, 8, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&f, dflt, 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&d, ddbl, 8, cudaMemcpyDeviceToHost));
    static char seen[n]; memset(seen, 0, n);
    for (int i = 0; i < n; i++) { if (slots[i] < 0 || slots[i] >= n || seen[slots[i]]) { printf("FAIL slots\n"); return 1; } seen[slots[i]] = 1; }
    long long sub = 0; int andv = -1, orv = 0, xorv = 0; unsigned long long ulls = 0;
    for (int i = 0; i < n; i++) { sub -= i; andv &= ~(1 << (i % 31)); orv |= 1 << (i % 17); xorv ^= i; ulls += (unsigned long long)i << 20; }
    if (ints[0] != n || ints[1] != (int)sub || ints[2] != 1000 - (n - 1) || ints[3] != 3 * (n - 1) ||
        ints[4] != andv || ints[5] != orv || ints[6] != xorv || ints[7] < 0 || ints[7] >= n || ints[8] != 2 * n) {
        printf("FAIL ints %d %d %d %d %d %d %d %d %d\n", ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6], ints[7], ints[8]);
        return 1;
    }
    if (uints[0] != n % 16 || uints[1] != (unsigned)((16 - n % 16) % 16)) { printf("FAIL inc/dec %u %u\n", uints[0], uints[1]); return 1; }
    if (ull != ulls || f != 0.5f * n || d != 0.25 * n) { printf("FAIL ull/float/double\n"); return 1; }

    float* in = (float*)malloc(n * 4); float mx = -1e30f;
    for (int i = 0; i < n; i++) { in[i] = (float)((i * 7919) % 1000) - 300.5f; if (in[i] > mx) mx = in[i]; }
    float *din, *dout; CHECK(cudaMalloc(&din, n * 4)); CHECK(cudaMalloc(&dout, 4));
    CHECK(cudaMemcpy(din, in, n * 4, cudaMemcpyHostToDevice));
    float init = -1e30f; CHECK(cudaMemcpy(dout, &init, 4, cudaMemcpyHostToDevice));
    casMax<<<(n + 255) / 256, 256>>>(din, dout, n);
    CHECK(cudaMemcpy(&f, dout, 4, cudaMemcpyDeviceToHost));
    if (f != mx) { printf("FAIL casMax %f vs %f\n", f, mx); return 1; }

    int* hin = (int*)malloc(n * 4); int bins[16] = {0}, ref[16] = {0};
    for (int i = 0; i < n; i++) { hin[i] = i * 31 + 7; ref[hin[i] & 15]++; }
    int *dhin, *dbins; CHECK(cudaMalloc(&dhin, n * 4)); CHECK(cudaMalloc(&dbins, 64));
    CHECK(cudaMemcpy(dhin, hin, n * 4, cudaMemcpyHostToDevice)); CHECK(cudaMemset(dbins, 0, 64));
    histo<<<(n + 255) / 256, 256>>>(dhin, dbins, n);
    CHECK(cudaMemcpy(bins, dbins, 64, cudaMemcpyDeviceToHost));
    for (int b = 0; b < 16; b++) if (bins[b] != ref[b]) { printf("FAIL histo %d\n", b); return 1; }
    printf("PASS emu_atomics\n");
    return 0;
}
