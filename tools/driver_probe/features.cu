// The runtime features (managed and mapped memory, pools, arrays, textures, surfaces, graphs, capture, peers), one
// announced runtime call after another, so a probe log (PROBE_LOG unset: same stderr) shows which driver calls NVIDIA's
// static runtime makes for each. Results are printed, not checked: the probe's device runs no kernels.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

__managed__ int gManaged[4];

__global__ void add1(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}

__global__ void tex_read(cudaTextureObject_t t, cudaSurfaceObject_t s, float *out) {
    out[threadIdx.x] = tex2D<float>(t, threadIdx.x, 0);
    float v;
    surf2Dread(&v, s, threadIdx.x * 4, 0);
}

static void CUDART_CB host_fn(void *) {}

#define CALL(x)                                                                                                   \
    do {                                                                                                          \
        fprintf(stderr, "==== %s\n", #x);                                                                         \
        cudaError_t e_ = (x);                                                                                     \
        fprintf(stderr, "==== -> %s\n", cudaGetErrorName(e_));                                                   \
    } while (0)

int main() {
    CALL(cudaSetDevice(0));
    CALL(cudaFree(0));
    // managed and mapped memory
    float *m = nullptr, *hm = nullptr, *dm = nullptr;
    CALL(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal));
    cudaMemLocation loc = {cudaMemLocationTypeDevice, 0};
    CALL(cudaMemPrefetchAsync(m, 4096, loc, 0, 0));
    CALL(cudaMemAdvise(m, 4096, cudaMemAdviseSetReadMostly, loc));
    int rm = 0;
    CALL(cudaMemRangeGetAttribute(&rm, 4, cudaMemRangeAttributeReadMostly, m, 4096));
    cudaPointerAttributes pa;
    CALL(cudaPointerGetAttributes(&pa, m));
    CALL(cudaStreamAttachMemAsync(0, m, 0, cudaMemAttachGlobal));
    CALL(cudaHostAlloc(&hm, 4096, cudaHostAllocMapped));
    CALL(cudaHostGetDevicePointer((void **)&dm, hm, 0));
    static float reg[1024];
    CALL(cudaHostRegister(reg, sizeof reg, cudaHostRegisterMapped));
    CALL(cudaHostGetDevicePointer((void **)&dm, reg, 0));
    CALL(cudaHostUnregister(reg));
    unsigned fl = 0;
    CALL(cudaHostGetFlags(&fl, hm));
    CALL(cudaFreeHost(hm));
    int *gm = nullptr;
    CALL(cudaGetSymbolAddress((void **)&gm, gManaged));
    if (getenv("FEATURES_TOUCH_MANAGED")) {   // the probe hands back no storage for __managed__ variables
        fprintf(stderr, "==== touch __managed__\n");
        gManaged[0] = 1;
    }
    CALL(cudaFree(m));
    // pools
    cudaMemPool_t pool, dpool;
    CALL(cudaDeviceGetDefaultMemPool(&dpool, 0));
    CALL(cudaDeviceGetMemPool(&dpool, 0));
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location = loc;
    CALL(cudaMemPoolCreate(&pool, &props));
    unsigned long long thr = 1 << 20;
    CALL(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
    CALL(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &thr));
    void *pa1 = nullptr, *pa2 = nullptr;
    CALL(cudaMallocAsync(&pa1, 1024, 0));
    CALL(cudaMallocFromPoolAsync(&pa2, 1024, pool, 0));
    CALL(cudaFreeAsync(pa1, 0));
    CALL(cudaFreeAsync(pa2, 0));
    CALL(cudaMemPoolTrimTo(pool, 0));
    cudaMemAccessDesc ad = {loc, cudaMemAccessFlagsProtReadWrite};
    CALL(cudaMemPoolSetAccess(pool, &ad, 1));
    int af = 0;
    CALL(cudaMemPoolGetAccess((cudaMemAccessFlags *)&af, pool, &loc));
    CALL(cudaDeviceSetMemPool(0, pool));
    CALL(cudaDeviceSetMemPool(0, dpool));
    CALL(cudaMemPoolDestroy(pool));
    // arrays, textures, surfaces
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
    cudaArray_t arr = nullptr, arr3 = nullptr;
    CALL(cudaMallocArray(&arr, &cd, 16, 16, cudaArraySurfaceLoadStore));
    CALL(cudaMalloc3DArray(&arr3, &cd, make_cudaExtent(8, 8, 4), 0));
    static float host[256];
    CALL(cudaMemcpy2DToArray(arr, 0, 0, host, 64, 64, 16, cudaMemcpyHostToDevice));
    CALL(cudaMemcpy2DFromArray(host, 64, arr, 0, 0, 64, 16, cudaMemcpyDeviceToHost));
    CALL(cudaMemcpyToArray(arr, 0, 0, host, 64, cudaMemcpyHostToDevice));
    cudaMemcpy3DParms p3 = {};
    p3.srcPtr = make_cudaPitchedPtr(host, 32, 8, 8);
    p3.dstArray = arr3;
    p3.extent = make_cudaExtent(8, 8, 4);
    p3.kind = cudaMemcpyHostToDevice;
    CALL(cudaMemcpy3D(&p3));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned afl;
    CALL(cudaArrayGetInfo(&got, &ext, &afl, arr));
    CALL(cudaGetChannelDesc(&got, arr));
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = arr;
    cudaTextureDesc td = {};
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t tex = 0;
    cudaSurfaceObject_t surf = 0;
    CALL(cudaCreateTextureObject(&tex, &rd, &td, nullptr));
    CALL(cudaCreateSurfaceObject(&surf, &rd));
    cudaResourceDesc rd2;
    CALL(cudaGetTextureObjectResourceDesc(&rd2, tex));
    cudaTextureDesc td2;
    CALL(cudaGetTextureObjectTextureDesc(&td2, tex));
    float *x = nullptr;
    CALL(cudaMalloc(&x, 4096));
    cudaResourceDesc lin = {};
    lin.resType = cudaResourceTypeLinear;
    lin.res.linear.devPtr = x;
    lin.res.linear.desc = cd;
    lin.res.linear.sizeInBytes = 4096;
    cudaTextureObject_t tex2 = 0;
    CALL(cudaCreateTextureObject(&tex2, &lin, &td, nullptr));
    fprintf(stderr, "==== tex_read<<<1, 16>>>\n");
    tex_read<<<1, 16>>>(tex, surf, x);
    CALL(cudaDestroyTextureObject(tex2));
    CALL(cudaDestroyTextureObject(tex));
    CALL(cudaDestroySurfaceObject(surf));
    CALL(cudaFreeArray(arr));
    CALL(cudaFreeArray(arr3));
    // stream capture
    cudaStream_t s, s2;
    cudaEvent_t ev;
    CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CALL(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CALL(cudaEventCreate(&ev));
    CALL(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus cs;
    CALL(cudaStreamIsCapturing(s, &cs));
    fprintf(stderr, "==== add1<<<1, 32, 0, s>>> (captured)\n");
    add1<<<1, 32, 0, s>>>(x, 32);
    CALL(cudaEventRecord(ev, s));
    CALL(cudaStreamWaitEvent(s2, ev, 0));
    CALL(cudaMemsetAsync(x, 0, 64, s2));
    CALL(cudaEventRecord(ev, s2));
    CALL(cudaStreamWaitEvent(s, ev, 0));
    CALL(cudaMemcpyAsync(host, x, 64, cudaMemcpyDeviceToHost, s));
    CALL(cudaLaunchHostFunc(s, host_fn, nullptr));
    unsigned long long cid = 0;
    cudaGraph_t cg = nullptr;
    const cudaGraphNode_t *cdeps = nullptr;
    size_t ncdeps = 0;
    CALL(cudaStreamGetCaptureInfo(s, &cs, &cid, &cg, &cdeps, nullptr, &ncdeps));
    cudaGraph_t g = nullptr;
    CALL(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge = nullptr;
    CALL(cudaGraphInstantiate(&ge, g, 0));
    CALL(cudaGraphLaunch(ge, s));
    CALL(cudaGraphUpload(ge, s));
    CALL(cudaStreamSynchronize(s));
    size_t nn = 0;
    CALL(cudaGraphGetNodes(g, nullptr, &nn));
    // the explicit API
    cudaGraph_t g2 = nullptr;
    CALL(cudaGraphCreate(&g2, 0));
    cudaGraphNode_t kn, mn, sn, hn, en, cn, rn, wn;
    int n = 32;
    void *args[] = {&x, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)add1;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(32);
    kp.kernelParams = args;
    CALL(cudaGraphAddKernelNode(&kn, g2, nullptr, 0, &kp));
    cudaKernelNodeParams kp2 = {};
    CALL(cudaGraphKernelNodeGetParams(kn, &kp2));
    CALL(cudaGraphKernelNodeSetParams(kn, &kp));
    CALL(cudaGraphAddMemcpyNode1D(&mn, g2, &kn, 1, host, x, 64, cudaMemcpyDeviceToHost));
    cudaMemsetParams mp = {};
    mp.dst = x;
    mp.value = 0;
    mp.elementSize = 4;
    mp.width = 16;
    mp.height = 1;
    CALL(cudaGraphAddMemsetNode(&sn, g2, &mn, 1, &mp));
    cudaHostNodeParams hp = {host_fn, nullptr};
    CALL(cudaGraphAddHostNode(&hn, g2, &sn, 1, &hp));
    CALL(cudaGraphAddEmptyNode(&en, g2, &hn, 1));
    CALL(cudaGraphAddChildGraphNode(&cn, g2, &en, 1, g));
    CALL(cudaGraphAddEventRecordNode(&rn, g2, &cn, 1, ev));
    CALL(cudaGraphAddEventWaitNode(&wn, g2, &rn, 1, ev));
    CALL(cudaGraphAddDependencies(g2, &kn, &en, nullptr, 1));
    CALL(cudaGraphRemoveDependencies(g2, &kn, &en, nullptr, 1));
    cudaGraphNodeType nt;
    CALL(cudaGraphNodeGetType(kn, &nt));
    size_t ne = 0;
    CALL(cudaGraphGetEdges(g2, nullptr, nullptr, nullptr, &ne));
    CALL(cudaGraphGetRootNodes(g2, nullptr, &ne));
    CALL(cudaGraphNodeGetDependencies(mn, nullptr, nullptr, &ne));
    CALL(cudaGraphNodeGetDependentNodes(kn, nullptr, nullptr, &ne));
    cudaGraph_t g3 = nullptr;
    CALL(cudaGraphClone(&g3, g2));
    cudaGraphNode_t found;
    CALL(cudaGraphNodeFindInClone(&found, kn, g3));
    cudaGraphExec_t ge2 = nullptr;
    CALL(cudaGraphInstantiateWithFlags(&ge2, g2, 0));
    CALL(cudaGraphExecKernelNodeSetParams(ge2, kn, &kp));
    CALL(cudaGraphExecMemsetNodeSetParams(ge2, sn, &mp));
    CALL(cudaGraphNodeSetEnabled(ge2, kn, 0));
    unsigned on = 0;
    CALL(cudaGraphNodeGetEnabled(ge2, kn, &on));
    cudaGraphExecUpdateResultInfo ui;
    CALL(cudaGraphExecUpdate(ge2, g3, &ui));
    CALL(cudaGraphLaunch(ge2, s));
    CALL(cudaStreamSynchronize(s));
    CALL(cudaGraphExecDestroy(ge2));
    CALL(cudaGraphExecDestroy(ge));
    CALL(cudaGraphDestroy(g3));
    CALL(cudaGraphDestroy(g2));
    CALL(cudaGraphDestroy(g));
    // peers
    int can = 0;
    CALL(cudaDeviceCanAccessPeer(&can, 0, 0));
    CALL(cudaDeviceEnablePeerAccess(0, 0));
    CALL(cudaDeviceDisablePeerAccess(0));
    float *y = nullptr;
    CALL(cudaMalloc(&y, 4096));
    CALL(cudaMemcpyPeer(y, 0, x, 0, 4096));
    CALL(cudaMemcpyPeerAsync(y, 0, x, 0, 4096, s));
    CALL(cudaStreamSynchronize(s));
    return 0;
}
