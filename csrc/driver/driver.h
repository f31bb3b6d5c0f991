/* libvcuda's internal declarations: the driver API's types (ABI-compatible with CUDA 13.0's cuda.h; a test checks
 * the structs against the header when it is present) on top of the client core, and the interfaces between the
 * files of csrc/driver. docs/driver.md explains what NVIDIA's runtime needs from this library. */
#ifndef PV_DRIVER_H
#define PV_DRIVER_H

#include "pv_core.h"
#include "pv_graph.h"
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
/* The runtime features' objects are the core's (pv_graph.h, pv_features.h), shared with libvcudart. */
typedef struct pv_graph *CUgraph;
typedef struct pv_gnode *CUgraphNode;
typedef struct pv_gexec *CUgraphExec;
typedef struct pv_pool *CUmemoryPool;
typedef struct pv_array *CUarray;
typedef unsigned long long CUtexObject;
typedef unsigned long long CUsurfObject;
typedef struct cudaMemLocation CUmemLocation;          /* the same layout in both APIs (checked below) */
typedef struct cudaMemPoolProps CUmemPoolProps;
typedef struct cudaMemAccessDesc CUmemAccessDesc;
typedef cudaGraphEdgeData CUgraphEdgeData;
typedef struct cudaGraphExecUpdateResultInfo_st CUgraphExecUpdateResultInfo;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
    int type;                       /* CU_MEM_ALLOCATION_TYPE_* */
    int requestedHandleTypes;       /* CU_MEM_HANDLE_TYPE_* */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; unsigned char reserved[4]; }
        allocFlags;
} CUmemAllocationProp;
typedef struct {                    /* cuCtxCreate_v4's parameters */
    void *execAffinityParams;
    int numExecAffinityParams;
    void *cigParams;
} CUctxCreateParams;

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
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

typedef struct {                   /* CUDA_MEMCPY3D with contexts in place of the reserved pointers */
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    CUcontext srcContext;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    CUcontext dstContext;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D_PEER;

typedef struct { size_t Width, Height; int Format; unsigned NumChannels; } CUDA_ARRAY_DESCRIPTOR;
typedef struct { size_t Width, Height, Depth; int Format; unsigned NumChannels, Flags; } CUDA_ARRAY3D_DESCRIPTOR;

typedef struct {
    int resType;
    union {
        struct { CUarray hArray; } array;
        struct { void *hMipmappedArray; } mipmap;
        struct { CUdeviceptr devPtr; int format; unsigned numChannels; size_t sizeInBytes; } linear;
        struct {
            CUdeviceptr devPtr;
            int format;
            unsigned numChannels;
            size_t width, height, pitchInBytes;
        } pitch2D;
        struct { int reserved[32]; } reserved;
    } res;
    unsigned flags;
} CUDA_RESOURCE_DESC;

typedef struct {
    int addressMode[3];
    int filterMode;
    unsigned flags;                /* CU_TRSF_* */
    unsigned maxAnisotropy;
    int mipmapFilterMode;
    float mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp;
    float borderColor[4];
    int reserved[12];
} CUDA_TEXTURE_DESC;
enum { CU_TRSF_READ_AS_INTEGER = 1, CU_TRSF_NORMALIZED_COORDINATES = 2, CU_TRSF_SRGB = 0x10,
       CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION = 0x20, CU_TRSF_SEAMLESS_CUBEMAP = 0x40 };
typedef struct cudaResourceViewDesc CUDA_RESOURCE_VIEW_DESC;   /* the same layout in both APIs */

/* CUDA_KERNEL_NODE_PARAMS v2 and v3 (v1 is their prefix, without kern and ctx). */
typedef struct {
    CUfunction func;
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;
typedef struct {
    CUdeviceptr dst;
    size_t pitch;
    unsigned value, elementSize;
    size_t width, height;
    CUcontext ctx;                 /* v2 only */
} CUDA_MEMSET_NODE_PARAMS;
typedef struct cudaHostNodeParams CUDA_HOST_NODE_PARAMS;
typedef struct { uint64_t flags; CUstream hUploadStream; CUgraphNode hErrNode_out; int result_out; }
    CUDA_GRAPH_INSTANTIATE_PARAMS;
typedef struct { int flags; int reserved; CUcontext copyCtx; CUDA_MEMCPY3D copyParams; } CUDA_MEMCPY_NODE_PARAMS;
typedef struct cudaMemAllocNodeParams CUDA_MEM_ALLOC_NODE_PARAMS;   /* the runtime's layout (checked below) */
typedef struct {
    int type;
    int reserved0[3];
    union {
        long long reserved1[29];
        CUDA_KERNEL_NODE_PARAMS kernel;
        CUDA_MEMCPY_NODE_PARAMS memcpy;
        CUDA_MEMSET_NODE_PARAMS memset;
        CUDA_HOST_NODE_PARAMS host;
        struct { CUgraph graph; int ownership; } graph;
        struct { CUevent event; } eventWait, eventRecord;
        CUDA_MEM_ALLOC_NODE_PARAMS alloc;
        struct { CUdeviceptr dptr; } free;
    } u;
    long long reserved2;
} CUgraphNodeParams;

/* The value union is the runtime's (struct pv_launch_attr, pv_types.h): the core reads it as that. */
typedef struct {
    int id;
    char pad[4];
    union { char pad[64]; } value;
} CUlaunchAttribute;

typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2, CU_MEMORYTYPE_ARRAY = 3, CU_MEMORYTYPE_UNIFIED = 4 };
enum { CU_LIMIT_CIG_ENABLED = 8 };                       /* cuda.h's CUlimit */

/* ---- compile-time checks of the declarations above against NVIDIA's layouts (layouts_gen.h) ---- */
#define PV_DLAYOUT(type, field, macro) _Static_assert(offsetof(type, field) == (macro), #type "." #field)
#define PV_DSIZE(type, macro) _Static_assert(sizeof(type) == (macro), "sizeof " #type)
PV_DSIZE(CUDA_MEMCPY2D, PV_CUDA_MEMCPY2D_st_SIZE);
PV_DLAYOUT(CUDA_MEMCPY2D, srcMemoryType, PV_CUDA_MEMCPY2D_st_srcMemoryType);
PV_DLAYOUT(CUDA_MEMCPY2D, srcHost, PV_CUDA_MEMCPY2D_st_srcHost);
PV_DLAYOUT(CUDA_MEMCPY2D, srcDevice, PV_CUDA_MEMCPY2D_st_srcDevice);
PV_DLAYOUT(CUDA_MEMCPY2D, srcArray, PV_CUDA_MEMCPY2D_st_srcArray);
PV_DLAYOUT(CUDA_MEMCPY2D, srcPitch, PV_CUDA_MEMCPY2D_st_srcPitch);
PV_DLAYOUT(CUDA_MEMCPY2D, dstXInBytes, PV_CUDA_MEMCPY2D_st_dstXInBytes);
PV_DLAYOUT(CUDA_MEMCPY2D, dstMemoryType, PV_CUDA_MEMCPY2D_st_dstMemoryType);
PV_DLAYOUT(CUDA_MEMCPY2D, dstHost, PV_CUDA_MEMCPY2D_st_dstHost);
PV_DLAYOUT(CUDA_MEMCPY2D, dstDevice, PV_CUDA_MEMCPY2D_st_dstDevice);
PV_DLAYOUT(CUDA_MEMCPY2D, dstArray, PV_CUDA_MEMCPY2D_st_dstArray);
PV_DLAYOUT(CUDA_MEMCPY2D, dstPitch, PV_CUDA_MEMCPY2D_st_dstPitch);
PV_DLAYOUT(CUDA_MEMCPY2D, WidthInBytes, PV_CUDA_MEMCPY2D_st_WidthInBytes);
PV_DLAYOUT(CUDA_MEMCPY2D, Height, PV_CUDA_MEMCPY2D_st_Height);
PV_DSIZE(CUDA_MEMCPY3D, PV_CUDA_MEMCPY3D_st_SIZE);
PV_DLAYOUT(CUDA_MEMCPY3D, srcXInBytes, PV_CUDA_MEMCPY3D_st_srcXInBytes);
PV_DLAYOUT(CUDA_MEMCPY3D, srcLOD, PV_CUDA_MEMCPY3D_st_srcLOD);
PV_DLAYOUT(CUDA_MEMCPY3D, srcMemoryType, PV_CUDA_MEMCPY3D_st_srcMemoryType);
PV_DLAYOUT(CUDA_MEMCPY3D, srcHost, PV_CUDA_MEMCPY3D_st_srcHost);
PV_DLAYOUT(CUDA_MEMCPY3D, srcDevice, PV_CUDA_MEMCPY3D_st_srcDevice);
PV_DLAYOUT(CUDA_MEMCPY3D, srcArray, PV_CUDA_MEMCPY3D_st_srcArray);
PV_DLAYOUT(CUDA_MEMCPY3D, srcPitch, PV_CUDA_MEMCPY3D_st_srcPitch);
PV_DLAYOUT(CUDA_MEMCPY3D, srcHeight, PV_CUDA_MEMCPY3D_st_srcHeight);
PV_DLAYOUT(CUDA_MEMCPY3D, dstXInBytes, PV_CUDA_MEMCPY3D_st_dstXInBytes);
PV_DLAYOUT(CUDA_MEMCPY3D, dstMemoryType, PV_CUDA_MEMCPY3D_st_dstMemoryType);
PV_DLAYOUT(CUDA_MEMCPY3D, dstHost, PV_CUDA_MEMCPY3D_st_dstHost);
PV_DLAYOUT(CUDA_MEMCPY3D, dstArray, PV_CUDA_MEMCPY3D_st_dstArray);
PV_DLAYOUT(CUDA_MEMCPY3D, dstPitch, PV_CUDA_MEMCPY3D_st_dstPitch);
PV_DLAYOUT(CUDA_MEMCPY3D, dstHeight, PV_CUDA_MEMCPY3D_st_dstHeight);
PV_DLAYOUT(CUDA_MEMCPY3D, WidthInBytes, PV_CUDA_MEMCPY3D_st_WidthInBytes);
PV_DLAYOUT(CUDA_MEMCPY3D, Height, PV_CUDA_MEMCPY3D_st_Height);
PV_DLAYOUT(CUDA_MEMCPY3D, Depth, PV_CUDA_MEMCPY3D_st_Depth);
PV_DSIZE(CUDA_MEMCPY3D_PEER, PV_CUDA_MEMCPY3D_PEER_st_SIZE);
PV_DLAYOUT(CUDA_MEMCPY3D_PEER, srcContext, PV_CUDA_MEMCPY3D_PEER_st_srcContext);
PV_DLAYOUT(CUDA_MEMCPY3D_PEER, srcPitch, PV_CUDA_MEMCPY3D_PEER_st_srcPitch);
PV_DLAYOUT(CUDA_MEMCPY3D_PEER, dstContext, PV_CUDA_MEMCPY3D_PEER_st_dstContext);
PV_DLAYOUT(CUDA_MEMCPY3D_PEER, dstPitch, PV_CUDA_MEMCPY3D_PEER_st_dstPitch);
PV_DLAYOUT(CUDA_MEMCPY3D_PEER, Depth, PV_CUDA_MEMCPY3D_PEER_st_Depth);
PV_DSIZE(CUDA_ARRAY_DESCRIPTOR, PV_CUDA_ARRAY_DESCRIPTOR_st_SIZE);
PV_DLAYOUT(CUDA_ARRAY_DESCRIPTOR, Width, PV_CUDA_ARRAY_DESCRIPTOR_st_Width);
PV_DLAYOUT(CUDA_ARRAY_DESCRIPTOR, Height, PV_CUDA_ARRAY_DESCRIPTOR_st_Height);
PV_DLAYOUT(CUDA_ARRAY_DESCRIPTOR, Format, PV_CUDA_ARRAY_DESCRIPTOR_st_Format);
PV_DLAYOUT(CUDA_ARRAY_DESCRIPTOR, NumChannels, PV_CUDA_ARRAY_DESCRIPTOR_st_NumChannels);
PV_DSIZE(CUDA_ARRAY3D_DESCRIPTOR, PV_CUDA_ARRAY3D_DESCRIPTOR_st_SIZE);
PV_DLAYOUT(CUDA_ARRAY3D_DESCRIPTOR, Width, PV_CUDA_ARRAY3D_DESCRIPTOR_st_Width);
PV_DLAYOUT(CUDA_ARRAY3D_DESCRIPTOR, Height, PV_CUDA_ARRAY3D_DESCRIPTOR_st_Height);
PV_DLAYOUT(CUDA_ARRAY3D_DESCRIPTOR, Depth, PV_CUDA_ARRAY3D_DESCRIPTOR_st_Depth);
PV_DLAYOUT(CUDA_ARRAY3D_DESCRIPTOR, Format, PV_CUDA_ARRAY3D_DESCRIPTOR_st_Format);
PV_DLAYOUT(CUDA_ARRAY3D_DESCRIPTOR, NumChannels, PV_CUDA_ARRAY3D_DESCRIPTOR_st_NumChannels);
PV_DLAYOUT(CUDA_ARRAY3D_DESCRIPTOR, Flags, PV_CUDA_ARRAY3D_DESCRIPTOR_st_Flags);
PV_DSIZE(CUDA_RESOURCE_DESC, PV_CUDA_RESOURCE_DESC_st_SIZE);
PV_DLAYOUT(CUDA_RESOURCE_DESC, resType, PV_CUDA_RESOURCE_DESC_st_resType);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.array.hArray, PV_CUDA_RESOURCE_DESC_st_res_array_hArray);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.linear.devPtr, PV_CUDA_RESOURCE_DESC_st_res_linear_devPtr);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.linear.format, PV_CUDA_RESOURCE_DESC_st_res_linear_format);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.linear.numChannels, PV_CUDA_RESOURCE_DESC_st_res_linear_numChannels);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.linear.sizeInBytes, PV_CUDA_RESOURCE_DESC_st_res_linear_sizeInBytes);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.pitch2D.devPtr, PV_CUDA_RESOURCE_DESC_st_res_pitch2D_devPtr);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.pitch2D.format, PV_CUDA_RESOURCE_DESC_st_res_pitch2D_format);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.pitch2D.numChannels, PV_CUDA_RESOURCE_DESC_st_res_pitch2D_numChannels);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.pitch2D.width, PV_CUDA_RESOURCE_DESC_st_res_pitch2D_width);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.pitch2D.height, PV_CUDA_RESOURCE_DESC_st_res_pitch2D_height);
PV_DLAYOUT(CUDA_RESOURCE_DESC, res.pitch2D.pitchInBytes, PV_CUDA_RESOURCE_DESC_st_res_pitch2D_pitchInBytes);
PV_DLAYOUT(CUDA_RESOURCE_DESC, flags, PV_CUDA_RESOURCE_DESC_st_flags);
PV_DSIZE(CUDA_TEXTURE_DESC, PV_CUDA_TEXTURE_DESC_st_SIZE);
PV_DLAYOUT(CUDA_TEXTURE_DESC, addressMode, PV_CUDA_TEXTURE_DESC_st_addressMode);
PV_DLAYOUT(CUDA_TEXTURE_DESC, filterMode, PV_CUDA_TEXTURE_DESC_st_filterMode);
PV_DLAYOUT(CUDA_TEXTURE_DESC, flags, PV_CUDA_TEXTURE_DESC_st_flags);
PV_DLAYOUT(CUDA_TEXTURE_DESC, maxAnisotropy, PV_CUDA_TEXTURE_DESC_st_maxAnisotropy);
PV_DLAYOUT(CUDA_TEXTURE_DESC, mipmapFilterMode, PV_CUDA_TEXTURE_DESC_st_mipmapFilterMode);
PV_DLAYOUT(CUDA_TEXTURE_DESC, mipmapLevelBias, PV_CUDA_TEXTURE_DESC_st_mipmapLevelBias);
PV_DLAYOUT(CUDA_TEXTURE_DESC, maxMipmapLevelClamp, PV_CUDA_TEXTURE_DESC_st_maxMipmapLevelClamp);
PV_DLAYOUT(CUDA_TEXTURE_DESC, borderColor, PV_CUDA_TEXTURE_DESC_st_borderColor);
PV_DSIZE(CUDA_RESOURCE_VIEW_DESC, PV_CUDA_RESOURCE_VIEW_DESC_st_SIZE);
PV_DLAYOUT(CUDA_RESOURCE_VIEW_DESC, format, PV_CUDA_RESOURCE_VIEW_DESC_st_format);
PV_DLAYOUT(CUDA_RESOURCE_VIEW_DESC, width, PV_CUDA_RESOURCE_VIEW_DESC_st_width);
PV_DLAYOUT(CUDA_RESOURCE_VIEW_DESC, depth, PV_CUDA_RESOURCE_VIEW_DESC_st_depth);
PV_DLAYOUT(CUDA_RESOURCE_VIEW_DESC, firstMipmapLevel, PV_CUDA_RESOURCE_VIEW_DESC_st_firstMipmapLevel);
PV_DLAYOUT(CUDA_RESOURCE_VIEW_DESC, lastLayer, PV_CUDA_RESOURCE_VIEW_DESC_st_lastLayer);
PV_DSIZE(CUDA_KERNEL_NODE_PARAMS, PV_CUDA_KERNEL_NODE_PARAMS_v2_st_SIZE);
PV_DLAYOUT(CUDA_KERNEL_NODE_PARAMS, func, PV_CUDA_KERNEL_NODE_PARAMS_v2_st_func);
PV_DLAYOUT(CUDA_KERNEL_NODE_PARAMS, gridDimX, PV_CUDA_KERNEL_NODE_PARAMS_v2_st_gridDimX);
PV_DLAYOUT(CUDA_KERNEL_NODE_PARAMS, blockDimZ, PV_CUDA_KERNEL_NODE_PARAMS_v2_st_blockDimZ);
PV_DLAYOUT(CUDA_KERNEL_NODE_PARAMS, sharedMemBytes, PV_CUDA_KERNEL_NODE_PARAMS_v2_st_sharedMemBytes);
PV_DLAYOUT(CUDA_KERNEL_NODE_PARAMS, kernelParams, PV_CUDA_KERNEL_NODE_PARAMS_v2_st_kernelParams);
PV_DLAYOUT(CUDA_KERNEL_NODE_PARAMS, extra, PV_CUDA_KERNEL_NODE_PARAMS_v2_st_extra);
PV_DLAYOUT(CUDA_KERNEL_NODE_PARAMS, kern, PV_CUDA_KERNEL_NODE_PARAMS_v2_st_kern);
PV_DLAYOUT(CUDA_KERNEL_NODE_PARAMS, ctx, PV_CUDA_KERNEL_NODE_PARAMS_v2_st_ctx);
PV_DSIZE(CUDA_MEMSET_NODE_PARAMS, PV_CUDA_MEMSET_NODE_PARAMS_v2_st_SIZE);
PV_DLAYOUT(CUDA_MEMSET_NODE_PARAMS, dst, PV_CUDA_MEMSET_NODE_PARAMS_v2_st_dst);
PV_DLAYOUT(CUDA_MEMSET_NODE_PARAMS, pitch, PV_CUDA_MEMSET_NODE_PARAMS_v2_st_pitch);
PV_DLAYOUT(CUDA_MEMSET_NODE_PARAMS, value, PV_CUDA_MEMSET_NODE_PARAMS_v2_st_value);
PV_DLAYOUT(CUDA_MEMSET_NODE_PARAMS, elementSize, PV_CUDA_MEMSET_NODE_PARAMS_v2_st_elementSize);
PV_DLAYOUT(CUDA_MEMSET_NODE_PARAMS, width, PV_CUDA_MEMSET_NODE_PARAMS_v2_st_width);
PV_DLAYOUT(CUDA_MEMSET_NODE_PARAMS, height, PV_CUDA_MEMSET_NODE_PARAMS_v2_st_height);
PV_DLAYOUT(CUDA_MEMSET_NODE_PARAMS, ctx, PV_CUDA_MEMSET_NODE_PARAMS_v2_st_ctx);
PV_DSIZE(CUDA_HOST_NODE_PARAMS, PV_CUDA_HOST_NODE_PARAMS_st_SIZE);
PV_DLAYOUT(CUDA_HOST_NODE_PARAMS, fn, PV_CUDA_HOST_NODE_PARAMS_st_fn);
PV_DLAYOUT(CUDA_HOST_NODE_PARAMS, userData, PV_CUDA_HOST_NODE_PARAMS_st_userData);
PV_DSIZE(CUDA_GRAPH_INSTANTIATE_PARAMS, PV_CUDA_GRAPH_INSTANTIATE_PARAMS_st_SIZE);
PV_DLAYOUT(CUDA_GRAPH_INSTANTIATE_PARAMS, flags, PV_CUDA_GRAPH_INSTANTIATE_PARAMS_st_flags);
PV_DLAYOUT(CUDA_GRAPH_INSTANTIATE_PARAMS, hUploadStream, PV_CUDA_GRAPH_INSTANTIATE_PARAMS_st_hUploadStream);
PV_DLAYOUT(CUDA_GRAPH_INSTANTIATE_PARAMS, hErrNode_out, PV_CUDA_GRAPH_INSTANTIATE_PARAMS_st_hErrNode_out);
PV_DLAYOUT(CUDA_GRAPH_INSTANTIATE_PARAMS, result_out, PV_CUDA_GRAPH_INSTANTIATE_PARAMS_st_result_out);
PV_DSIZE(CUDA_MEMCPY_NODE_PARAMS, PV_CUDA_MEMCPY_NODE_PARAMS_st_SIZE);
PV_DLAYOUT(CUDA_MEMCPY_NODE_PARAMS, flags, PV_CUDA_MEMCPY_NODE_PARAMS_st_flags);
PV_DLAYOUT(CUDA_MEMCPY_NODE_PARAMS, copyCtx, PV_CUDA_MEMCPY_NODE_PARAMS_st_copyCtx);
PV_DLAYOUT(CUDA_MEMCPY_NODE_PARAMS, copyParams, PV_CUDA_MEMCPY_NODE_PARAMS_st_copyParams);
PV_DSIZE(CUgraphNodeParams, PV_CUgraphNodeParams_st_SIZE);
PV_DLAYOUT(CUgraphNodeParams, type, PV_CUgraphNodeParams_st_type);
PV_DLAYOUT(CUgraphNodeParams, u.kernel, PV_CUgraphNodeParams_st_kernel);
PV_DLAYOUT(CUgraphNodeParams, u.memcpy, PV_CUgraphNodeParams_st_memcpy);
PV_DLAYOUT(CUgraphNodeParams, u.memset, PV_CUgraphNodeParams_st_memset);
PV_DLAYOUT(CUgraphNodeParams, u.host, PV_CUgraphNodeParams_st_host);
PV_DLAYOUT(CUgraphNodeParams, u.graph, PV_CUgraphNodeParams_st_graph);
PV_DLAYOUT(CUgraphNodeParams, u.eventWait, PV_CUgraphNodeParams_st_eventWait);
PV_DLAYOUT(CUgraphNodeParams, u.eventRecord, PV_CUgraphNodeParams_st_eventRecord);
PV_DSIZE(CUmemLocation, PV_CUmemLocation_st_SIZE);
PV_DLAYOUT(CUmemLocation, type, PV_CUmemLocation_st_type);
PV_DLAYOUT(CUmemLocation, id, PV_CUmemLocation_st_id);
PV_DSIZE(CUmemPoolProps, PV_CUmemPoolProps_st_SIZE);
PV_DLAYOUT(CUmemPoolProps, allocType, PV_CUmemPoolProps_st_allocType);
PV_DLAYOUT(CUmemPoolProps, handleTypes, PV_CUmemPoolProps_st_handleTypes);
PV_DLAYOUT(CUmemPoolProps, location, PV_CUmemPoolProps_st_location);
PV_DLAYOUT(CUmemPoolProps, maxSize, PV_CUmemPoolProps_st_maxSize);
PV_DLAYOUT(CUmemPoolProps, usage, PV_CUmemPoolProps_st_usage);
PV_DSIZE(CUmemAccessDesc, PV_CUmemAccessDesc_st_SIZE);
PV_DLAYOUT(CUmemAccessDesc, location, PV_CUmemAccessDesc_st_location);
PV_DLAYOUT(CUmemAccessDesc, flags, PV_CUmemAccessDesc_st_flags);
PV_DSIZE(CUgraphExecUpdateResultInfo, PV_CUgraphExecUpdateResultInfo_st_SIZE);
PV_DLAYOUT(CUgraphExecUpdateResultInfo, result, PV_CUgraphExecUpdateResultInfo_st_result);
PV_DLAYOUT(CUgraphExecUpdateResultInfo, errorNode, PV_CUgraphExecUpdateResultInfo_st_errorNode);
PV_DLAYOUT(CUgraphExecUpdateResultInfo, errorFromNode, PV_CUgraphExecUpdateResultInfo_st_errorFromNode);
PV_DSIZE(CUgraphEdgeData, PV_CUgraphEdgeData_st_SIZE);
PV_DSIZE(CUmemAllocationProp, PV_CUmemAllocationProp_st_SIZE);
PV_DLAYOUT(CUmemAllocationProp, type, PV_CUmemAllocationProp_st_type);
PV_DLAYOUT(CUmemAllocationProp, requestedHandleTypes, PV_CUmemAllocationProp_st_requestedHandleTypes);
PV_DLAYOUT(CUmemAllocationProp, location, PV_CUmemAllocationProp_st_location);
PV_DLAYOUT(CUmemAllocationProp, win32HandleMetaData, PV_CUmemAllocationProp_st_win32HandleMetaData);
PV_DLAYOUT(CUmemAllocationProp, allocFlags, PV_CUmemAllocationProp_st_allocFlags);
PV_DSIZE(CUctxCreateParams, PV_CUctxCreateParams_st_SIZE);
PV_DLAYOUT(CUctxCreateParams, execAffinityParams, PV_CUctxCreateParams_st_execAffinityParams);
PV_DLAYOUT(CUctxCreateParams, numExecAffinityParams, PV_CUctxCreateParams_st_numExecAffinityParams);
PV_DLAYOUT(CUctxCreateParams, cigParams, PV_CUctxCreateParams_st_cigParams);
PV_DLAYOUT(CUgraphEdgeData, from_port, PV_CUgraphEdgeData_st_from_port);
PV_DLAYOUT(CUgraphEdgeData, to_port, PV_CUgraphEdgeData_st_to_port);
PV_DLAYOUT(CUgraphEdgeData, type, PV_CUgraphEdgeData_st_type);
PV_DSIZE(CUDA_MEM_ALLOC_NODE_PARAMS, PV_CUDA_MEM_ALLOC_NODE_PARAMS_v1_st_SIZE);
PV_DLAYOUT(CUDA_MEM_ALLOC_NODE_PARAMS, accessDescs, PV_CUDA_MEM_ALLOC_NODE_PARAMS_v1_st_accessDescs);
PV_DLAYOUT(CUDA_MEM_ALLOC_NODE_PARAMS, bytesize, PV_CUDA_MEM_ALLOC_NODE_PARAMS_v1_st_bytesize);
PV_DLAYOUT(CUDA_MEM_ALLOC_NODE_PARAMS, dptr, PV_CUDA_MEM_ALLOC_NODE_PARAMS_v1_st_dptr);
PV_DLAYOUT(CUgraphNodeParams, u.alloc, PV_CUgraphNodeParams_st_alloc);
PV_DLAYOUT(CUgraphNodeParams, u.free, PV_CUgraphNodeParams_st_free);
PV_DSIZE(CUlaunchAttribute, PV_CUlaunchAttribute_st_SIZE);
PV_DLAYOUT(CUlaunchAttribute, value, PV_CUlaunchAttribute_st_value);
PV_DSIZE(CUlaunchConfig, PV_CUlaunchConfig_st_SIZE);
PV_DLAYOUT(CUlaunchConfig, blockDimX, PV_CUlaunchConfig_st_blockDimX);
PV_DLAYOUT(CUlaunchConfig, sharedMemBytes, PV_CUlaunchConfig_st_sharedMemBytes);
PV_DLAYOUT(CUlaunchConfig, hStream, PV_CUlaunchConfig_st_hStream);
PV_DLAYOUT(CUlaunchConfig, attrs, PV_CUlaunchConfig_st_attrs);
PV_DLAYOUT(CUlaunchConfig, numAttrs, PV_CUlaunchConfig_st_numAttrs);
#undef PV_DLAYOUT
#undef PV_DSIZE

/* The driver version this library answers as (NVIDIA's 13.0 runtime needs >= 13000): the newest CUDA version whose
 * entry points its cuGetProcAddress table holds (CUDA 13.0's, and the 13.2 ones of gen_driver_exports.py's NEWER). */
#define PV_CUDA_VERSION 13020

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
CUresult drv_read_file(const char *path, void **out);      /* api_module.c: a file's bytes, NUL-terminated */
const void *drv_library_table(const char *uuid);   /* export_tables_libs.c: the CUDA libraries' tables */
void drv_note_runtime(void);                                         /* NVIDIA's runtime is our caller */
CUresult drv_ready(void);                                            /* cuInit ran (else NOT_INITIALIZED) */
int drv_version(void);                          /* the version answered: PV_CUDA_VERSION or the test knob's */
/* CUDA_ERROR_NOT_SUPPORTED (logged once) when PYVGPU_FAKE_DRIVER_VERSION hides this exported symbol's ABI, else
 * CUDA_SUCCESS: the first line of the entry points a caller of an older driver must do without. */
CUresult drv_hidden(const char *symbol);
#define DRV_HIDDEN_GUARD(symbol)                                                                                  \
    do {                                                                                                          \
        CUresult h_ = drv_hidden(symbol);                                                                         \
        if (h_ != CUDA_SUCCESS)                                                                                   \
            return h_;                                                                                            \
    } while (0)
/* The body of an entry point that only needs cuInit to have run: the core call's result as a CUresult. */
#define DRV_RETURN(call)                                                                                          \
    do {                                                                                                          \
        CUresult r_ = drv_ready();                                                                                \
        return r_ == CUDA_SUCCESS ? drv_result(call) : r_;                                                        \
    } while (0)

/* ---- contexts (context.c) ---- */
#define PV_CTX_MAGIC 0x43545856u
struct pv_cls;
struct pv_ctx {
    uint32_t magic;
    int dev;                        /* global device ordinal */
    int primary;                    /* the device's primary context (never freed) */
    unsigned flags;
    atomic_int refs;                /* primary: cuDevicePrimaryCtxRetain count */
    atomic_int used;                /* primary: ever current on a thread or retained in this process */
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

/* ---- the driver's structs as the core's runtime ones (convert.c) ---- */
/* A 3D copy in bytes as cudaMemcpy3DParms (array offsets and widths in elements: whole ones, else
 * CUDA_ERROR_INVALID_VALUE); a 2D copy is one of depth 1. */
CUresult drv_copy3d_in(const CUDA_MEMCPY3D *c, struct cudaMemcpy3DParms *out);
CUresult drv_copy2d_in(const CUDA_MEMCPY2D *c, struct cudaMemcpy3DParms *out);
void drv_copy3d_out(const struct cudaMemcpy3DParms *p, CUDA_MEMCPY3D *out);
/* CUarray_format and a channel count <-> a channel description (bits per channel, kind). */
CUresult drv_format_in(int format, unsigned nchannels, struct cudaChannelFormatDesc *out);
CUresult drv_format_out(const struct cudaChannelFormatDesc *d, int *format, unsigned *nchannels);
CUresult drv_resource_in(const CUDA_RESOURCE_DESC *r, struct cudaResourceDesc *out);
CUresult drv_resource_out(const struct cudaResourceDesc *r, CUDA_RESOURCE_DESC *out);
void drv_texture_in(const CUDA_TEXTURE_DESC *t, const struct cudaChannelFormatDesc *fmt, struct cudaTextureDesc *out);
void drv_texture_out(const struct cudaTextureDesc *t, CUDA_TEXTURE_DESC *out);
void drv_memset_in(const CUDA_MEMSET_NODE_PARAMS *m, struct cudaMemsetParams *out);

/* ---- modules and libraries (api_module.c) ---- */
#define PV_DMOD_MAGIC 0x444d4f44u
struct pv_dmod {
    uint32_t magic;
    struct pv_fatbin *fb;
    int library;                    /* a library: context-independent, loaded where its kernels are used */
    struct pv_ctx *ctx;             /* a module: the context it was loaded in (unloaded with it) */
    int dev;                        /* a module: that context's device */
    struct pv_dmod *next;
};
void drv_modules_release(struct pv_ctx *c);             /* unloads the modules c loaded */
int drv_module_each_function(CUmodule m, void (*cb)(void *ud, CUfunction f), void *ud);   /* table 6e163fbe slot 7 */
/* The kernel a CUfunction or CUkernel handle names, usable on device d (NULL: any); NULL when it is not one, or a
 * function of another device. */
struct pv_func *drv_func_of(const void *h, const struct pv_device *d);
CUresult drv_func_error(const void *h);                 /* what a launch of a handle drv_func_of refused answers */
CUfunction drv_func_handle(struct pv_func *f, int dev); /* the CUfunction of kernel f on device dev */

#endif
