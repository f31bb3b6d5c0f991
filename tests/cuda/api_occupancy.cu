// Occupancy answers of the runtime API (cudaOccupancyMaxActiveBlocksPerMultiprocessor and
// cudaOccupancyAvailableDynamicSMemPerBlock; built with NVIDIA's static runtime they are the driver's
// cuOccupancy* calls, which NVIDIA's libcublas makes in cublasCreate), printed for the test to check against the
// occupancy rules (tests/e2e/test_api_occupancy.py) or against a native run of the same program on a real GPU.
// Lines: "DEV <smem/SM> <optin> <reserved> <max threads/SM> <max blocks/SM> <regs/SM> <major> <minor>",
// "FUNC <name> <static smem> <regs> <max dyn smem>", "ACTIVE <name> <block> <dyn> <blocks>",
// "AVAIL <name> <block> <nblocks> <dyn>|invalid", then "OK <checks>". Checks made here: the documented errors, and
// that launches with the answered dynamic shared memory really run (every shared byte written and read back).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

// Fills its dynamic shared memory (as ints), then each thread sums a strided slice written by other threads.
extern "C" __global__ void dyn_user(int *out, unsigned words) {
    extern __shared__ int buf[];
    for (unsigned i = threadIdx.x; i < words; i += blockDim.x)
        buf[i] = (int)(i * 3 + blockIdx.x);
    __syncthreads();
    int s = 0;
    for (unsigned i = (threadIdx.x + 1) % blockDim.x; i < words; i += blockDim.x)
        s += buf[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// Static shared memory too: 5000 bytes (not a multiple of the allocation step).
extern "C" __global__ void static_user(int *out) {
    __shared__ char fixed[5000];
    extern __shared__ char more[];
    fixed[threadIdx.x % 5000] = (char)threadIdx.x;
    more[0] = 1;
    __syncthreads();
    out[threadIdx.x] = fixed[(threadIdx.x + 1) % blockDim.x % 5000] + more[0];
}

static long checks = 0;

static void print_active(const char *name, const void *f, int block, size_t dyn) {
    int n = -1;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, block, dyn));
    printf("ACTIVE %s %d %zu %d\n", name, block, dyn, n);
}

// Prints the answer and, where there is one, the occupancy at it and one allocation step above.
static size_t print_avail(const char *name, const void *f, int block, int nblocks) {
    size_t dyn = 12345;
    cudaError_t e = cudaOccupancyAvailableDynamicSMemPerBlock(&dyn, f, nblocks, block);
    if (e == cudaErrorInvalidValue) {
        cudaGetLastError();
        printf("AVAIL %s %d %d invalid\n", name, block, nblocks);
        return 0;
    }
    CHECK(e);
    printf("AVAIL %s %d %d %zu\n", name, block, nblocks, dyn);
    print_active(name, f, block, dyn);
    print_active(name, f, block, dyn + 1);
    return dyn;
}

static void print_func(const char *name, const void *f) {
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, f));
    printf("FUNC %s %zu %d %d\n", name, fa.sharedSizeBytes, fa.numRegs, fa.maxDynamicSharedSizeBytes);
}

// Launches `blocks` blocks of dyn_user with `dyn` bytes of dynamic shared memory and checks every sum.
static void run_dyn_user(int blocks, int block, size_t dyn) {
    int *d_out;
    size_t n = (size_t)blocks * block;
    CHECK(cudaMalloc(&d_out, n * sizeof(int)));
    unsigned words = (unsigned)(dyn / 4);
    dyn_user<<<blocks, block, dyn>>>(d_out, words);
    CHECK(cudaGetLastError());
    std::vector<int> h(n);
    CHECK(cudaMemcpy(h.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++)
        for (int t = 0; t < block; t++) {
            int want = 0;
            for (unsigned i = (unsigned)(t + 1) % block; i < words; i += block)
                want += (int)(i * 3 + b);
            EXPECT(h[(size_t)b * block + t] == want);
        }
    CHECK(cudaFree(d_out));
    checks++;
}

int main() {
    int dev = 0, smem_sm = 0, optin = 0, reserved = 0, tpm = 0, bpm = 0, regs = 0, major = 0, minor = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    CHECK(cudaDeviceGetAttribute(&tpm, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
    CHECK(cudaDeviceGetAttribute(&bpm, cudaDevAttrMaxBlocksPerMultiprocessor, dev));
    CHECK(cudaDeviceGetAttribute(&regs, cudaDevAttrMaxRegistersPerMultiprocessor, dev));
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    printf("DEV %d %d %d %d %d %d %d %d\n", smem_sm, optin, reserved, tpm, bpm, regs, major, minor);

    // ---- documented errors
    size_t dyn = 0;
    EXPECT_ERR(cudaOccupancyAvailableDynamicSMemPerBlock(&dyn, (const void *)dyn_user, 0, 128), cudaErrorInvalidValue);
    cudaGetLastError();
    EXPECT_ERR(cudaOccupancyAvailableDynamicSMemPerBlock(&dyn, (const void *)dyn_user, 1, 4096),
               cudaErrorInvalidValue);                        // no block of 4096 threads fits anywhere
    cudaGetLastError();
    checks += 2;

    // ---- defaults: the function's own 48 KiB cap, then what opting in allows
    print_func("dyn_user", (const void *)dyn_user);
    print_func("static_user", (const void *)static_user);
    const int blocks_sm[] = { 1, 2, 3, 4, 5, 7, 8, 16, 32 };
    for (int block : { 32, 128, 256, 1024 })
        for (int nb : blocks_sm)
            print_avail("dyn_user", (const void *)dyn_user, block, nb);
    for (int nb : blocks_sm)
        print_avail("static_user", (const void *)static_user, 128, nb);

    CHECK(cudaFuncSetAttribute(dyn_user, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    // all the opt-in less the function's static shared memory, as compiled (5008 bytes on sm_90, not 5000)
    cudaFuncAttributes sfa;
    CHECK(cudaFuncGetAttributes(&sfa, (const void *)static_user));
    CHECK(cudaFuncSetAttribute(static_user, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               optin - (int)sfa.sharedSizeBytes));
    printf("OPTIN\n");
    print_func("dyn_user", (const void *)dyn_user);
    for (int block : { 128, 1024 })
        for (int nb : blocks_sm)
            print_avail("dyn_user", (const void *)dyn_user, block, nb);
    for (int nb : blocks_sm)
        print_avail("static_user", (const void *)static_user, 128, nb);

    // ---- the answers are launchable: one block with all the shared memory a block may have, and two per SM
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    size_t one = 0, two = 0;
    CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&one, (const void *)dyn_user, 1, 128));
    CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&two, (const void *)dyn_user, 2, 128));
    EXPECT(one == (size_t)optin);
    EXPECT(two < one);
    checks += 2;
    run_dyn_user(2, 128, one);
    run_dyn_user(2 * sms > 8 ? 8 : 2 * sms, 128, two);
    dyn_user<<<1, 128, one + 1>>>(nullptr, 0);                // one byte more than the function may have
    EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    checks++;

    // ---- a carveout preference is the SM's share when several blocks must fit
    CHECK(cudaFuncSetAttribute(dyn_user, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
    printf("CARVEOUT 50\n");
    for (int nb : blocks_sm)
        print_avail("dyn_user", (const void *)dyn_user, 128, nb);

    printf("OK %ld\n", checks);
    return 0;
}
