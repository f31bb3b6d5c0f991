#!/usr/bin/env python3
"""Generate csrc/core/layouts_gen.h: sizes and field offsets of the CUDA 13.0 structs libvcudart fills in
(cudaDeviceProp, cudaFuncAttributes, cudaPointerAttributes, the runtime features' structs and the driver's CUDA_*
ones), measured by compiling a probe against the headers.
(The valid cudaDeviceAttr values come from pyvgpu/cuda_enums.py, into protocol_gen.h.)

Run once on a machine with CUDA 13.0 (python tools/gen_cudart_layouts.py [CUDA_DIR] [--out=PATH]); the output is
committed so libvcudart builds without CUDA headers. The library writes fields through these offsets into caller-owned memory.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = [a for a in sys.argv[1:] if not a.startswith("--out=")]
CUDA = Path(ARGS[0]) if ARGS else Path("/usr/local/cuda-13.0")
OUT = next((Path(a[6:]) for a in sys.argv[1:] if a.startswith("--out=")), ROOT / "csrc" / "core" / "layouts_gen.h")

FIELDS = {
    "cudaDeviceProp": ["name", "uuid", "totalGlobalMem", "sharedMemPerBlock", "regsPerBlock", "warpSize", "memPitch",
                       "maxThreadsPerBlock", "maxThreadsDim", "maxGridSize", "totalConstMem", "major", "minor",
                       "textureAlignment", "texturePitchAlignment", "multiProcessorCount", "integrated",
                       "canMapHostMemory", "concurrentKernels", "ECCEnabled", "pciBusID", "pciDeviceID",
                       "pciDomainID", "asyncEngineCount", "unifiedAddressing", "memoryBusWidth", "l2CacheSize",
                       "persistingL2CacheMaxSize", "maxThreadsPerMultiProcessor", "streamPrioritiesSupported",
                       "globalL1CacheSupported", "localL1CacheSupported", "sharedMemPerMultiprocessor",
                       "regsPerMultiprocessor", "managedMemory", "computePreemptionSupported", "cooperativeLaunch",
                       "sharedMemPerBlockOptin", "maxBlocksPerMultiProcessor", "reservedSharedMemPerBlock",
                       "hostRegisterSupported", "memoryPoolsSupported", "clusterLaunch", "concurrentManagedAccess",
                       "pageableMemoryAccess", "directManagedMemAccessFromHost", "hostNativeAtomicSupported",
                       "maxTexture1D", "maxTexture2D", "maxTexture3D", "maxSurface1D", "maxSurface2D", "maxSurface3D",
                       "surfaceAlignment", "maxTexture2DLinear", "maxTexture1DLayered",
                       "maxTexture2DLayered"],
    "cudaFuncAttributes": ["sharedSizeBytes", "constSizeBytes", "localSizeBytes", "maxThreadsPerBlock", "numRegs",
                           "ptxVersion", "binaryVersion", "cacheModeCA", "maxDynamicSharedSizeBytes",
                           "preferredShmemCarveout"],
    "cudaPointerAttributes": ["type", "device", "devicePointer", "hostPointer"],
    # The structs of the runtime-feature APIs (graphs, arrays, textures, pools, managed memory): libvcudart declares
    # them in cudart_types.h and checks its declarations against these numbers at compile time.
    "cudaMemLocation": ["type", "id"],
    "cudaKernelNodeParams": ["func", "gridDim", "blockDim", "sharedMemBytes", "kernelParams", "extra"],
    "cudaMemsetParams": ["dst", "pitch", "value", "elementSize", "width", "height"],
    "cudaHostNodeParams": ["fn", "userData"],
    "cudaPos": ["x", "y", "z"],
    "cudaExtent": ["width", "height", "depth"],
    "cudaPitchedPtr": ["ptr", "pitch", "xsize", "ysize"],
    "cudaMemcpy3DParms": ["srcArray", "srcPos", "srcPtr", "dstArray", "dstPos", "dstPtr", "extent", "kind"],
    "cudaMemcpy3DPeerParms": ["srcArray", "srcPos", "srcPtr", "srcDevice", "dstArray", "dstPos", "dstPtr",
                              "dstDevice", "extent"],
    "cudaChannelFormatDesc": ["x", "y", "z", "w", "f"],
    "cudaResourceDesc": ["resType", "res.array.array", "res.linear.devPtr", "res.linear.desc",
                         "res.linear.sizeInBytes", "res.pitch2D.devPtr", "res.pitch2D.desc", "res.pitch2D.width",
                         "res.pitch2D.height", "res.pitch2D.pitchInBytes", "flags"],
    "cudaTextureDesc": ["addressMode", "filterMode", "readMode", "sRGB", "borderColor", "normalizedCoords",
                        "maxAnisotropy", "mipmapFilterMode", "mipmapLevelBias", "minMipmapLevelClamp",
                        "maxMipmapLevelClamp", "disableTrilinearOptimization", "seamlessCubemap"],
    "cudaResourceViewDesc": ["format", "width", "height", "depth", "firstMipmapLevel", "lastMipmapLevel",
                             "firstLayer", "lastLayer"],
    "cudaMemPoolProps": ["allocType", "handleTypes", "location", "win32SecurityAttributes", "maxSize", "usage"],
    "cudaMemAccessDesc": ["location", "flags"],
    "cudaGraphInstantiateParams_st": ["flags", "uploadStream", "errNode_out", "result_out"],
    "cudaGraphExecUpdateResultInfo_st": ["result", "errorNode", "errorFromNode"],
    "cudaGraphEdgeData_st": ["from_port", "to_port", "type"],
    "cudaMemcpyNodeParams": ["flags", "copyParams"],
    "cudaMemAllocNodeParams": ["poolProps", "accessDescs", "accessDescCount", "bytesize", "dptr"],
    "cudaGraphNodeParams": ["type", "kernel", "memcpy", "memset", "host", "graph", "eventWait", "eventRecord",
                            "alloc", "free"],
    # Launches with attributes (cudaLaunchKernelExC / cuLaunchKernelEx): the core reads one attribute layout for both.
    "cudaLaunchConfig_st": ["gridDim", "blockDim", "dynamicSmemBytes", "stream", "attrs", "numAttrs"],
    "cudaLaunchAttribute_st": ["id", "val", "val.cooperative", "val.clusterDim", "val.programmaticEvent.event",
                               "val.programmaticEvent.flags", "val.programmaticEvent.triggerAtBlockStart",
                               "val.launchCompletionEvent.event", "val.launchCompletionEvent.flags",
                               "val.accessPolicyWindow.base_ptr", "val.accessPolicyWindow.num_bytes",
                               "val.accessPolicyWindow.hitRatio", "val.accessPolicyWindow.hitProp",
                               "val.accessPolicyWindow.missProp", "val.memSyncDomainMap.remote",
                               "val.deviceUpdatableKernelNode.devNode", "val.sharedMemCarveout",
                               "val.nvlinkUtilCentricScheduling"],
    "CUlaunchConfig_st": ["gridDimX", "blockDimX", "sharedMemBytes", "hStream", "attrs", "numAttrs"],
    "CUlaunchAttribute_st": ["id", "value", "value.programmaticEvent.flags", "value.launchCompletionEvent.flags"],
    # The driver's structs of the same features (libvcuda declares them in csrc/driver/driver.h and checks them).
    "CUDA_MEMCPY2D_st": ["srcMemoryType", "srcHost", "srcDevice", "srcArray", "srcPitch", "dstXInBytes", "dstMemoryType",
                         "dstHost", "dstDevice", "dstArray", "dstPitch", "WidthInBytes", "Height"],
    "CUDA_MEMCPY3D_st": ["srcXInBytes", "srcLOD", "srcMemoryType", "srcHost", "srcDevice", "srcArray", "srcPitch",
                         "srcHeight", "dstXInBytes", "dstMemoryType", "dstHost", "dstArray", "dstPitch", "dstHeight",
                         "WidthInBytes", "Height", "Depth"],
    "CUDA_MEMCPY3D_PEER_st": ["srcContext", "srcPitch", "dstContext", "dstPitch", "Depth"],
    "CUDA_ARRAY_DESCRIPTOR_st": ["Width", "Height", "Format", "NumChannels"],
    "CUDA_ARRAY3D_DESCRIPTOR_st": ["Width", "Height", "Depth", "Format", "NumChannels", "Flags"],
    "CUDA_RESOURCE_DESC_st": ["resType", "res.array.hArray", "res.linear.devPtr", "res.linear.format",
                              "res.linear.numChannels", "res.linear.sizeInBytes", "res.pitch2D.devPtr",
                              "res.pitch2D.format", "res.pitch2D.numChannels", "res.pitch2D.width",
                              "res.pitch2D.height", "res.pitch2D.pitchInBytes", "flags"],
    "CUDA_TEXTURE_DESC_st": ["addressMode", "filterMode", "flags", "maxAnisotropy", "mipmapFilterMode",
                             "mipmapLevelBias", "maxMipmapLevelClamp", "borderColor"],
    "CUDA_RESOURCE_VIEW_DESC_st": ["format", "width", "depth", "firstMipmapLevel", "lastLayer"],
    "CUDA_KERNEL_NODE_PARAMS_v2_st": ["func", "gridDimX", "blockDimZ", "sharedMemBytes", "kernelParams", "extra",
                                      "kern", "ctx"],
    "CUDA_MEMSET_NODE_PARAMS_v2_st": ["dst", "pitch", "value", "elementSize", "width", "height", "ctx"],
    "CUDA_HOST_NODE_PARAMS_st": ["fn", "userData"],
    "CUDA_GRAPH_INSTANTIATE_PARAMS_st": ["flags", "hUploadStream", "hErrNode_out", "result_out"],
    "CUDA_MEMCPY_NODE_PARAMS_st": ["flags", "copyCtx", "copyParams"],
    "CUgraphNodeParams_st": ["type", "kernel", "memcpy", "memset", "host", "graph", "eventWait", "eventRecord",
                             "alloc", "free"],
    "CUDA_MEM_ALLOC_NODE_PARAMS_v1_st": ["poolProps", "accessDescs", "accessDescCount", "bytesize", "dptr"],
    "CUmemLocation_st": ["type", "id"],
    "CUmemPoolProps_st": ["allocType", "handleTypes", "location", "maxSize", "usage"],
    "CUmemAccessDesc_st": ["location", "flags"],
    "CUmemAllocationProp_st": ["type", "requestedHandleTypes", "location", "win32HandleMetaData", "allocFlags"],
    "CUctxCreateParams_st": ["execAffinityParams", "numExecAffinityParams", "cigParams"],
    "CUgraphExecUpdateResultInfo_st": ["result", "errorNode", "errorFromNode"],
    "CUgraphEdgeData_st": ["from_port", "to_port", "type"],
}


def main() -> int:
    src = ["#include <cuda.h>", "#include <cuda_runtime_api.h>", "#include <stdio.h>", "#include <stddef.h>", "int main(void) {"]
    for struct, fields in FIELDS.items():
        src.append(f'printf("#define PV_{struct}_SIZE %zu\\n", sizeof(struct {struct}));')
        for f in fields:
            src.append(f'printf("#define PV_{struct}_{f.replace(".", "_")} %zu\\n", offsetof(struct {struct}, {f}));')
    src += ["return 0; }", ""]
    with tempfile.TemporaryDirectory() as tmp:
        c = Path(tmp) / "probe.c"
        exe = Path(tmp) / "probe"
        c.write_text("\n".join(src))
        subprocess.run(["cc", "-I", str(CUDA / "include"), "-o", str(exe), str(c)], check=True)
        out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    text = ("/* Generated by tools/gen_cudart_layouts.py from the CUDA 13.0 headers. Do not edit.\n"
            " * Sizes and byte offsets of the runtime and driver structs the client libraries read and fill in. */\n"
            "#ifndef PV_LAYOUTS_GEN_H\n#define PV_LAYOUTS_GEN_H\n" + out + "#endif\n")
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
