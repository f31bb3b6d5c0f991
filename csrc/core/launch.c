/* Launching a kernel on a device, shared by every API library: the configuration checks CUDA makes, the kernel's
 * info on that device (its module is loaded there on first use), the parameter buffer (packed from one pointer
 * per parameter, or taken as already packed), and the fire-and-forget LAUNCH. Also the occupancy computation,
 * from the module-load attributes and the device snapshot, and launches packed now and sent later (graph nodes). */
#include <stdlib.h>
#include <string.h>

#include "pv_state.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_registry.h"
#include "pv_hostmem.h"
#include "pv_launch.h"
#include "pv_graph.h"

/* The attributes set device-wide on f for d, applied to its kinfo there where they differ (a kinfo made after a
 * device reset starts from the module-load attributes): as the driver applies a CUkernel's attributes in each new
 * context where the kernel is used. */
static cudaError_t apply_kept(struct pv_func *f, struct pv_device *d, struct pv_kinfo *ki)
{
    struct pv_func_kept *k = atomic_load(&f->kept);
    unsigned set = k ? atomic_load(&k->set[d->index]) : 0;
    cudaError_t err = PV_SUCCESS;
    int64_t v;
    if ((set & 1) && (v = atomic_load(&k->max_dyn_shared[d->index])) != atomic_load(&ki->max_dyn_shared))
        err = pv_func_set_attr(d, ki, PV_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE, (int)v, NULL);
    if (err == PV_SUCCESS && (set & 2) && (v = atomic_load(&k->carveout[d->index])) != atomic_load(&ki->carveout))
        err = pv_func_set_attr(d, ki, PV_FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT, (int)v, NULL);
    return err;
}

cudaError_t pv_kinfo_get(struct pv_func *f, struct pv_device *d, struct pv_kinfo **out)
{
    cudaError_t err = pv_module_ensure(f->fb, d);
    if (err != PV_SUCCESS)
        return err;
    if (!f->dev[d->index]) {
        pv_log("kernel %s is not in the module loaded on GPU%d (%s:%d)", f->name, d->index, d->conn->host,
               d->conn->port);
        return PV_cudaErrorInvalidDeviceFunction;
    }
    *out = f->dev[d->index];
    return apply_kept(f, d, *out);
}

static int config_ok(const struct pv_device *d, dim3 grid, dim3 block)
{
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    return grid.x && grid.y && grid.z && threads && threads <= (uint64_t)d->max_tpb &&
           block.x <= (unsigned)d->max_block[0] && block.y <= (unsigned)d->max_block[1] &&
           block.z <= (unsigned)d->max_block[2] && grid.x <= (unsigned)d->max_grid[0] &&
           grid.y <= (unsigned)d->max_grid[1] && grid.z <= (unsigned)d->max_grid[2];
}

/* CUDA's launch checks of f on d for this configuration; *ki its kernel info there. */
static cudaError_t launch_check(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem,
                                struct pv_kinfo **ki)
{
    if (!config_ok(d, grid, block))
        return PV_cudaErrorInvalidConfiguration;
    cudaError_t err = pv_kinfo_get(f, d, ki);
    if (err != PV_SUCCESS)
        return err;
    if ((*ki)->max_threads > 0 && (uint64_t)block.x * block.y * block.z > (uint64_t)(*ki)->max_threads)
        return PV_cudaErrorLaunchOutOfResources;
    /* More dynamic shared memory than the default (48 KiB minus static) needs the attribute raised first. */
    if (shmem > (size_t)(*ki)->max_dyn_shared)
        return PV_cudaErrorInvalidValue;
    return PV_SUCCESS;
}

/* The parameter buffer into buf (ki->param_bytes, zeroed by the caller): packed from args or copied from packed. */
/* NVIDIA's driver takes CU_LAUNCH_PARAM_BUFFER_SIZE only as the kernel's parameter size, the end of its last
 * parameter (no tail padding): a larger one is CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (an H100, GPU run 2, for a buffer
 * padded from 12 to 16 bytes; LLVM's offload runtime found the same: llvm-project PR 172249). A shorter one cannot
 * hold the parameters: refused as invalid (no driver's answer observed). */
static cudaError_t packed_size(const struct pv_kinfo *ki, size_t packed_len)
{
    if (packed_len > ki->param_bytes)
        return PV_cudaErrorLaunchOutOfResources;
    return packed_len < ki->param_bytes ? PV_cudaErrorInvalidValue : PV_SUCCESS;
}

static cudaError_t fill_params(const struct pv_kinfo *ki, void **args, const void *packed, size_t packed_len,
                               char *buf)
{
    if (packed) {
        cudaError_t err = packed_size(ki, packed_len);
        if (err != PV_SUCCESS)
            return err;
        memcpy(buf, packed, ki->param_bytes);
        return PV_SUCCESS;
    }
    if (ki->nparams && !args)
        return PV_cudaErrorInvalidValue;
    for (int i = 0; i < ki->nparams; i++)
        memcpy(buf + ki->params[i][0], args[i], ki->params[i][1]);
    return PV_SUCCESS;
}

cudaError_t pv_cooperative_check(const struct pv_device *d, const struct pv_kinfo *ki, dim3 grid, dim3 block,
                                 size_t shmem)
{
    uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z;
    uint64_t per_sm = (uint64_t)pv_occupancy(d, ki, (int)(block.x * block.y * block.z), shmem);
    return blocks <= per_sm * (uint64_t)(d->sms > 0 ? d->sms : 0) ? PV_SUCCESS : PV_cudaErrorCooperativeLaunchTooLarge;
}

static cudaError_t send_launch(struct pv_device *d, const struct pv_kinfo *ki, dim3 grid, dim3 block, size_t shmem,
                               uint64_t stream, const void *params, int cooperative)
{
    return cooperative ? pv_send_LAUNCH_COOPERATIVE(d, ki->func_id, grid, block, shmem, stream, params, ki->param_bytes)
                       : pv_send_LAUNCH(d, ki->func_id, grid, block, shmem, stream, params, ki->param_bytes);
}

cudaError_t pv_launch(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, uint64_t stream,
                      void **args, const void *packed, size_t packed_len, int cooperative)
{
    struct pv_kinfo *ki;
    cudaError_t err = launch_check(f, d, grid, block, shmem, &ki);
    if (err == PV_SUCCESS && cooperative)
        err = pv_cooperative_check(d, ki, grid, block, shmem);
    if (err != PV_SUCCESS)
        return err;
    int hits = 0;
    if (packed) {
        if ((err = packed_size(ki, packed_len)) != PV_SUCCESS)
            return err;
        if ((err = pv_host_translate(d, ki, (char *)packed, 1, &hits)) != PV_SUCCESS)   /* dry: reads only */
            return err;
        if (!hits)
            return send_launch(d, ki, grid, block, shmem, stream, packed, cooperative);
    }
    char small[1024];
    char *buf = ki->param_bytes <= sizeof small ? small : calloc(1, ki->param_bytes);
    if (!buf)
        return PV_cudaErrorMemoryAllocation;
    if (buf == small)
        memset(small, 0, ki->param_bytes);
    err = fill_params(ki, args, packed, packed_len, buf);
    if (err == PV_SUCCESS)      /* pinned host memory named by a parameter: its device copy's address */
        err = pv_host_translate(d, ki, buf, 0, &hits);
    if (err == PV_SUCCESS)
        err = send_launch(d, ki, grid, block, shmem, stream, buf, cooperative);
    if (buf != small)
        free(buf);
    return err;
}

cudaError_t pv_launch_pack(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, size_t shmem, void **args,
                           const void *packed, size_t packed_len, char **buf, size_t *len)
{
    struct pv_kinfo *ki;
    cudaError_t err = launch_check(f, d, grid, block, shmem, &ki);
    if (err != PV_SUCCESS)
        return err;
    char *b = calloc(1, ki->param_bytes ? ki->param_bytes : 1);
    if (!b)
        return PV_cudaErrorMemoryAllocation;
    int hits;
    err = fill_params(ki, args, packed, packed_len, b);
    if (err == PV_SUCCESS)
        err = pv_host_translate(d, ki, b, 0, &hits);
    if (err != PV_SUCCESS) {
        free(b);
        return err;
    }
    *buf = b;
    *len = ki->param_bytes;
    return PV_SUCCESS;
}

/* Largest static + dynamic shared memory a block may opt in to on d (cudaDevAttrMaxSharedMemoryPerBlockOptin). */
int64_t pv_smem_optin(const struct pv_device *d)
{
    int v;
    if (pv_dev_attr(d, PV_cudaDevAttrMaxSharedMemoryPerBlockOptin, &v) == 0 && v > 0)
        return v;
    return (int64_t)d->smem_per_block;
}

/* Shared memory as CUDA's occupancy calculator (cuda_occupancy.h) accounts it: a block is allocated its static and
 * dynamic shared memory plus what the driver reserves per block (cudaDevAttrReservedSharedMemoryPerBlock, from
 * sm_80), in steps of 256 bytes (128 from sm_80), at most the opt-in limit plus the reserve. The SM's share is the
 * function's carveout preference (default: all of it) rounded up to a size the SM can be configured to; a preference
 * too small for one block gives way to it. */
static size_t smem_step(const struct pv_device *d) { return d->major >= 8 ? 128 : 256; }

static size_t smem_reserved(const struct pv_device *d)
{
    int v;
    return pv_dev_attr(d, PV_cudaDevAttrReservedSharedMemoryPerBlock, &v) == 0 && v > 0 ? (size_t)v : 0;
}

static size_t smem_block_limit(const struct pv_device *d) { return (size_t)pv_smem_optin(d) + smem_reserved(d); }

static size_t smem_alloc(const struct pv_device *d, const struct pv_kinfo *ki, size_t dyn)
{
    size_t step = smem_step(d);
    return ((size_t)ki->shared + smem_reserved(d) + dyn + step - 1) / step * step;
}

/* The shared memory sizes (KiB) an SM of the architecture can be configured to, ascending (cuda_occupancy.h,
 * cudaOccAlignUpShmemSizeVoltaPlus); 0 entries for an architecture the header does not know. */
static size_t smem_configs(const struct pv_device *d, const int **kib)
{
    static const int turing[] = {32, 64}, volta[] = {0, 8, 16, 32, 64, 96}, ga100[] = {0, 8, 16, 32, 64, 100, 132, 164},
                     ga10x[] = {0, 8, 16, 32, 64, 100}, big[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};
#define PV_CONFIGS(a) (*kib = (a), sizeof(a) / sizeof((a)[0]))
    if (d->major == 7)
        return d->minor == 5 ? PV_CONFIGS(turing) : PV_CONFIGS(volta);
    if (d->major == 8)
        return d->minor == 0 || d->minor == 7 ? PV_CONFIGS(ga100) : PV_CONFIGS(ga10x);
    if (d->major == 9 || ((d->major == 10 || d->major == 11) && (d->minor == 0 || d->minor == 1 || d->minor == 3)))
        return PV_CONFIGS(big);
    if (d->major == 12 && (d->minor == 0 || d->minor == 1))
        return PV_CONFIGS(ga10x);
#undef PV_CONFIGS
    return 0;
}

/* `bytes` rounded up to a size the SM can be configured to, as the driver takes a carveout preference (a hint);
 * in allocation steps where the architecture is unknown or `bytes` is larger than any. */
static size_t smem_config_up(const struct pv_device *d, size_t bytes)
{
    const int *kib = NULL;
    size_t n = smem_configs(d, &kib);
    for (size_t i = 0; i < n; i++)
        if (bytes <= (size_t)kib[i] * 1024)
            return (size_t)kib[i] * 1024;
    size_t step = smem_step(d);
    return (bytes + step - 1) / step * step;
}

/* The SM's shared memory the function's carveout preference asks for (default: all of it), as the driver sizes it:
 * preference percent of it, rounded down to a byte, then up to a configurable size. */
static size_t smem_preferred(const struct pv_device *d, const struct pv_kinfo *ki)
{
    int64_t carveout = atomic_load(&ki->carveout);
    if (carveout < 0 || carveout > 100)
        return smem_config_up(d, d->smem_per_sm);
    return smem_config_up(d, (size_t)d->smem_per_sm * (size_t)carveout / 100);
}

int pv_occupancy(const struct pv_device *d, const struct pv_kinfo *ki, int block, size_t dyn)
{
    int maxt = ki->max_threads > 0 && ki->max_threads < d->max_tpb ? (int)ki->max_threads : d->max_tpb;
    if (block <= 0 || block > maxt)
        return 0;
    int warp = d->warp > 0 ? d->warp : 32;
    int warps = (block + warp - 1) / warp;
    int limit = d->max_tpm / (warps * warp);
    if (d->max_blocks_per_sm > 0 && d->max_blocks_per_sm < limit)
        limit = d->max_blocks_per_sm;
    if (ki->regs > 0 && d->regs_per_sm > 0) {
        long per_warp = ((ki->regs * warp + 255) / 256) * 256;
        long by_regs = d->regs_per_sm / (per_warp * warps);
        if (by_regs < limit)
            limit = (int)by_regs;
    }
    if (dyn > (size_t)ki->max_dyn_shared)
        return 0;                                  /* more than the function allows itself */
    size_t smem = smem_alloc(d, ki, dyn);
    if (smem > smem_block_limit(d))
        return 0;
    if (smem > 0) {
        size_t share = smem_preferred(d, ki);
        long by_smem = (long)((share >= smem ? share : smem) / smem);
        if (by_smem < limit)
            limit = (int)by_smem;
    }
    return limit > 0 ? limit : 0;
}

/* cudaOccupancyAvailableDynamicSMemPerBlock / cuOccupancyAvailableDynamicSMemPerBlock, by the driver's closed form
 * (cuda_occupancy.h, cudaOccAvailableDynamicSMemPerBlock), not by the occupancy's definition: cudaErrorInvalidValue
 * when nblocks do not fit even without dynamic shared memory; otherwise one block may have the per-block limit
 * (opt-in, plus the driver's reserve from sm_80), several share the preferred share of the SM evenly in allocation
 * steps (a preference of 0 counts as the smallest configurable size), capped at the per-block limit; less the
 * function's static shared memory but NOT the reserve, capped at the function's maximum dynamic size. So from sm_80
 * the answer can exceed what nblocks really fit by the reserve: an H100 answered 46592 for 5 blocks of 32 threads
 * (233472 / 5 in 128-byte steps; real-GPU run 3, api_occupancy natively), where 5 blocks fit with 45568. */
cudaError_t pv_occupancy_dyn_smem(const struct pv_device *d, const struct pv_kinfo *ki, int nblocks, int block,
                                  size_t *out)
{
    if (nblocks <= 0 || pv_occupancy(d, ki, block, 0) < nblocks)
        return PV_cudaErrorInvalidValue;
    size_t limit = smem_block_limit(d), per_sm = limit;
    if (nblocks > 1) {
        per_sm = smem_preferred(d, ki);
        if (per_sm == 0)
            per_sm = smem_config_up(d, 1);
    }
    size_t avail = per_sm / (size_t)nblocks / smem_step(d) * smem_step(d);
    if (avail > limit)
        avail = limit;
    size_t dyn = avail > (size_t)ki->shared ? avail - (size_t)ki->shared : 0;
    if (dyn > (size_t)ki->max_dyn_shared)
        dyn = (size_t)ki->max_dyn_shared;
    *out = dyn;
    return PV_SUCCESS;
}

int pv_func_cluster_attr(int attr)
{
    return attr >= PV_FUNC_ATTR_CLUSTER_FIRST && attr <= PV_FUNC_ATTR_CLUSTER_SCHEDULING_POLICY;
}

/* Remembers an attribute set device-wide on f for d (struct pv_func_kept). */
static void keep_attr(struct pv_func *f, struct pv_device *d, int attr, int value)
{
    struct pv_func_kept *k = atomic_load(&f->kept);
    if (!k) {
        struct pv_func_kept *fresh = calloc(1, sizeof *fresh);
        if (!fresh) {
            pv_log("kernel %s: no memory to keep an attribute across a device reset", f->name);
            return;
        }
        if (atomic_compare_exchange_strong(&f->kept, &k, fresh))
            k = fresh;
        else
            free(fresh);                       /* another thread installed one: k is it */
    }
    int max_dyn = attr == PV_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE;
    atomic_store(max_dyn ? &k->max_dyn_shared[d->index] : &k->carveout[d->index], value);
    atomic_fetch_or(&k->set[d->index], max_dyn ? 1u : 2u);
}

/* cudaFuncSetAttribute / cuFuncSetAttribute / cuKernelSetAttribute: validated here (the dynamic shared memory a block
 * may opt in to, the carveout range, the cluster attributes on sm_90 and later; anything else is not settable),
 * recorded in ki, forwarded fire-and-forget; with `device_wide` (the kernel's pv_func: the runtime's and
 * cuKernelSetAttribute's semantics, not cuFuncSetAttribute's per-context one) the shared memory ones also kept for the
 * device's later contexts. */
cudaError_t pv_func_set_attr(struct pv_device *d, struct pv_kinfo *ki, int attr, int value, struct pv_func *device_wide)
{
    if (attr == PV_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE) {
        if (value < 0 || ki->shared + (int64_t)value > pv_smem_optin(d))
            return PV_cudaErrorInvalidValue;
    } else if (attr == PV_FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT) {
        if (value < -1 || value > 100)
            return PV_cudaErrorInvalidValue;
    } else if (pv_func_cluster_attr(attr)) {
        /* thread block clusters: a GPU of compute capability 9.0 or later (its driver checks the values again);
         * before, not a settable attribute */
        int major = 0;
        if (pv_dev_attr(d, PV_cudaDevAttrComputeCapabilityMajor, &major) != 0 ||
            major < PV_FUNC_ATTR_CLUSTER_MIN_MAJOR || value < 0 ||
            (attr == PV_FUNC_ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED && value > 1) ||
            (attr == PV_FUNC_ATTR_CLUSTER_SCHEDULING_POLICY && value > 2))
            return PV_cudaErrorInvalidValue;
    } else {
        return PV_cudaErrorInvalidValue;       /* not a settable attribute */
    }
    cudaError_t err = pv_send_FUNC_SET_ATTR(d, ki->func_id, attr, value);
    if (err != PV_SUCCESS)
        return err;
    if (attr == PV_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE)
        ki->max_dyn_shared = value;
    else if (attr == PV_FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT)
        ki->carveout = value;
    else
        ki->cluster[attr - PV_FUNC_ATTR_CLUSTER_FIRST] = value;     /* (not kept across a reset: per context) */
    if (device_wide && !pv_func_cluster_attr(attr))
        keep_attr(device_wide, d, attr, value);
    return PV_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ deferred launches */
#define PARAM_END 0
#define PARAM_BUFFER_POINTER 1
#define PARAM_BUFFER_SIZE 2

cudaError_t pv_launch_extra(void **extra, const void **buf, size_t *len)
{
    const void *b = NULL;
    const size_t *n = NULL;
    for (int i = 0; i < 64 && (uintptr_t)extra[i] != PARAM_END; i += 2) {
        if ((uintptr_t)extra[i] == PARAM_BUFFER_POINTER)
            b = extra[i + 1];
        else if ((uintptr_t)extra[i] == PARAM_BUFFER_SIZE)
            n = extra[i + 1];
        else
            return PV_cudaErrorInvalidValue;
    }
    if (!b || !n)
        return PV_cudaErrorInvalidValue;
    *buf = b;
    *len = *n;
    return PV_SUCCESS;
}

cudaError_t pv_launch_prepare(struct pv_func *f, struct pv_device *d, dim3 grid, dim3 block, void **args,
                              void **extra, size_t shmem, struct pv_kernel_launch *out)
{
    size_t xsize = 0;
    const void *xbuf = NULL;
    if (args && extra)
        return PV_cudaErrorInvalidValue;
    if (extra) {
        cudaError_t err = pv_launch_extra(extra, &xbuf, &xsize);
        if (err != PV_SUCCESS)
            return err;
    }
    char *buf;
    size_t len;
    cudaError_t err = pv_launch_pack(f, d, grid, block, shmem, args, xbuf, xsize, &buf, &len);
    if (err == PV_SUCCESS)
        *out = (struct pv_kernel_launch){ f, d->index, grid, block, shmem, buf, len, 0 };
    return err;
}

cudaError_t pv_launch_send(const struct pv_kernel_launch *k, uint64_t stream)
{
    struct pv_device *d = pv_device(k->dev);
    if (!d)
        return PV_cudaErrorInvalidDevice;
    return pv_launch(k->func, d, k->grid, k->block, k->shmem, stream, NULL, k->params ? k->params : "",
                     k->param_bytes, k->cooperative);
}

void pv_launch_free(struct pv_kernel_launch *k)
{
    free(k->params);
    k->params = NULL;
}
