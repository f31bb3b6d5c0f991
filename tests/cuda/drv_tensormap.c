// Tensor maps through the driver API (CUDA 13.0 headers), as frameworks make them for TMA kernels (JAX/XLA's Triton
// GEMMs, CUTLASS): cuTensorMapEncodeTiled (2D, 5D, 128-byte swizzle, 32-byte interleave), cuTensorMapEncodeIm2col,
// cuTensorMapReplaceAddress, and the arguments the driver API's documentation refuses with CUDA_ERROR_INVALID_VALUE
// (rank, alignment of the address, the map and the strides, sizes, box, element strides, enumerations, swizzle span,
// interleave rules, NaN fill of an integer type, im2col corners). The map is opaque: a program may only rely on
// encoding being repeatable and on cuTensorMapReplaceAddress giving what encoding at the new address gives.
// Usage: drv_tensormap. Prints "OK <checks>" on success.
#include <string.h>

#include "drv_check.h"

static CUtensorMap maps[4] __attribute__((aligned(64)));

static CUresult tiled(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank, CUdeviceptr p, const cuuint64_t *dims,
                      const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *steps,
                      CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapFloatOOBfill oob)
{
    return cuTensorMapEncodeTiled(m, t, rank, (void *)p, dims, strides, box, steps, il, sw,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, oob);
}

int main(void)
{
    CUdevice dev = drv_primary_current();
    CUdeviceptr buf;
    DCHECK(cuMemAlloc(&buf, 1 << 20));
    OKC(buf % 256 == 0);

    // a 64 x 32 float32 matrix (rows of 256 bytes), boxes of 16 x 8
    const cuuint64_t dims[5] = { 64, 32, 4, 2, 2 }, strides[4] = { 256, 8192, 32768, 65536 };
    const cuuint32_t box[5] = { 16, 8, 2, 1, 1 }, steps[5] = { 1, 1, 1, 1, 1 };
    CUtensorMap *a = &maps[0], *b = &maps[1], *c = &maps[2];
    memset(maps, 0, sizeof maps);
    DCHECK(tiled(a, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, buf, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    static const CUtensorMap zero;
    OKC(memcmp(a, &zero, sizeof zero) != 0);                      // something was written
    DCHECK(tiled(b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, buf, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    OKC(memcmp(a, b, sizeof *a) == 0);                            // encoding is repeatable

    // another address: replacing gives what encoding there gives; replacing back gives the first map again
    DCHECK(tiled(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, buf + 4096, dims, strides, box, steps,
                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    OKC(memcmp(a, c, sizeof *a) != 0);
    DCHECK(cuTensorMapReplaceAddress(b, (void *)(buf + 4096)));
    OKC(memcmp(b, c, sizeof *b) == 0);
    DCHECK(cuTensorMapReplaceAddress(b, (void *)buf));
    OKC(memcmp(a, b, sizeof *a) == 0);
    OKC(cuTensorMapReplaceAddress(b, (void *)(buf + 8)) == CUDA_ERROR_INVALID_VALUE);     // 16-byte alignment
    OKC(memcmp(a, b, sizeof *a) == 0);                            // a refused replacement leaves the map alone

    // what frameworks also ask: a 128-byte swizzle over 32 floats, five dimensions with NaN fill, 32-byte interleave
    const cuuint32_t box128[2] = { 32, 8 };
    OKC(tiled(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, buf, dims, strides, box128, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS);
    OKC(tiled(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, buf, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
              CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) == CUDA_SUCCESS);
    OKC(tiled(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, buf, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_32B,
              CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS);

    // refusals: CUDA_ERROR_INVALID_VALUE, as documented
    const CUresult bad = CUDA_ERROR_INVALID_VALUE;
#define REFUSED(...) OKC(tiled(__VA_ARGS__) == bad)
    const CUtensorMapDataType F = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    const CUtensorMapInterleave NO = CU_TENSOR_MAP_INTERLEAVE_NONE;
    const CUtensorMapSwizzle NS = CU_TENSOR_MAP_SWIZZLE_NONE;
    const CUtensorMapFloatOOBfill NF = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
    REFUSED(c, F, 0, buf, dims, strides, box, steps, NO, NS, NF);                         // rank 0
    REFUSED(c, F, 6, buf, dims, strides, box, steps, NO, NS, NF);                         // rank above 5
    REFUSED(c, F, 2, buf + 8, dims, strides, box, steps, NO, NS, NF);                     // address 8-aligned
    REFUSED((CUtensorMap *)((char *)&maps[3] + 32), F, 2, buf, dims, strides, box, steps, NO, NS, NF);  // map 32-aligned
    REFUSED(c, (CUtensorMapDataType)16, 2, buf, dims, strides, box, steps, NO, NS, NF);   // not a data type
    const cuuint64_t dims0[2] = { 64, 0 }, odd_stride[1] = { 264 }, huge_stride[1] = { 1ull << 40 };
    REFUSED(c, F, 2, buf, dims0, strides, box, steps, NO, NS, NF);                        // a size of 0
    REFUSED(c, F, 2, buf, dims, odd_stride, box, steps, NO, NS, NF);                      // stride not 16-aligned
    REFUSED(c, F, 2, buf, dims, huge_stride, box, steps, NO, NS, NF);                     // stride of 2^40
    const cuuint32_t box0[2] = { 16, 0 }, box257[2] = { 16, 257 }, box12b[2] = { 3, 8 }, step0[2] = { 1, 0 },
                     step9[2] = { 1, 9 };
    REFUSED(c, F, 2, buf, dims, strides, box0, steps, NO, NS, NF);                        // a box of 0
    REFUSED(c, F, 2, buf, dims, strides, box257, steps, NO, NS, NF);                      // a box above 256
    REFUSED(c, F, 2, buf, dims, strides, box12b, steps, NO, NS, NF);                      // inner box of 12 bytes
    REFUSED(c, F, 2, buf, dims, strides, box, step0, NO, NS, NF);                         // element stride 0
    REFUSED(c, F, 2, buf, dims, strides, box, step9, NO, NS, NF);                         // element stride 9
    REFUSED(c, F, 2, buf, dims, strides, box128, steps, NO, CU_TENSOR_MAP_SWIZZLE_32B, NF);   // 128 bytes > 32B span
    // cuda.h: 32-byte interleave needs the 32-byte swizzle; NVIDIA's driver 580.159 takes none (H100, GPU run 3) and
    // the 64-byte one (H200, GPU run 5) as well
    OKC(tiled(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, buf, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_32B, NS,
              NF) == CUDA_SUCCESS);
    OKC(tiled(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, buf, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_32B,
              CU_TENSOR_MAP_SWIZZLE_64B, NF) == CUDA_SUCCESS);
    REFUSED(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, buf, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_16B, NS,
            NF);                                                                          // interleave below rank 3
    REFUSED(c, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, buf, dims, strides, box, steps, NO, NS,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);                           // NaN fill of bytes
    OKC(cuTensorMapEncodeTiled(NULL, F, 2, (void *)buf, dims, strides, box, steps, NO, NS,
                               CU_TENSOR_MAP_L2_PROMOTION_NONE, NF) == bad);

    // im2col: an NHWC float16 activation (C 16, W 8, H 8, N 2), a 3 x 3 filter with padding 1
    const cuuint64_t nhwc[4] = { 16, 8, 8, 2 }, nhwc_strides[3] = { 32, 256, 2048 };
    const int lower[2] = { -1, -1 }, upper[2] = { -1, -1 }, far[2] = { -129, -1 };
    const cuuint32_t steps4[4] = { 1, 1, 1, 1 };
    DCHECK(cuTensorMapEncodeIm2col(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)buf, nhwc, nhwc_strides, lower,
                                   upper, 16, 64, steps4, NO, NS, CU_TENSOR_MAP_L2_PROMOTION_NONE, NF));
    OKC(memcmp(c, &zero, sizeof zero) != 0);
    OKC(cuTensorMapEncodeIm2col(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)buf, nhwc, nhwc_strides, lower, upper,
                                16, 64, steps4, NO, NS, CU_TENSOR_MAP_L2_PROMOTION_NONE, NF) == bad);   // rank 2
    OKC(cuTensorMapEncodeIm2col(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)buf, nhwc, nhwc_strides, far, upper,
                                16, 64, steps4, NO, NS, CU_TENSOR_MAP_L2_PROMOTION_NONE, NF) == bad);   // corner -129
    OKC(cuTensorMapEncodeIm2col(c, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)buf, nhwc, nhwc_strides, lower, upper,
                                257, 64, steps4, NO, NS, CU_TENSOR_MAP_L2_PROMOTION_NONE, NF) == bad);  // 257 channels

    DCHECK(cuMemFree(buf));
    DCHECK(cuDevicePrimaryCtxRelease(dev));
    printf("OK %ld\n", checks);
    return 0;
}
