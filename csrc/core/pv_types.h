/* The CUDA 13.0 runtime structs of the runtime features (graphs, arrays, textures, surfaces, pools, managed memory),
 * declared ABI-compatibly (no CUDA headers are needed to build the libraries). They are the core's own form of
 * these parameters: libvcudart passes its callers' structs through, libvcuda translates the driver's CUDA_* structs
 * into them. Every size and offset is checked at compile time against layouts_gen.h, which
 * tools/gen_cudart_layouts.py measured by compiling against NVIDIA's headers. Enumerator values come from
 * protocol_gen.h (PV_cuda*). */
#ifndef PV_TYPES_H
#define PV_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "layouts_gen.h"
#include "pv_base.h"

typedef struct pv_array *cudaArray_t;
typedef const struct pv_array *cudaArray_const_t;
typedef struct pv_graph *cudaGraph_t;
typedef struct pv_gnode *cudaGraphNode_t;
typedef struct pv_gexec *cudaGraphExec_t;
typedef struct pv_pool *cudaMemPool_t;
typedef unsigned long long cudaTextureObject_t;
typedef unsigned long long cudaSurfaceObject_t;
typedef void (*cudaHostFn_t)(void *);

struct cudaMemLocation { int type; int id; };
struct cudaPos { size_t x, y, z; };
struct cudaExtent { size_t width, height, depth; };
struct cudaPitchedPtr { void *ptr; size_t pitch, xsize, ysize; };
struct cudaChannelFormatDesc { int x, y, z, w; int f; };

struct cudaKernelNodeParams {
    void *func;
    dim3 gridDim, blockDim;
    unsigned sharedMemBytes;
    void **kernelParams;
    void **extra;
};
struct cudaMemsetParams { void *dst; size_t pitch; unsigned value, elementSize; size_t width, height; };
struct cudaHostNodeParams { cudaHostFn_t fn; void *userData; };
struct cudaMemcpy3DParms {
    cudaArray_t srcArray;
    struct cudaPos srcPos;
    struct cudaPitchedPtr srcPtr;
    cudaArray_t dstArray;
    struct cudaPos dstPos;
    struct cudaPitchedPtr dstPtr;
    struct cudaExtent extent;
    int kind;
};
struct cudaMemcpy3DPeerParms {
    cudaArray_t srcArray;
    struct cudaPos srcPos;
    struct cudaPitchedPtr srcPtr;
    int srcDevice;
    cudaArray_t dstArray;
    struct cudaPos dstPos;
    struct cudaPitchedPtr dstPtr;
    int dstDevice;
    struct cudaExtent extent;
};

struct cudaResourceDesc {
    int resType;
    union {
        struct { cudaArray_t array; } array;
        struct { void *mipmap; } mipmap;
        struct { void *devPtr; struct cudaChannelFormatDesc desc; size_t sizeInBytes; } linear;
        struct {
            void *devPtr;
            struct cudaChannelFormatDesc desc;
            size_t width, height, pitchInBytes;
        } pitch2D;
        struct { int reserved[32]; } reserved;
    } res;
    unsigned flags;
};
struct cudaTextureDesc {
    int addressMode[3];
    int filterMode;
    int readMode;
    int sRGB;
    float borderColor[4];
    int normalizedCoords;
    unsigned maxAnisotropy;
    int mipmapFilterMode;
    float mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp;
    int disableTrilinearOptimization;
    int seamlessCubemap;
};
struct cudaResourceViewDesc {
    int format;
    size_t width, height, depth;
    unsigned firstMipmapLevel, lastMipmapLevel, firstLayer, lastLayer;
    unsigned reserved[16];
};

struct cudaMemPoolProps {
    int allocType;
    int handleTypes;
    struct cudaMemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
};
struct cudaMemAccessDesc { struct cudaMemLocation location; int flags; };

typedef struct cudaGraphInstantiateParams_st {
    unsigned long long flags;
    cudaStream_t uploadStream;
    cudaGraphNode_t errNode_out;
    int result_out;
} cudaGraphInstantiateParams;
typedef struct cudaGraphExecUpdateResultInfo_st {
    int result;
    cudaGraphNode_t errorNode;
    cudaGraphNode_t errorFromNode;
} cudaGraphExecUpdateResultInfo;
typedef struct cudaGraphEdgeData_st {
    unsigned char from_port, to_port, type, reserved[5];
} cudaGraphEdgeData;

struct cudaMemcpyNodeParams { int flags; int reserved[3]; struct cudaMemcpy3DParms copyParams; };
struct cudaMemAllocNodeParams {
    struct cudaMemPoolProps poolProps;
    const struct cudaMemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    void *dptr;
};
/* cudaGraphNodeParams (cudaGraphAddNode): a type and a union; the V2 structs share their V1 twins' layouts. */
struct cudaGraphNodeParams {
    int type;
    int reserved0[3];
    union {
        long long reserved1[29];
        struct cudaKernelNodeParams kernel;
        struct cudaMemcpyNodeParams memcpy;
        struct cudaMemsetParams memset;
        struct cudaHostNodeParams host;
        struct { cudaGraph_t graph; int ownership; } graph;
        struct { cudaEvent_t event; } eventWait;
        struct { cudaEvent_t event; } eventRecord;
        struct cudaMemAllocNodeParams alloc;
        struct { void *dptr; } free;
    } u;
    long long reserved2;
};

/* A launch attribute: cudaLaunchAttribute and the driver's CUlaunchAttribute share this layout (an id, padding, a
 * 64-byte value) and the ids' numbers, so the core reads both as this struct. */
struct pv_launch_attr {
    int id;
    char pad[4];
    union {
        char pad[64];
        struct { void *base_ptr; size_t num_bytes; float hitRatio; int hitProp, missProp; } accessPolicyWindow;
        int cooperative;
        struct { unsigned x, y, z; } clusterDim;
        int clusterSchedulingPolicyPreference;
        int programmaticStreamSerializationAllowed;
        struct { cudaEvent_t event; int flags; int triggerAtBlockStart; } programmaticEvent;
        int priority;
        struct { unsigned char default_, remote; } memSyncDomainMap;
        int memSyncDomain;
        struct { unsigned x, y, z; } preferredClusterDim;
        struct { cudaEvent_t event; int flags; } launchCompletionEvent;
        struct { int deviceUpdatable; void *devNode; } deviceUpdatableKernelNode;
        unsigned sharedMemCarveout;
        unsigned nvlinkUtilCentricScheduling;
    } val;
};
typedef struct cudaLaunchConfig_st {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    struct pv_launch_attr *attrs;
    unsigned numAttrs;
} cudaLaunchConfig_t;

/* ---- compile-time checks of the declarations above against NVIDIA's layouts ---- */
#define PV_LAYOUT(type, field, macro) _Static_assert(offsetof(type, field) == (macro), #type "." #field)
#define PV_SIZE(type, macro) _Static_assert(sizeof(type) == (macro), "sizeof " #type)
PV_SIZE(struct cudaMemLocation, PV_cudaMemLocation_SIZE);
PV_SIZE(struct cudaPos, PV_cudaPos_SIZE);
PV_SIZE(struct cudaExtent, PV_cudaExtent_SIZE);
PV_SIZE(struct cudaPitchedPtr, PV_cudaPitchedPtr_SIZE);
PV_SIZE(struct cudaChannelFormatDesc, PV_cudaChannelFormatDesc_SIZE);
PV_SIZE(struct cudaKernelNodeParams, PV_cudaKernelNodeParams_SIZE);
PV_LAYOUT(struct cudaKernelNodeParams, gridDim, PV_cudaKernelNodeParams_gridDim);
PV_LAYOUT(struct cudaKernelNodeParams, sharedMemBytes, PV_cudaKernelNodeParams_sharedMemBytes);
PV_LAYOUT(struct cudaKernelNodeParams, kernelParams, PV_cudaKernelNodeParams_kernelParams);
PV_LAYOUT(struct cudaKernelNodeParams, extra, PV_cudaKernelNodeParams_extra);
PV_SIZE(struct cudaMemsetParams, PV_cudaMemsetParams_SIZE);
PV_LAYOUT(struct cudaMemsetParams, value, PV_cudaMemsetParams_value);
PV_LAYOUT(struct cudaMemsetParams, width, PV_cudaMemsetParams_width);
PV_SIZE(struct cudaHostNodeParams, PV_cudaHostNodeParams_SIZE);
PV_SIZE(struct cudaMemcpy3DParms, PV_cudaMemcpy3DParms_SIZE);
PV_LAYOUT(struct cudaMemcpy3DParms, dstArray, PV_cudaMemcpy3DParms_dstArray);
PV_LAYOUT(struct cudaMemcpy3DParms, dstPtr, PV_cudaMemcpy3DParms_dstPtr);
PV_LAYOUT(struct cudaMemcpy3DParms, extent, PV_cudaMemcpy3DParms_extent);
PV_LAYOUT(struct cudaMemcpy3DParms, kind, PV_cudaMemcpy3DParms_kind);
PV_SIZE(struct cudaMemcpy3DPeerParms, PV_cudaMemcpy3DPeerParms_SIZE);
PV_LAYOUT(struct cudaMemcpy3DPeerParms, srcDevice, PV_cudaMemcpy3DPeerParms_srcDevice);
PV_LAYOUT(struct cudaMemcpy3DPeerParms, dstDevice, PV_cudaMemcpy3DPeerParms_dstDevice);
PV_LAYOUT(struct cudaMemcpy3DPeerParms, extent, PV_cudaMemcpy3DPeerParms_extent);
PV_SIZE(struct cudaResourceDesc, PV_cudaResourceDesc_SIZE);
PV_LAYOUT(struct cudaResourceDesc, res.linear.sizeInBytes, PV_cudaResourceDesc_res_linear_sizeInBytes);
PV_LAYOUT(struct cudaResourceDesc, res.pitch2D.pitchInBytes, PV_cudaResourceDesc_res_pitch2D_pitchInBytes);
PV_LAYOUT(struct cudaResourceDesc, flags, PV_cudaResourceDesc_flags);
PV_SIZE(struct cudaTextureDesc, PV_cudaTextureDesc_SIZE);
PV_LAYOUT(struct cudaTextureDesc, borderColor, PV_cudaTextureDesc_borderColor);
PV_LAYOUT(struct cudaTextureDesc, normalizedCoords, PV_cudaTextureDesc_normalizedCoords);
PV_LAYOUT(struct cudaTextureDesc, seamlessCubemap, PV_cudaTextureDesc_seamlessCubemap);
PV_SIZE(struct cudaResourceViewDesc, PV_cudaResourceViewDesc_SIZE);
PV_LAYOUT(struct cudaResourceViewDesc, lastLayer, PV_cudaResourceViewDesc_lastLayer);
PV_SIZE(struct cudaMemPoolProps, PV_cudaMemPoolProps_SIZE);
PV_LAYOUT(struct cudaMemPoolProps, location, PV_cudaMemPoolProps_location);
PV_LAYOUT(struct cudaMemPoolProps, maxSize, PV_cudaMemPoolProps_maxSize);
PV_LAYOUT(struct cudaMemPoolProps, usage, PV_cudaMemPoolProps_usage);
PV_SIZE(struct cudaMemAccessDesc, PV_cudaMemAccessDesc_SIZE);
PV_SIZE(cudaGraphInstantiateParams, PV_cudaGraphInstantiateParams_st_SIZE);
PV_LAYOUT(cudaGraphInstantiateParams, result_out, PV_cudaGraphInstantiateParams_st_result_out);
PV_SIZE(cudaGraphExecUpdateResultInfo, PV_cudaGraphExecUpdateResultInfo_st_SIZE);
PV_LAYOUT(cudaGraphExecUpdateResultInfo, errorFromNode, PV_cudaGraphExecUpdateResultInfo_st_errorFromNode);
PV_SIZE(cudaGraphEdgeData, PV_cudaGraphEdgeData_st_SIZE);
PV_SIZE(struct cudaMemcpyNodeParams, PV_cudaMemcpyNodeParams_SIZE);
PV_LAYOUT(struct cudaMemcpyNodeParams, copyParams, PV_cudaMemcpyNodeParams_copyParams);
PV_SIZE(struct cudaMemAllocNodeParams, PV_cudaMemAllocNodeParams_SIZE);
PV_LAYOUT(struct cudaMemAllocNodeParams, dptr, PV_cudaMemAllocNodeParams_dptr);
PV_SIZE(struct cudaGraphNodeParams, PV_cudaGraphNodeParams_SIZE);
PV_LAYOUT(struct cudaGraphNodeParams, u.kernel, PV_cudaGraphNodeParams_kernel);
PV_LAYOUT(struct cudaGraphNodeParams, u.free, PV_cudaGraphNodeParams_free);
PV_SIZE(struct pv_launch_attr, PV_cudaLaunchAttribute_st_SIZE);
PV_SIZE(struct pv_launch_attr, PV_CUlaunchAttribute_st_SIZE);
PV_LAYOUT(struct pv_launch_attr, val, PV_cudaLaunchAttribute_st_val);
PV_LAYOUT(struct pv_launch_attr, val, PV_CUlaunchAttribute_st_value);
PV_LAYOUT(struct pv_launch_attr, val.clusterDim, PV_cudaLaunchAttribute_st_val_clusterDim);
PV_LAYOUT(struct pv_launch_attr, val.programmaticEvent.flags, PV_cudaLaunchAttribute_st_val_programmaticEvent_flags);
PV_LAYOUT(struct pv_launch_attr, val.programmaticEvent.flags, PV_CUlaunchAttribute_st_value_programmaticEvent_flags);
PV_LAYOUT(struct pv_launch_attr, val.programmaticEvent.triggerAtBlockStart,
          PV_cudaLaunchAttribute_st_val_programmaticEvent_triggerAtBlockStart);
PV_LAYOUT(struct pv_launch_attr, val.launchCompletionEvent.flags,
          PV_cudaLaunchAttribute_st_val_launchCompletionEvent_flags);
PV_LAYOUT(struct pv_launch_attr, val.launchCompletionEvent.flags,
          PV_CUlaunchAttribute_st_value_launchCompletionEvent_flags);
PV_LAYOUT(struct pv_launch_attr, val.accessPolicyWindow.num_bytes,
          PV_cudaLaunchAttribute_st_val_accessPolicyWindow_num_bytes);
PV_LAYOUT(struct pv_launch_attr, val.accessPolicyWindow.hitRatio, PV_cudaLaunchAttribute_st_val_accessPolicyWindow_hitRatio);
PV_LAYOUT(struct pv_launch_attr, val.accessPolicyWindow.hitProp, PV_cudaLaunchAttribute_st_val_accessPolicyWindow_hitProp);
PV_LAYOUT(struct pv_launch_attr, val.accessPolicyWindow.missProp, PV_cudaLaunchAttribute_st_val_accessPolicyWindow_missProp);
PV_LAYOUT(struct pv_launch_attr, val.memSyncDomainMap.remote, PV_cudaLaunchAttribute_st_val_memSyncDomainMap_remote);
PV_LAYOUT(struct pv_launch_attr, val.deviceUpdatableKernelNode.devNode,
          PV_cudaLaunchAttribute_st_val_deviceUpdatableKernelNode_devNode);
PV_SIZE(cudaLaunchConfig_t, PV_cudaLaunchConfig_st_SIZE);
PV_LAYOUT(cudaLaunchConfig_t, blockDim, PV_cudaLaunchConfig_st_blockDim);
PV_LAYOUT(cudaLaunchConfig_t, dynamicSmemBytes, PV_cudaLaunchConfig_st_dynamicSmemBytes);
PV_LAYOUT(cudaLaunchConfig_t, stream, PV_cudaLaunchConfig_st_stream);
PV_LAYOUT(cudaLaunchConfig_t, attrs, PV_cudaLaunchConfig_st_attrs);
PV_LAYOUT(cudaLaunchConfig_t, numAttrs, PV_cudaLaunchConfig_st_numAttrs);
#undef PV_LAYOUT
#undef PV_SIZE

#endif
