// For PROBE_MEMINFO_RC=<CUresult>: prints the cudaError_t that cudaMemGetInfo returns (tools/driver_probe/run_all.sh).
#include <cuda_runtime.h>
#include <cstdio>
int main() {
    size_t f, t;
    cudaFree(0);
    cudaError_t e = cudaMemGetInfo(&f, &t);
    printf("%d %s\n", (int)e, cudaGetErrorName(e));
    return 0;
}
