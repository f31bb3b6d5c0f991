/* Refused modules at synchronization. A kernel whose module the daemon refused (no PTX the emulated GPU can run,
 * an instruction it does not implement) fails where it is used: the launch, or, for NVIDIA's runtime that loads
 * fatbins lazily, the kernel lookups of the library's first use. Programs and libraries do ignore that error (CuPy
 * calls CUB without looking at its status) and then read an output no kernel wrote; and NVIDIA's runtime keeps the
 * failure to itself, so later launches of those kernels fail without reaching libvcuda at all. So a refusal met at
 * a use is kept on the device, sticky like a kernel fault on a GPU: every later synchronizing call there (a
 * blocking copy, a stream/event/device synchronize) answers with it instead of success, until the device is
 * reset. An explicit load (cuModuleLoadData & co.) returns its refusal to its caller and latches nothing; nor does a
 * real GPU's cudaErrorNoKernelImageForDevice (no code for its architecture), which CUDA itself reports only where
 * the kernel is used.
 *
 * Why a module was refused is said once per library: a fatbin that holds only SASS (cubins for some architectures,
 * no PTX), or a cubin by itself, cannot run on the emulated GPU, which runs PTX; the line names the library the image
 * came from (the shared object holding it: libtorch_cuda.so, libcusparse, ...) and the architectures it has. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "pv_state.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_refusal.h"

static int emulated(const struct pv_device *d) { return strstr(d->name, "emulated") != NULL; }

void pv_refusal_latch(struct pv_device *d, cudaError_t err)
{
    /* A real GPU without code for its architecture in the image: that is the driver's own answer, which CUDA gives
     * where the kernel is used and keeps nothing of; libraries rely on it (cuDNN looks at kernels of every
     * architecture it ships and drops the engines whose kernels fail), so latching it would fail their work. */
    if (err == PV_cudaErrorNoKernelImageForDevice && !emulated(d))
        return;
    int none = 0;
    if (atomic_compare_exchange_strong(&d->refused, &none, (int)err))   /* the first one is reported */
        pv_log("GPU%d (%s:%d): a kernel of a refused module was used (%s); every synchronization reports it from now on "
               "(until a device reset)",
               d->index, d->conn->host, d->conn->port, pv_err_name(err));
}

cudaError_t pv_sync_result(struct pv_device *d, cudaError_t err)
{
    int refused = atomic_load_explicit(&d->refused, memory_order_relaxed);
    return err == PV_SUCCESS && refused ? (cudaError_t)refused : err;
}

#define CONTAINER_MAGIC 0xBA55ED50u
#define WRAPPER_MAGIC 0x466243B1u
enum { KIND_PTX = 1, KIND_ELF = 2 };

/* Counts the PTX and SASS entries of the fatbin containers at image (all of them, back to back); SASS
 * architectures into archs (comma-separated, distinct). 0 if image is not a fatbin. */
static int scan(const unsigned char *p, size_t size, int *ptx, int *sass, char *archs, size_t n)
{
    uint32_t magic;
    if (size >= 16 && (memcpy(&magic, p, 4), magic == WRAPPER_MAGIC))
        return 0;                          /* the registry keeps containers; a wrapper here is not expected */
    size_t off = 0;
    int found = 0;
    while (off + 16 <= size && (memcpy(&magic, p + off, 4), magic == CONTAINER_MAGIC)) {
        uint16_t hsize;
        uint64_t body;
        memcpy(&hsize, p + off + 6, 2);
        memcpy(&body, p + off + 8, 8);
        size_t e = off + hsize, end = off + hsize + body;
        if (end > size || end < e)
            break;
        found = 1;
        while (e + 64 <= end) {
            uint16_t kind;
            uint32_t ehsize, arch;
            uint64_t payload;
            memcpy(&kind, p + e, 2);
            memcpy(&ehsize, p + e + 4, 4);
            memcpy(&payload, p + e + 8, 8);
            memcpy(&arch, p + e + 28, 4);
            if (kind == KIND_PTX)
                (*ptx)++;
            else if (kind == KIND_ELF) {
                char one[16];
                snprintf(one, sizeof one, "sm_%u", arch);
                (*sass)++;
                if (!strstr(archs, one) && strlen(archs) + strlen(one) + 2 < n)
                    strcat(strcat(archs, *archs ? ", " : ""), one);
            }
            if (!ehsize || e + ehsize + payload <= e)
                break;
            e += ehsize + payload;
        }
        off = end;
    }
    return found;
}

static char said[64][128];
static int nsaid;
static pthread_mutex_t said_mu = PTHREAD_MUTEX_INITIALIZER;

static int first_time(const char *lib)
{
    pthread_mutex_lock(&said_mu);
    for (int i = 0; i < nsaid; i++)
        if (strcmp(said[i], lib) == 0) {
            pthread_mutex_unlock(&said_mu);
            return 0;
        }
    if (nsaid < 64)
        snprintf(said[nsaid++], sizeof said[0], "%s", lib);
    pthread_mutex_unlock(&said_mu);
    return 1;
}

void pv_explain_refusal(const void *image, size_t size, const void *origin, struct pv_device *d, cudaError_t err)
{
    int ptx = 0, sass = 0;
    char archs[128] = "";
    Dl_info info;
    const char *lib = "the program";
    if (origin && dladdr(origin, &info) && info.dli_fname && *info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        lib = slash ? slash + 1 : info.dli_fname;
    }
    int cubin = size >= 4 && memcmp(image, "\177ELF", 4) == 0;      /* a cubin by itself: SASS */
    if (cubin)
        snprintf(archs, sizeof archs, "a cubin");
    int fatbin = !cubin && scan(image, size, &ptx, &sass, archs, sizeof archs);
    if (err == PV_cudaErrorNoKernelImageForDevice && emulated(d) && (cubin || (fatbin && sass && !ptx))) {
        if (first_time(lib))
            pv_log("%s ships its kernels as SASS only (%s), no PTX: the emulated GPU runs PTX, so %s's kernels "
                   "cannot run on GPU%d (%s:%d) (%s)", lib, archs, lib, d->index, d->conn->host, d->conn->port,
                   pv_err_name(err));
        return;
    }
    char held[192] = "not a fatbin: PTX text or an image pyvgpu does not read";
    if (cubin)
        snprintf(held, sizeof held, "a cubin");
    else if (fatbin)
        snprintf(held, sizeof held, "%d cubin(s)%s%s, %d PTX", sass, *archs ? " for " : "", archs, ptx);
    pv_log("loading a module of %s (%zu bytes) on GPU%d (%s:%d, sm_%d%d) failed: %s; the image holds %s%s", lib, size,
           d->index, d->conn->host, d->conn->port, d->major, d->minor, pv_err_name(err), held,
           err == PV_cudaErrorNoKernelImageForDevice && !emulated(d)
               ? " (the GPU's own answer: the call using it fails, nothing is latched)" : "");
}
