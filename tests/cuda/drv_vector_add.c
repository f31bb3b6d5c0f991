// Driver-API vector add, as NVIDIA's samples do it: the kernel from a PTX file (cuModuleLoad) and from a fatbin in
// memory (cuModuleLoadData), launched with kernelParams and with extra (CU_LAUNCH_PARAM_BUFFER_*); module globals,
// the memsets and 2D copies of the driver API, and the error codes of its mistakes.
// Usage: drv_vector_add PTX_FILE FATBIN_FILE. Prints "OK <checks>" on success.
#include <stddef.h>
#include <string.h>

#include "drv_check.h"

static void add_with(CUmodule mod, int n)
{
    CUfunction f;
    DCHECK(cuModuleGetFunction(&f, mod, "vadd"));
    size_t bytes = (size_t)n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    for (int i = 0; i < n; i++) {
        a[i] = 0.5f * i;
        b[i] = 2.0f * i + 1.0f;
    }
    CUdeviceptr da, db, dc;
    DCHECK(cuMemAlloc(&da, bytes));
    DCHECK(cuMemAlloc(&db, bytes));
    DCHECK(cuMemAlloc(&dc, bytes));
    DCHECK(cuMemcpyHtoD(da, a, bytes));
    DCHECK(cuMemcpyHtoD(db, b, bytes));
    unsigned blocks = (unsigned)(n + 255) / 256;
    void *params[] = { &da, &db, &dc, &n };
    DCHECK(cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    DCHECK(cuMemcpyDtoH(c, dc, bytes));
    for (int i = 0; i < n; i++)
        DEXPECT(c[i] == a[i] + b[i]);
    checks++;

    // the same through a packed parameter buffer, whose size is the kernel's parameter size: the end of its last
    // parameter (28), not the struct's with its tail padding (32), which NVIDIA's driver refuses as out of resources
    DCHECK(cuMemsetD32(dc, 0, (size_t)n));
    struct { CUdeviceptr a, b, c; int n; } packed = { da, db, dc, n };
    size_t size = sizeof packed;
    void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                      CU_LAUNCH_PARAM_END };
    DEXPECT_ERR(cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, NULL, NULL, extra), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    checks++;
    size = offsetof(__typeof__(packed), n) + sizeof packed.n;
    DCHECK(cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
    DCHECK(cuCtxSynchronize());
    memset(c, 0, bytes);
    DCHECK(cuMemcpyDtoH(c, dc, bytes));
    for (int i = 0; i < n; i++)
        DEXPECT(c[i] == a[i] + b[i]);
    checks++;

    // both, or neither when the kernel has parameters: CUDA_ERROR_INVALID_VALUE
    DEXPECT_ERR(cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, NULL, params, extra), CUDA_ERROR_INVALID_VALUE);
    DEXPECT_ERR(cuLaunchKernel(f, blocks, 1, 1, 4096, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_VALUE);
    checks += 2;
    DCHECK(cuMemFree(da));
    DCHECK(cuMemFree(db));
    DCHECK(cuMemFree(dc));
    DEXPECT_ERR(cuMemFree(da), CUDA_ERROR_INVALID_VALUE);
    checks++;
    free(a), free(b), free(c);
}

static void globals(CUmodule mod)
{
    CUfunction f;
    CUdeviceptr counter, x;
    size_t size;
    int n = 1000, zero = 0, got = 0;
    float s = 3.0f, h[1000];
    DCHECK(cuModuleGetFunction(&f, mod, "scale"));
    DCHECK(cuModuleGetGlobal(&counter, &size, mod, "counter"));
    DEXPECT(size == sizeof(int));
    DCHECK(cuMemcpyHtoD(counter, &zero, sizeof zero));
    for (int i = 0; i < n; i++)
        h[i] = (float)i;
    DCHECK(cuMemAlloc(&x, sizeof h));
    DCHECK(cuMemcpyHtoD(x, h, sizeof h));
    void *params[] = { &x, &s, &n };
    DCHECK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    DCHECK(cuMemcpyDtoH(&got, counter, sizeof got));
    DEXPECT(got == n);
    DCHECK(cuMemcpyDtoH(h, x, sizeof h));
    for (int i = 0; i < n; i++)
        DEXPECT(h[i] == 3.0f * i);
    DEXPECT_ERR(cuModuleGetGlobal(&counter, &size, mod, "no_such_global"), CUDA_ERROR_NOT_FOUND);
    DEXPECT_ERR(cuModuleGetFunction(&f, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    DCHECK(cuMemFree(x));
    checks += 4;
}

static void memsets_and_2d(void)
{
    enum { W = 40, H = 6, PITCH = 64 };
    CUdeviceptr d;
    unsigned char back[PITCH * H];
    DCHECK(cuMemAlloc(&d, PITCH * H));
    DCHECK(cuMemsetD8(d, 0x11, PITCH * H));
    DCHECK(cuMemsetD2D32(d, PITCH, 0xA1B2C3D4u, W / 4, H));
    DCHECK(cuMemsetD16(d + 2 * PITCH + 8, 0xBEEF, 4));
    DCHECK(cuMemcpyDtoH(back, d, sizeof back));
    for (int r = 0; r < H; r++)
        for (int x = 0; x < PITCH; x++) {
            unsigned char want = 0x11;
            if (x < W)
                want = (unsigned char)(0xA1B2C3D4u >> (8 * (x % 4)));
            if (r == 2 && x >= 8 && x < 16)
                want = (unsigned char)(0xBEEF >> (8 * (x % 2)));
            DEXPECT(back[r * PITCH + x] == want);
        }
    // a 2D host-to-device copy with a source pitch of its own, read back as one block
    unsigned char src[W * H];
    for (int i = 0; i < W * H; i++)
        src[i] = (unsigned char)(i * 7);
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = src;
    c.srcPitch = W;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = d;
    c.dstPitch = PITCH;
    c.WidthInBytes = W;
    c.Height = H;
    DCHECK(cuMemcpy2D(&c));
    DCHECK(cuMemcpyDtoH(back, d, sizeof back));
    for (int r = 0; r < H; r++)
        DEXPECT(memcmp(back + r * PITCH, src + r * W, W) == 0);
    unsigned type = 0;
    DCHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d));
    DEXPECT(type == CU_MEMORYTYPE_DEVICE);
    CUdeviceptr base;
    size_t size;
    DCHECK(cuMemGetAddressRange(&base, &size, d + 100));
    DEXPECT(base == d && size == PITCH * H);
    DCHECK(cuMemFree(d));
    checks += 5;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        printf("usage: drv_vector_add PTX_FILE FATBIN_FILE\n");
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    int count = 0;
    DEXPECT_ERR(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    DCHECK(cuInit(0));
    DCHECK(cuDeviceGetCount(&count));
    DEXPECT(count >= 1);
    DCHECK(cuDeviceGet(&dev, 0));
    DEXPECT_ERR(cuMemAlloc(&(CUdeviceptr){ 0 }, 16), CUDA_ERROR_INVALID_CONTEXT);
    DCHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    checks += 2;

    CUmodule from_ptx, from_fatbin, bad;
    DCHECK(cuModuleLoad(&from_ptx, argv[1]));
    add_with(from_ptx, 100000);
    size_t len;
    void *image = drv_read_file(argv[2], &len);
    DCHECK(cuModuleLoadData(&from_fatbin, image));
    free(image);   // the driver keeps its own copy
    add_with(from_fatbin, 3000);
    globals(from_fatbin);
    memsets_and_2d();

    DEXPECT_ERR(cuModuleLoad(&bad, "/nonexistent/kernels.ptx"), CUDA_ERROR_FILE_NOT_FOUND);
    DEXPECT(cuModuleLoadData(&bad, "this is not PTX") != CUDA_SUCCESS);
    DCHECK(cuModuleUnload(from_ptx));
    CUfunction f;
    DEXPECT_ERR(cuModuleGetFunction(&f, from_ptx, "vadd"), CUDA_ERROR_INVALID_HANDLE);
    DCHECK(cuModuleUnload(from_fatbin));
    DCHECK(cuCtxDestroy(ctx));
    checks += 4;
    printf("OK %ld\n", checks);
    return 0;
}
