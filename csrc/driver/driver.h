/* libvcuda's internal declarations: the driver API's types (ABI-compatible with CUDA 13.0's cuda.h; a test checks
 * the structs against the header when it is present) on top of the client core, and the interfaces between the
 * files of csrc/driver. docs/driver.md explains what NVIDIA's runtime needs from this library. */
#ifndef PV_DRIVER_H
#define PV_DRIVER_H

#include "pv_core.h"
#include "curesult_gen.h"
#include "integrity.h"

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct pv_ctx *CUcontext;
typedef struct pv_dmod *CUmodule;      /* a module, or a library: both are a module image in the core's registry */
typedef struct pv_dmod *CUlibrary;
typedef struct pv_func *CUfunction;    /* a kernel of the core's registry; a CUkernel is the same object */
typedef struct pv_func *CUkernel;
typedef cudaStream_t CUstream;
typedef cudaEvent_t CUevent;
typedef struct { char bytes[16]; } CUuuid;

typedef struct {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

typedef struct {
    int id;
    char pad[4];
    union {
        char pad[64];
        int priority;
        int cooperative;
        struct { unsigned x, y, z; } clusterDim;
    } value;
} CUlaunchAttribute;

typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_ARRAY = 3, CU_MEMORYTYPE_UNIFIED = 4 };
enum { CU_LAUNCH_ATTRIBUTE_IGNORE = 0, CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
       CU_LAUNCH_ATTRIBUTE_PRIORITY = 8 };
#define PV_CUDA_VERSION 13000       /* the driver version this library answers as (the runtime needs >= 13000) */

/* ---- generated tables (exports_gen.c) ---- */
struct pv_proc {                    /* one ABI of a driver function, for cuGetProcAddress */
    const char *base;               /* the name a caller asks for */
    int version;                    /* the CUDA version that introduced this ABI */
    int per_thread;                 /* the _ptds/_ptsz twin */
    const char *symbol;
    void (*fn)(void);
};
extern const struct pv_proc pv_procs[];
extern const int pv_nprocs;
struct pv_curesult { int code; const char *name; const char *text; };
extern const struct pv_curesult pv_curesults[];
extern const int pv_ncuresults;
struct pv_errmap { int runtime; int driver; };
extern const struct pv_errmap pv_errmap[];
extern const int pv_nerrmap;

/* ---- errors and start-up (api_misc.c) ---- */
CUresult pv_drv_unsupported(const char *name, atomic_int *once);   /* the generated stubs' answer */
CUresult drv_result(cudaError_t err);                                /* a wire error as a CUresult */
void drv_note_runtime(void);                                         /* NVIDIA's runtime is our caller */
CUresult drv_ready(void);                                            /* cuInit ran (else NOT_INITIALIZED) */

/* ---- contexts (context.c) ---- */
#define PV_CTX_MAGIC 0x43545856u
struct pv_cls;
struct pv_ctx {
    uint32_t magic;
    int dev;                        /* global device ordinal */
    int primary;                    /* the device's primary context (never freed) */
    unsigned flags;
    atomic_int refs;                /* primary: cuDevicePrimaryCtxRetain count */
    uint64_t id;                    /* cuCtxGetId */
    pthread_mutex_t mu;             /* cls */
    struct pv_cls *cls;             /* context-local storage of NVIDIA's runtime (export_tables.c) */
};
int drv_ctx_valid(const struct pv_ctx *c);
struct pv_ctx *drv_primary(int dev);                  /* NULL when dev is out of range */
struct pv_ctx *drv_ctx_top(void);                     /* this thread's current context or NULL */
/* The current context's device (CUDA_ERROR_INVALID_CONTEXT without one); runs the readiness checks. */
CUresult drv_cur_device(struct pv_device **out);
CUresult drv_ctx_device(struct pv_ctx *c, struct pv_device **out);   /* c NULL: the current context */
/* Context-local storage (the runtime's per-context state; export_tables.c hands these to it). */
CUresult drv_cls_set(struct pv_ctx *c, void *key, void *value, void (*dtor)(struct pv_ctx *, void *, void *));
CUresult drv_cls_get(struct pv_ctx *c, void *key, void **value);
CUresult drv_cls_remove(struct pv_ctx *c, void *key);

/* ---- modules and libraries (api_module.c) ---- */
#define PV_DMOD_MAGIC 0x444d4f44u
struct pv_dmod { uint32_t magic; struct pv_fatbin *fb; int library; };

#endif
