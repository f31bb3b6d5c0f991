// Multi-stream copy/compute overlap in the style of NVIDIA's simpleStreams sample: an array of N ints is
// initialised by a kernel that adds a device-side factor `iterations` times per element, then copied back,
// first in one stream, then split over `streams` streams (each stream: kernel on its slice, then an async copy
// of that slice to pinned host memory), `reps` times each. Self-checking: every element must equal
// factor * iterations after each phase.
//     streams_overlap [N (default 16M)] [streams (default 4)] [reps (default 10)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); return 1; } } while (0)

__global__ void initArray(int *data, const int *factor, int iterations) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = 0; i < iterations; i++) data[idx] += *factor;
}

static int verify(const int *a, int n, int expect) {
    for (int i = 0; i < n; i++)
        if (a[i] != expect) { printf("FAIL streams_overlap: a[%d] = %d, expected %d\n", i, a[i], expect); return 1; }
    return 0;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 16 * 1024 * 1024;
    const int nstreams = argc > 2 ? atoi(argv[2]) : 4, reps = argc > 3 ? atoi(argv[3]) : 10;
    const int iterations = 5, threads = 512, factor = 1;
    if (n % (nstreams * threads)) { printf("FAIL: N must be a multiple of streams * %d\n", threads); return 1; }
    int *h, *d, *dfactor;
    CHECK(cudaMallocHost(&h, n * sizeof(int)));
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    CHECK(cudaMalloc(&dfactor, sizeof(int)));
    CHECK(cudaMemcpy(dfactor, &factor, sizeof(int), cudaMemcpyHostToDevice));
    cudaStream_t *streams = (cudaStream_t *)malloc(nstreams * sizeof(cudaStream_t));
    for (int s = 0; s < nstreams; s++) CHECK(cudaStreamCreate(&streams[s]));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));

    // one stream: kernel over the whole array, then one copy
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; r++) {
        CHECK(cudaMemset(d, 0, n * sizeof(int)));
        initArray<<<n / threads, threads>>>(d, dfactor, iterations);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(h, d, n * sizeof(int), cudaMemcpyDeviceToHost, 0));
    }
    CHECK(cudaDeviceSynchronize());
    double serial = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (verify(h, n, factor * iterations)) return 1;

    // streams: each stream computes and copies back its own slice
    const int slice = n / nstreams;
    t0 = std::chrono::steady_clock::now();
    CHECK(cudaEventRecord(start, 0));
    for (int r = 0; r < reps; r++) {
        CHECK(cudaMemset(d, 0, n * sizeof(int)));
        for (int s = 0; s < nstreams; s++) {
            initArray<<<slice / threads, threads, 0, streams[s]>>>(d + s * slice, dfactor, iterations);
            CHECK(cudaGetLastError());
        }
        for (int s = 0; s < nstreams; s++)
            CHECK(cudaMemcpyAsync(h + s * slice, d + s * slice, slice * sizeof(int), cudaMemcpyDeviceToHost,
                                  streams[s]));
    }
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    double overlapped = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (verify(h, n, factor * iterations)) return 1;
    printf("%d ints, %d streams, %d reps: one stream %.2f s, %d streams %.2f s (events: %.1f ms)\n", n, nstreams, reps,
           serial, nstreams, overlapped, ms);
    for (int s = 0; s < nstreams; s++) CHECK(cudaStreamDestroy(streams[s]));
    CHECK(cudaFreeHost(h));
    CHECK(cudaFree(d));
    printf("PASS streams_overlap\n");
    return 0;
}
