/* cuBLAS's host <-> device copy helpers: cublasSetVector/GetVector (strided elements) and cublasSetMatrix/GetMatrix
 * (column-major blocks with leading dimensions), with their Async and _64 forms. A strided vector is a 2D copy of
 * one-element rows; a matrix is a 2D copy of rows*elemSize-byte columns. The synchronous forms return once the
 * host memory may be reused (a set is sent in order before any later call; a get waits for the bytes), like
 * cuBLAS's. The device side must lie inside one allocation of one GPU. */
#include "vcublas.h"

/* One strided/pitched copy: count chunks of `width` bytes, host pitch hp, device pitch dp (all in bytes). */
static pvb_status copy(int to_device, const void *host, int64_t hp, const void *dev, int64_t dp, int64_t width,
                       int64_t count, cudaStream_t s)
{
    if (count == 0 || width == 0)
        return PVB_CUBLAS_STATUS_SUCCESS;
    struct pv_device *d;
    if (pv_dev_range(dev, (size_t)(dp * (count - 1) + width), &d) != 0)
        return PVB_CUBLAS_STATUS_MAPPING_ERROR;          /* not device memory of one allocation */
    uint64_t stream = 0;
    struct pv_device *sdev = NULL;
    if (pv_stream_resolve(s, d, &stream, &sdev) != PV_SUCCESS || sdev != d)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    cudaError_t err = to_device
        ? pv_h2d_2d(d, (uint64_t)(uintptr_t)dev, (size_t)dp, host, (size_t)hp, (size_t)width, (size_t)count, stream)
        : pv_d2h_2d(d, (char *)host, (size_t)hp, (uint64_t)(uintptr_t)dev, (size_t)dp, (size_t)width,
                    (size_t)count, stream);
    return err == PV_SUCCESS ? PVB_CUBLAS_STATUS_SUCCESS : PVB_CUBLAS_STATUS_MAPPING_ERROR;
}

static pvb_status vector(int to_device, int64_t n, int64_t size, const void *x, int64_t incx, const void *y,
                         int64_t incy, cudaStream_t s)
{
    if (incx <= 0 || incy <= 0 || size <= 0)             /* cuBLAS: incx, incy, elemSize <= 0 */
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    if (n <= 0)
        return PVB_CUBLAS_STATUS_SUCCESS;
    /* x is the source, y the destination: host and device swap places between Set and Get. */
    return to_device ? copy(1, x, incx * size, y, incy * size, size, n, s)
                     : copy(0, y, incy * size, x, incx * size, size, n, s);
}

static pvb_status matrix(int to_device, int64_t rows, int64_t cols, int64_t size, const void *a, int64_t lda,
                         const void *b, int64_t ldb, cudaStream_t s)
{
    /* cuBLAS: rows, cols < 0 or elemSize, lda, ldb <= 0; a leading dimension below rows would overlap columns. */
    if (rows < 0 || cols < 0 || size <= 0 || lda <= 0 || ldb <= 0 || lda < rows || ldb < rows)
        return PVB_CUBLAS_STATUS_INVALID_VALUE;
    return to_device ? copy(1, a, lda * size, b, ldb * size, rows * size, cols, s)
                     : copy(0, b, ldb * size, a, lda * size, rows * size, cols, s);
}

#define PVB_VECTOR(name, dir, it, stream_param, stream)                                                       \
    PV_API pvb_status name(it n, it elemSize, const void *x, it incx, void *y, it incy stream_param)         \
    {                                                                                                        \
        return vector(dir, n, elemSize, x, incx, y, incy, stream);                                           \
    }
#define PVB_MATRIX(name, dir, it, stream_param, stream)                                                       \
    PV_API pvb_status name(it rows, it cols, it elemSize, const void *A, it lda, void *B, it ldb stream_param) \
    {                                                                                                        \
        return matrix(dir, rows, cols, elemSize, A, lda, B, ldb, stream);                                    \
    }
#define PVB_SYNC
#define PVB_ASYNC , cudaStream_t stream

PVB_VECTOR(cublasSetVector, 1, int, PVB_SYNC, NULL)
PVB_VECTOR(cublasGetVector, 0, int, PVB_SYNC, NULL)
PVB_VECTOR(cublasSetVector_64, 1, int64_t, PVB_SYNC, NULL)
PVB_VECTOR(cublasGetVector_64, 0, int64_t, PVB_SYNC, NULL)
PVB_VECTOR(cublasSetVectorAsync, 1, int, PVB_ASYNC, stream)
PVB_VECTOR(cublasGetVectorAsync, 0, int, PVB_ASYNC, stream)
PVB_VECTOR(cublasSetVectorAsync_64, 1, int64_t, PVB_ASYNC, stream)
PVB_VECTOR(cublasGetVectorAsync_64, 0, int64_t, PVB_ASYNC, stream)
PVB_MATRIX(cublasSetMatrix, 1, int, PVB_SYNC, NULL)
PVB_MATRIX(cublasGetMatrix, 0, int, PVB_SYNC, NULL)
PVB_MATRIX(cublasSetMatrix_64, 1, int64_t, PVB_SYNC, NULL)
PVB_MATRIX(cublasGetMatrix_64, 0, int64_t, PVB_SYNC, NULL)
PVB_MATRIX(cublasSetMatrixAsync, 1, int, PVB_ASYNC, stream)
PVB_MATRIX(cublasGetMatrixAsync, 0, int, PVB_ASYNC, stream)
PVB_MATRIX(cublasSetMatrixAsync_64, 1, int64_t, PVB_ASYNC, stream)
PVB_MATRIX(cublasGetMatrixAsync_64, 0, int64_t, PVB_ASYNC, stream)
