// The workload of NVIDIA's simpleStreams sample at its defaults, written here: N ints (16M) in page-locked host
// memory, by default generic memory pinned with cudaHostRegister(cudaHostRegisterMapped) after cudaSetDeviceFlags(
// cudaDeviceMapHost) as the sample does on Linux ("host" argument: cudaMallocHost instead); a kernel adds a device-side
// factor `iterations` (5) times per element. Phases: one 64 MiB device-to-host copy, one kernel, `reps` (100) times
// kernel + blocking copy in one stream, then `reps` times the array split over `streams` (4) streams (kernel on each
// slice, then an async copy of each slice). Self-checking: every element must be factor * reps * iterations.
//     simple_streams [N (16M)] [streams (4)] [reps (100)] [registered|host]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <cuda_runtime.h>

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); return 1; } } while (0)

__global__ void addFactor(int *data, const int *factor, int iterations)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    for (int i = 0; i < iterations; i++)
        data[idx] += *factor;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 16 * 1024 * 1024;
    const int nstreams = argc > 2 ? atoi(argv[2]) : 4, reps = argc > 3 ? atoi(argv[3]) : 100;
    const bool registered = argc <= 4 || strcmp(argv[4], "host") != 0;
    const int iterations = 5, threads = 512, factor = 5;
    const size_t nbytes = (size_t)n * sizeof(int);
    if (n % (nstreams * threads)) { printf("FAIL: N must be a multiple of streams * %d\n", threads); return 1; }
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaSetDeviceFlags(cudaDeviceScheduleAuto | (registered ? cudaDeviceMapHost : 0)));
    int *h = nullptr;
    void *mapping = nullptr;
    if (registered) {
        mapping = mmap(nullptr, nbytes + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mapping == MAP_FAILED) { printf("FAIL mmap\n"); return 1; }
        h = (int *)(((uintptr_t)mapping + 4095) & ~(uintptr_t)4095);
        CHECK(cudaHostRegister(h, nbytes, cudaHostRegisterMapped));
    } else {
        CHECK(cudaMallocHost(&h, nbytes));
    }
    int *d, *dfactor;
    CHECK(cudaMalloc(&d, nbytes));
    CHECK(cudaMemset(d, 0, nbytes));
    CHECK(cudaMalloc(&dfactor, sizeof(int)));
    CHECK(cudaMemcpy(dfactor, &factor, sizeof(int), cudaMemcpyHostToDevice));
    cudaStream_t *streams = (cudaStream_t *)malloc(nstreams * sizeof(cudaStream_t));
    for (int s = 0; s < nstreams; s++) CHECK(cudaStreamCreate(&streams[s]));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));

    CHECK(cudaEventRecord(start, 0));
    CHECK(cudaMemcpyAsync(h, d, nbytes, cudaMemcpyDeviceToHost, streams[0]));
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaEventRecord(start, 0));
    addFactor<<<n / threads, threads, 0, streams[0]>>>(d, dfactor, iterations);
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));

    CHECK(cudaEventRecord(start, 0));                       // one stream: kernel, then a blocking copy
    for (int r = 0; r < reps; r++) {
        addFactor<<<n / threads, threads>>>(d, dfactor, iterations);
        CHECK(cudaMemcpy(h, d, nbytes, cudaMemcpyDeviceToHost));
    }
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    float serial_ms;
    CHECK(cudaEventElapsedTime(&serial_ms, start, stop));

    const int slice = n / nstreams;                         // streams: each computes and copies back its slice
    memset(h, 255, nbytes);
    CHECK(cudaMemset(d, 0, nbytes));
    CHECK(cudaEventRecord(start, 0));
    for (int r = 0; r < reps; r++) {
        for (int s = 0; s < nstreams; s++)
            addFactor<<<slice / threads, threads, 0, streams[s]>>>(d + s * slice, dfactor, iterations);
        for (int s = 0; s < nstreams; s++)
            CHECK(cudaMemcpyAsync(h + s * slice, d + s * slice, slice * sizeof(int), cudaMemcpyDeviceToHost,
                                  streams[s]));
    }
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    float streamed_ms;
    CHECK(cudaEventElapsedTime(&streamed_ms, start, stop));
    const int expect = factor * reps * iterations;
    for (int i = 0; i < n; i++)
        if (h[i] != expect) { printf("FAIL simple_streams: h[%d] = %d, expected %d\n", i, h[i], expect); return 1; }
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("%d ints, %d streams, %d reps, %s memory: one stream %.1f ms/rep, %d streams %.1f ms/rep, %.1f s\n", n,
           nstreams, reps, registered ? "registered mapped" : "cudaMallocHost", serial_ms / reps, nstreams,
           streamed_ms / reps, total);
    for (int s = 0; s < nstreams; s++) CHECK(cudaStreamDestroy(streams[s]));
    if (registered) {
        CHECK(cudaHostUnregister(h));
        munmap(mapping, nbytes + 4096);
    } else {
        CHECK(cudaFreeHost(h));
    }
    CHECK(cudaFree(d));
    CHECK(cudaFree(dfactor));
    printf("PASS simple_streams\n");
    return 0;
}
