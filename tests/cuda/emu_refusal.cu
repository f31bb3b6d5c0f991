// No silent wrong results (issue 19): after a module is refused or a kernel hits an emulator fault, every later
// launch of those kernels and the next synchronisation report an error, and the output buffer is never read as a
// result. Mode "refused": built SASS-only (no PTX), so the emulated GPU refuses the module at the first launch.
// Mode "fault": the daemon of the test injects an internal fault into kernels named injected_fault*.
#include <cstdio>
#include <cstring>
#include "check.h"

__global__ void injected_fault_kernel(int *out) { out[threadIdx.x] = 7; }
__global__ void fill(int *out) { out[threadIdx.x] = 1; }

static int launch_reports_error(void (*kernel)(int *), int *d, const char *what)
{
    void *args[] = { &d };
    cudaError_t e = cudaLaunchKernel((const void *)kernel, dim3(1), dim3(32), args, 0, 0);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    printf("%s: %s\n", what, cudaGetErrorName(e));
    return e != cudaSuccess;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "refused";
    int *d, h[32];
    CHECK(cudaMalloc(&d, sizeof h));
    CHECK(cudaMemset(d, 0, sizeof h));
    if (!strcmp(mode, "fault")) {
        fill<<<1, 32>>>(d);
        CHECK(cudaDeviceSynchronize());                      // a clean kernel first: the device works
        for (int i = 0; i < 3; i++)
            EXPECT(launch_reports_error(injected_fault_kernel, d, "faulting kernel"));
        EXPECT(launch_reports_error(fill, d, "clean kernel after the fault"));   // sticky, as on a GPU
    } else {
        for (int i = 0; i < 3; i++)
            EXPECT(launch_reports_error(fill, d, "kernel of the refused module"));
    }
    // the next synchronisation and the copy a program would read its result with both fail
    cudaError_t e = cudaDeviceSynchronize();
    printf("synchronize: %s\n", cudaGetErrorName(e));
    EXPECT(e != cudaSuccess);
    e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    printf("copy of the result: %s\n", cudaGetErrorName(e));
    EXPECT(e != cudaSuccess);
    printf("PASS emu_refusal %s\n", mode);
    return 0;
}
