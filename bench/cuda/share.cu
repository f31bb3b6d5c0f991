// One tenant of a shared GPU (bench/fairness_bench.py runs several at once through libvcudart against one
// emulated-GPU daemon). Built with: nvcc -cudart shared -O3 -o share share.cu
//
//   share steady SECONDS ITERS BATCH   launches spin(ITERS) kernels in batches of BATCH, each batch followed by a
//                                      cudaDeviceSynchronize, until SECONDS have passed; a tenant that always wants
//                                      the device (it pauses only for one round trip per batch)
//   share flood SECONDS ITERS          launches spin(ITERS) kernels fire-and-forget as fast as it can, with a
//                                      cudaDeviceSynchronize only every 256 launches (its queue stays deep)
//   share copy SECONDS BYTES           floods cudaMemcpyAsync host-to-device copies of BYTES the same way
//   share dtod SECONDS BYTES           floods device-to-device copies of BYTES the same way
//   share ops COUNT memset|launch      alone: COUNT fire-and-forget ops (cudaMemsetAsync of 4 B, or empty kernels)
//                                      then one cudaDeviceSynchronize
//   share sync COUNT                   alone: COUNT x (empty kernel + cudaStreamSynchronize), round trip each
//   share kernels COUNT ITERS          alone: COUNT spin(ITERS) kernels then one cudaDeviceSynchronize
//   share hold SECONDS BYTES           holds BYTES of device memory for SECONDS, doing nothing else
// Output: "kernels <launched> ns <wall ns>" (steady/flood/copy: kernels or copies done; the others: COUNT);
// "first <ns> last <ns>" are the times (since start) of the first and last completed batch; exit 1 on a CUDA error.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

using clk = std::chrono::steady_clock;
static long long ns_since(clk::time_point t0) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - t0).count();
}

// A fixed amount of arithmetic per thread: the emulated GPU's time per launch grows with ITERS.
__global__ void spin(float *x, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int k = 0; k < iters; k++) v = v * 0.999f + 0.5f;
    x[i] = v;
}

__global__ void empty_kernel() {}

static const int THREADS = 256, BLOCKS = 4;

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: see the comment at the top of share.cu\n"); return 2; }
    const char *mode = argv[1];
    float *x;
    CK(cudaMalloc(&x, sizeof(float) * THREADS * BLOCKS));
    CK(cudaMemset(x, 0, sizeof(float) * THREADS * BLOCKS));
    CK(cudaDeviceSynchronize());
    clk::time_point t0 = clk::now();
    long long done = 0, first = -1, last = -1;
    if (!strcmp(mode, "steady") || !strcmp(mode, "flood") || !strcmp(mode, "copy") || !strcmp(mode, "dtod")) {
        double seconds = atof(argv[2]);
        bool steady = !strcmp(mode, "steady"), dtod = !strcmp(mode, "dtod"), copy = dtod || !strcmp(mode, "copy");
        int iters = atoi(argv[3]);
        int batch = steady ? atoi(argv[4]) : 256;
        size_t bytes = copy ? (size_t)atoll(argv[3]) : 0;
        void *host = nullptr, *dev = nullptr;
        if (copy) {
            if (dtod) CK(cudaMalloc(&host, bytes));
            else CK(cudaMallocHost(&host, bytes));
            if (!dtod) memset(host, 1, bytes);
            CK(cudaMalloc(&dev, bytes));
        }
        while (ns_since(t0) < (long long)(seconds * 1e9)) {
            for (int b = 0; b < batch; b++) {
                if (copy) CK(cudaMemcpyAsync(dev, host, bytes, dtod ? cudaMemcpyDeviceToDevice
                                                                    : cudaMemcpyHostToDevice, 0));
                else spin<<<BLOCKS, THREADS>>>(x, iters);
            }
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            done += batch;
            last = ns_since(t0);
            if (first < 0) first = last;
        }
    } else if (!strcmp(mode, "ops")) {
        int count = atoi(argv[2]);
        bool memset4 = argc > 3 && !strcmp(argv[3], "memset");
        for (int i = 0; i < count; i++) {
            if (memset4) CK(cudaMemsetAsync(x, i & 0xff, 4, 0));
            else empty_kernel<<<1, 1>>>();
        }
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        done = count;
    } else if (!strcmp(mode, "sync")) {
        int count = atoi(argv[2]);
        for (int i = 0; i < count; i++) {
            empty_kernel<<<1, 1>>>();
            CK(cudaStreamSynchronize(0));
        }
        done = count;
    } else if (!strcmp(mode, "hold")) {
        void *p;
        CK(cudaMalloc(&p, (size_t)atoll(argv[3])));
        while (ns_since(t0) < (long long)(atof(argv[2]) * 1e9)) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, nullptr);
        }
    } else if (!strcmp(mode, "kernels")) {
        int count = atoi(argv[2]), iters = atoi(argv[3]);
        for (int i = 0; i < count; i++) spin<<<BLOCKS, THREADS>>>(x, iters);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        done = count;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("kernels %lld ns %lld first %lld last %lld\n", done, ns_since(t0), first, last);
    CK(cudaFree(x));
    return 0;
}
