/* The driver's error log (cuLogs*, CUDA 12.9): PyTorch registers a callback at start-up. libvcuda's own messages go
 * to stderr one line each (pv_log), so its log buffer stays empty: callbacks are kept (and never called), iterators
 * are at the empty buffer's tail, dumps write nothing. */
#include <stdio.h>
#include <stdlib.h>

#include "driver.h"

typedef void (*CUlogsCallback)(void *data, int level, char *message, size_t length);
struct log_callback { CUlogsCallback fn; void *data; uint32_t magic; };
#define LOG_CALLBACK_MAGIC 0x4c4f4743u

PV_API CUresult cuLogsRegisterCallback(CUlogsCallback fn, void *data, struct log_callback **out)
{
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    struct log_callback *cb = malloc(sizeof *cb);
    if (!cb)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *cb = (struct log_callback){ fn, data, LOG_CALLBACK_MAGIC };
    if (out)
        *out = cb;
    return CUDA_SUCCESS;
}

PV_API CUresult cuLogsUnregisterCallback(struct log_callback *cb)
{
    if (!cb || cb->magic != LOG_CALLBACK_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    cb->magic = 0;
    free(cb);
    return CUDA_SUCCESS;
}

PV_API CUresult cuLogsCurrent(unsigned *iterator, unsigned flags)
{
    if (!iterator || flags)
        return CUDA_ERROR_INVALID_VALUE;
    *iterator = 0;
    return CUDA_SUCCESS;
}

PV_API CUresult cuLogsDumpToFile(unsigned *iterator, const char *path, unsigned flags)
{
    if (!path || flags)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(path, "a");
    if (!f)
        return CUDA_ERROR_INVALID_VALUE;
    fclose(f);
    return CUDA_SUCCESS;
}

PV_API CUresult cuLogsDumpToMemory(unsigned *iterator, char *buffer, size_t *size, unsigned flags)
{
    if (!buffer || !size || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (*size)
        buffer[0] = 0;
    *size = 0;
    return CUDA_SUCCESS;
}
