#!/usr/bin/env python3
"""Generate csrc/cudart/layouts_gen.h: sizes and field offsets of the CUDA 13.0 structs libvcudart fills in
(cudaDeviceProp, cudaFuncAttributes, cudaPointerAttributes), measured by compiling a probe against the headers.
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
OUT = next((Path(a[6:]) for a in sys.argv[1:] if a.startswith("--out=")), ROOT / "csrc" / "cudart" / "layouts_gen.h")

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
}


def main() -> int:
    src = ["#include <cuda_runtime_api.h>", "#include <stdio.h>", "#include <stddef.h>", "int main(void) {"]
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
            " * Sizes and byte offsets of the runtime structs that libvcudart fills in caller memory. */\n"
            "#ifndef PV_LAYOUTS_GEN_H\n#define PV_LAYOUTS_GEN_H\n" + out + "#endif\n")
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
