/* The JIT linker (cuLinkCreate/AddData/AddFile/Complete/Destroy), as numba-cuda (through cuda.core) uses it when
 * nvJitLink is not installed. What it links is PTX: one PTX input is the link's result as it is, NUL-terminated;
 * every device takes PTX through cuModuleLoadData (the emulated GPU runs it, a real GPU's driver on the daemon's
 * host compiles it for its own architecture at load). Other inputs (cubins, fatbins, objects, libraries, NVVM IR)
 * and links of several PTX inputs, which need a device linker on the client, are CUDA_ERROR_NOT_SUPPORTED with one
 * line saying so. The JIT options' log buffers are answered empty: nothing is compiled here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

enum { JIT_INFO_LOG_BUFFER = 3, JIT_INFO_LOG_SIZE = 4, JIT_ERROR_LOG_BUFFER = 5, JIT_ERROR_LOG_SIZE = 6 };
enum { JIT_INPUT_CUBIN, JIT_INPUT_PTX, JIT_INPUT_FATBINARY, JIT_INPUT_OBJECT, JIT_INPUT_LIBRARY, JIT_INPUT_NVVM };
static const char *const input_names[] = { "a cubin", "PTX", "a fatbin", "an object", "a library", "NVVM IR" };

#define LINK_MAGIC 0x4c494e4bu
#define MAX_LINK_INPUT ((size_t)1 << 30)
struct link_state {
    uint32_t magic;
    char *ptx;                  /* the one PTX input, NUL-terminated (owned) */
    size_t ptx_len;
    int inputs;
    CUresult failed;            /* the first refused input: the link fails at cuLinkComplete too */
};

static struct link_state *state_of(void *p)
{
    struct link_state *s = p;
    return s && s->magic == LINK_MAGIC ? s : NULL;
}

/* The logs a caller asked for in JIT options: empty (their sizes written back as 0 bytes used). */
static void empty_logs(unsigned n, const int *options, void **values)
{
    for (unsigned i = 0; options && values && i < n; i++) {
        if ((options[i] == JIT_INFO_LOG_BUFFER || options[i] == JIT_ERROR_LOG_BUFFER) && values[i])
            *(char *)values[i] = 0;
    }
    for (unsigned i = 0; options && values && i < n; i++)
        if (options[i] == JIT_INFO_LOG_SIZE || options[i] == JIT_ERROR_LOG_SIZE)
            values[i] = (void *)(uintptr_t)0;
}

PV_API CUresult cuLinkCreate_v2(unsigned n, int *options, void **values, void **out)
{
    CUresult r = out ? drv_ready() : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (n && (!options || !values))
        return CUDA_ERROR_INVALID_VALUE;
    struct link_state *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = LINK_MAGIC;
    empty_logs(n, options, values);
    *out = s;
    return CUDA_SUCCESS;
}

PV_API CUresult cuLinkCreate(unsigned n, int *options, void **values, void **out)
{
    return cuLinkCreate_v2(n, options, values, out);
}

static CUresult refuse(struct link_state *s, const char *what)
{
    static atomic_int once;
    pv_log_once(&once, "cuLinkAddData/AddFile: libvcuda links PTX only (one PTX input); %s cannot be linked "
                "(CUDA_ERROR_NOT_SUPPORTED)", what);
    pv_census_missing("link", "%s", what);
    if (!s->failed)
        s->failed = CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_ERROR_NOT_SUPPORTED;
}

PV_API CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name, unsigned n,
                                 int *options, void **values)
{
    struct link_state *s = state_of(state);
    if (!s || !data || type < JIT_INPUT_CUBIN || type > JIT_INPUT_NVVM)
        return CUDA_ERROR_INVALID_VALUE;
    empty_logs(n, options, values);
    s->inputs++;
    if (type != JIT_INPUT_PTX)
        return refuse(s, input_names[type]);
    if (s->ptx)
        return refuse(s, "a second PTX input");
    /* PTX is text: its length is up to the first NUL within size (size may count the NUL or not). */
    size_t len = strnlen(data, size ? size : MAX_LINK_INPUT);
    if (!len || len >= MAX_LINK_INPUT)
        return CUDA_ERROR_INVALID_PTX;
    if (!(s->ptx = malloc(len + 1)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(s->ptx, data, len);
    s->ptx[len] = 0;
    s->ptx_len = len + 1;
    return CUDA_SUCCESS;
}

PV_API CUresult cuLinkAddData(void *state, int type, void *data, size_t size, const char *name, unsigned n,
                              int *options, void **values)
{
    return cuLinkAddData_v2(state, type, data, size, name, n, options, values);
}

PV_API CUresult cuLinkAddFile_v2(void *state, int type, const char *path, unsigned n, int *options, void **values)
{
    if (!state_of(state) || !path)
        return CUDA_ERROR_INVALID_VALUE;
    void *buf;
    CUresult r = drv_read_file(path, &buf);
    if (r != CUDA_SUCCESS)
        return r;
    r = cuLinkAddData_v2(state, type, buf, strlen(buf) + 1, path, n, options, values);
    free(buf);
    return r;
}

PV_API CUresult cuLinkAddFile(void *state, int type, const char *path, unsigned n, int *options, void **values)
{
    return cuLinkAddFile_v2(state, type, path, n, options, values);
}

PV_API CUresult cuLinkComplete(void *state, void **image, size_t *size)
{
    struct link_state *s = state_of(state);
    if (!s || !image || !size)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->failed)
        return s->failed;
    if (!s->ptx)
        return CUDA_ERROR_INVALID_VALUE;   /* nothing to link */
    *image = s->ptx;
    *size = s->ptx_len;
    return CUDA_SUCCESS;
}

PV_API CUresult cuLinkDestroy(void *state)
{
    struct link_state *s = state_of(state);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    s->magic = 0;
    free(s->ptx);
    free(s);
    return CUDA_SUCCESS;
}
