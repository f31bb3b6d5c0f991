// Driver-API tiled matrix multiply (16x16 tiles through shared memory), loaded from a fatbin file with
// cuModuleLoadData, checked against the CPU. Usage: drv_matmul FATBIN_FILE [N]. Prints "OK <max abs error>".
#include <math.h>
#include <string.h>

#include "drv_check.h"

int main(int argc, char **argv)
{
    int n = argc > 2 ? atoi(argv[2]) : 48;
    size_t len;
    DEXPECT(n > 0);
    char *image = drv_read_file(argc > 1 ? argv[1] : NULL, &len);

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    DCHECK(cuInit(0));
    DCHECK(cuDeviceGet(&dev, 0));
    DCHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    DCHECK(cuCtxSetCurrent(ctx));
    DCHECK(cuModuleLoadData(&mod, image));
    DCHECK(cuModuleGetFunction(&f, mod, "matmul"));

    size_t bytes = (size_t)n * n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
        b[i] = (float)((i * 11) % 13) / 6.0f - 1.0f;
    }
    CUdeviceptr da, db, dc;
    DCHECK(cuMemAlloc(&da, bytes));
    DCHECK(cuMemAlloc(&db, bytes));
    DCHECK(cuMemAlloc(&dc, bytes));
    DCHECK(cuMemcpyHtoD(da, a, bytes));
    DCHECK(cuMemcpyHtoD(db, b, bytes));
    CUstream s;
    DCHECK(cuStreamCreate(&s, 0));
    void *params[] = { &da, &db, &dc, &n };
    unsigned tiles = (unsigned)(n + 15) / 16;
    DCHECK(cuLaunchKernel(f, tiles, tiles, 1, 16, 16, 1, 0, s, params, NULL));
    DCHECK(cuStreamSynchronize(s));
    DCHECK(cuMemcpyDtoH(c, dc, bytes));
    double worst = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double want = 0;
            for (int k = 0; k < n; k++)
                want += (double)a[i * n + k] * b[k * n + j];
            double e = fabs(want - c[i * n + j]);
            worst = e > worst ? e : worst;
        }
    DEXPECT(worst < 1e-3);   // float accumulation of n products of magnitude <= 1
    DCHECK(cuStreamDestroy(s));
    DCHECK(cuModuleUnload(mod));
    DCHECK(cuDevicePrimaryCtxRelease(dev));
    printf("OK %.3g\n", worst);
    return 0;
}
