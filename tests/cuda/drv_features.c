// The runtime features through the driver API (libvcuda), checked against host references: graphs by stream
// capture and by the explicit API (instantiate, launch, per-exec parameters, update), managed memory, mapped and
// registered host memory, stream-ordered pools, arrays with their copies, texture and surface objects, and with
// "peer" two GPUs: peer access and copies between them.
// Usage: drv_features PTX_FILE [peer]. Prints "OK <checks>" on success.
#include <string.h>

#include "drv_check.h"

static CUmodule mod;
static CUfunction fscale, fvadd, ftex, fsurf;

static void host_count(void *arg) { (*(int *)arg)++; }

/* ------------------------------------------------------------------------------------------ graphs */
static void test_capture(void)
{
    enum { N = 1000 };
    size_t bytes = N * sizeof(float);
    float *in = malloc(bytes), *out = malloc(bytes);
    for (int i = 0; i < N; i++)
        in[i] = (float)i;
    CUdeviceptr d;
    CUstream s;
    int ran = 0;
    DCHECK(cuMemAlloc(&d, bytes));
    DCHECK(cuMemsetD32(d, 0, N));
    DCHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    CUstreamCaptureStatus st;
    DCHECK(cuStreamIsCapturing(s, &st));
    OKC(st == CU_STREAM_CAPTURE_STATUS_NONE);
    DCHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    DCHECK(cuStreamIsCapturing(s, &st));
    OKC(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    float k = 2.0f;
    int n = N;
    void *params[] = { &d, &k, &n };
    DCHECK(cuMemcpyHtoDAsync(d, in, bytes, s));
    DCHECK(cuLaunchKernel(fscale, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, params, NULL));
    DCHECK(cuLaunchHostFunc(s, host_count, &ran));
    DCHECK(cuMemcpyDtoHAsync(out, d, bytes, s));
    cuuint64_t id = 0;
    CUgraph cg = NULL;
    const CUgraphNode *deps = NULL;
    size_t ndeps = 0;
    DCHECK(cuStreamGetCaptureInfo(s, &st, &id, &cg, &deps, NULL, &ndeps));
    OKC(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0 && cg && ndeps == 1);
    CUgraphNodeType type;
    DCHECK(cuGraphNodeGetType(deps[0], &type));
    OKC(type == CU_GRAPH_NODE_TYPE_MEMCPY);
    DEXPECT_ERR(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);   // invalidates the capture
    CUgraph bad;
    DEXPECT_ERR(cuStreamEndCapture(s, &bad), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    checks += 2;

    DCHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    DCHECK(cuMemcpyHtoDAsync(d, in, bytes, s));
    DCHECK(cuLaunchKernel(fscale, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, params, NULL));
    DCHECK(cuLaunchHostFunc(s, host_count, &ran));
    DCHECK(cuMemcpyDtoHAsync(out, d, bytes, s));
    CUgraph g;
    DCHECK(cuStreamEndCapture(s, &g));
    memset(out, 0, bytes);
    DCHECK(cuMemcpyDtoH(out, d, bytes));
    OKC(out[5] == 0.0f && ran == 0);                     // captured, not run
    size_t nn = 0;
    DCHECK(cuGraphGetNodes(g, NULL, &nn));
    OKC(nn == 4);
    CUgraphExec x;
    DCHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    for (int rep = 0; rep < 3; rep++) {
        memset(out, 0, bytes);
        DCHECK(cuGraphLaunch(x, s));
        DCHECK(cuStreamSynchronize(s));
        for (int i = 0; i < N; i++)
            DEXPECT(out[i] == 2.0f * i);
        checks++;
    }
    OKC(ran == 3);
    DCHECK(cuGraphExecDestroy(x));
    DCHECK(cuGraphDestroy(g));
    DCHECK(cuStreamDestroy(s));
    DCHECK(cuMemFree(d));
    free(in), free(out);
}

static void test_explicit_graph(void)
{
    enum { N = 512 };
    size_t bytes = N * sizeof(float);
    float *out = malloc(bytes);
    CUdeviceptr d;
    DCHECK(cuMemAlloc(&d, bytes));
    CUgraph g, child;
    DCHECK(cuGraphCreate(&g, 0));
    DCHECK(cuGraphCreate(&child, 0));
    // memset d to 1.0f, scale by k, copy to the host; the scale inside a child graph
    CUDA_MEMSET_NODE_PARAMS mp = { 0 };
    float one = 1.0f;
    mp.dst = d;
    memcpy(&mp.value, &one, 4);
    mp.elementSize = 4;
    mp.width = N;
    mp.height = 1;
    CUcontext ctx;
    DCHECK(cuCtxGetCurrent(&ctx));
    CUgraphNode set, kern, child_n, copy, ev_rec, ev_wait;
    DCHECK(cuGraphAddMemsetNode(&set, g, NULL, 0, &mp, ctx));
    float k = 3.0f;
    int n = N;
    void *params[] = { &d, &k, &n };
    CUDA_KERNEL_NODE_PARAMS kp = { 0 };
    kp.func = fscale;
    kp.gridDimX = (N + 127) / 128, kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 128, kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = params;
    DCHECK(cuGraphAddKernelNode(&kern, child, NULL, 0, &kp));
    DCHECK(cuGraphAddChildGraphNode(&child_n, g, &set, 1, child));
    CUevent e;
    DCHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    DCHECK(cuGraphAddEventRecordNode(&ev_rec, g, &child_n, 1, e));
    DCHECK(cuGraphAddEventWaitNode(&ev_wait, g, &ev_rec, 1, e));
    CUDA_MEMCPY3D c = { 0 };
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = d;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = out;
    c.WidthInBytes = bytes;
    c.Height = c.Depth = 1;
    DCHECK(cuGraphAddMemcpyNode(&copy, g, &ev_wait, 1, &c, ctx));
    CUDA_KERNEL_NODE_PARAMS got;
    DCHECK(cuGraphKernelNodeGetParams(kern, &got));
    OKC(got.gridDimX == kp.gridDimX && got.blockDimX == 128 && *(float *)got.kernelParams[1] == 3.0f);
    CUDA_MEMCPY3D gc;
    DCHECK(cuGraphMemcpyNodeGetParams(copy, &gc));
    OKC(gc.srcDevice == d && gc.dstHost == out && gc.WidthInBytes == bytes && gc.dstMemoryType == CU_MEMORYTYPE_HOST);
    size_t nroots = 0, nedges = 0;
    DCHECK(cuGraphGetRootNodes(g, NULL, &nroots));
    DCHECK(cuGraphGetEdges(g, NULL, NULL, NULL, &nedges));
    OKC(nroots == 1 && nedges == 4);
    DEXPECT_ERR(cuGraphAddDependencies(g, &ev_rec, &ev_wait, NULL, 1), CUDA_ERROR_INVALID_VALUE);   // duplicate
    checks++;

    CUgraphExec x;
    DCHECK(cuGraphInstantiateWithFlags(&x, g, 0));
    DCHECK(cuGraphLaunch(x, NULL));
    DCHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++)
        DEXPECT(out[i] == 3.0f);
    checks++;

    // a new parameter in the exec only: the graph keeps its own
    CUgraphNode kern_in_g;
    CUgraph embedded;
    DCHECK(cuGraphChildGraphNodeGetGraph(child_n, &embedded));
    size_t one_node = 1;
    DCHECK(cuGraphGetNodes(embedded, &kern_in_g, &one_node));
    OKC(one_node == 1);
    // an update from a graph of the same shape with the scale 5
    CUgraph g2;
    DCHECK(cuGraphClone(&g2, g));
    CUgraphNode child2;
    DCHECK(cuGraphNodeFindInClone(&child2, child_n, g2));
    CUgraph emb2;
    DCHECK(cuGraphChildGraphNodeGetGraph(child2, &emb2));
    CUgraphNode k2;
    one_node = 1;
    DCHECK(cuGraphGetNodes(emb2, &k2, &one_node));
    k = 5.0f;
    DCHECK(cuGraphKernelNodeSetParams(k2, &kp));
    CUgraphExecUpdateResultInfo info;
    DCHECK(cuGraphExecUpdate(x, g2, &info));
    OKC(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
    DCHECK(cuGraphLaunch(x, NULL));
    DCHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++)
        DEXPECT(out[i] == 5.0f);
    checks++;
    // a graph of another shape is refused and the exec keeps what it had
    CUgraph g3;
    CUgraphNode empty;
    DCHECK(cuGraphCreate(&g3, 0));
    DCHECK(cuGraphAddEmptyNode(&empty, g3, NULL, 0));
    DEXPECT_ERR(cuGraphExecUpdate(x, g3, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    OKC(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    // a disabled node: the memset does not run, the scale applies to what is there
    DCHECK(cuGraphNodeSetEnabled(x, set, 0));
    unsigned on = 1;
    DCHECK(cuGraphNodeGetEnabled(x, set, &on));
    OKC(on == 0);
    DCHECK(cuGraphLaunch(x, NULL));
    DCHECK(cuCtxSynchronize());
    for (int i = 0; i < N; i++)
        DEXPECT(out[i] == 25.0f);
    checks++;
    DCHECK(cuGraphExecDestroy(x));
    DCHECK(cuGraphDestroy(g3));
    DCHECK(cuGraphDestroy(g2));
    DCHECK(cuGraphDestroy(child));
    DCHECK(cuGraphDestroy(g));
    DCHECK(cuEventDestroy(e));
    DCHECK(cuMemFree(d));
    free(out);
}

/* ------------------------------------------------------------------------------------------ managed, mapped */
static void scale_sync(CUdeviceptr p, float k, int n)
{
    void *params[] = { &p, &k, &n };
    DCHECK(cuLaunchKernel(fscale, (unsigned)(n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
    DCHECK(cuCtxSynchronize());
}

static void test_managed(void)
{
    int v = 0;
    DCHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0));
    OKC(v == 1);
    enum { N = 3000 };
    CUdeviceptr m;
    DCHECK(cuMemAllocManaged(&m, N * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    float *h = (float *)(uintptr_t)m;                    // one pointer on both sides
    for (int i = 0; i < N; i++)
        DEXPECT(h[i] == 0.0f);
    for (int i = 0; i < N; i++)
        h[i] = (float)i;
    scale_sync(m, 3.0f, N);
    for (int i = 0; i < N; i++)
        DEXPECT(h[i] == 3.0f * i);
    checks++;
    unsigned is_managed = 0;
    CUmemorytype mt = 0;
    DCHECK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m + 40));
    DCHECK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m));
    CUdeviceptr base;
    size_t size;
    DCHECK(cuMemGetAddressRange(&base, &size, m + 100));
    OKC(is_managed == 1 && mt == CU_MEMORYTYPE_DEVICE && base == m && size >= N * sizeof(float));
    CUmemLocation dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 };
    DCHECK(cuMemAdvise(m, N * sizeof(float), CU_MEM_ADVISE_SET_READ_MOSTLY, dev0));
    int rm = 0;
    DCHECK(cuMemRangeGetAttribute(&rm, 4, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, N * sizeof(float)));
    OKC(rm == 1);
    h[7] = -1.0f;                                        // a host write reaches the device before its next work
    DCHECK(cuMemPrefetchAsync(m, N * sizeof(float), dev0, 0, NULL));
    scale_sync(m, 2.0f, N);
    OKC(h[7] == -2.0f && h[8] == 48.0f);
    DEXPECT_ERR(cuMemAllocManaged(&m, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    checks++;
    DCHECK(cuMemFree((CUdeviceptr)(uintptr_t)h));

    // mapped host memory: the same address for the device
    float *mh;
    CUdeviceptr md;
    DCHECK(cuMemHostAlloc((void **)&mh, 1024 * sizeof(float), CU_MEMHOSTALLOC_DEVICEMAP));
    DCHECK(cuMemHostGetDevicePointer(&md, mh, 0));
    OKC(md == (CUdeviceptr)(uintptr_t)mh);
    unsigned flags = 0;
    DCHECK(cuMemHostGetFlags(&flags, mh));
    OKC(flags & CU_MEMHOSTALLOC_DEVICEMAP);
    for (int i = 0; i < 1024; i++)
        mh[i] = (float)i;
    scale_sync(md, 4.0f, 1024);
    for (int i = 0; i < 1024; i++)
        DEXPECT(mh[i] == 4.0f * i);
    checks++;
    DCHECK(cuMemFreeHost(mh));

    // registered host memory: a device copy of the program's own pages
    float *r = aligned_alloc(4096, 2048 * sizeof(float));
    for (int i = 0; i < 2048; i++)
        r[i] = (float)i;
    DCHECK(cuMemHostRegister(r, 2048 * sizeof(float), CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr rd;
    DCHECK(cuMemHostGetDevicePointer(&rd, r, 0));
    scale_sync(rd, 0.5f, 2048);
    DCHECK(cuMemHostUnregister(r));
    for (int i = 0; i < 2048; i++)
        DEXPECT(r[i] == 0.5f * i);
    checks++;
    free(r);
}

/* ------------------------------------------------------------------------------------------ pools */
static void test_pools(void)
{
    CUmemoryPool def, cur, mine;
    DCHECK(cuDeviceGetDefaultMemPool(&def, 0));
    DCHECK(cuDeviceGetMemPool(&cur, 0));
    OKC(def == cur);
    CUstream s;
    DCHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    DCHECK(cuMemAllocAsync(&a, 1 << 16, s));
    DCHECK(cuMemsetD32Async(a, 7, (1 << 16) / 4, s));
    DCHECK(cuMemFreeAsync(a, s));
    DCHECK(cuMemAllocAsync(&b, 1 << 16, s));             // the freed block again: stream order makes it safe
    OKC(b == a);
    cuuint64_t used = 0, thr = 1 << 20;
    DCHECK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    OKC(used >= (1 << 16));
    DCHECK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    DCHECK(cuMemFreeAsync(b, s));
    DCHECK(cuStreamSynchronize(s));

    CUmemPoolProps props = { 0 };
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    props.maxSize = 1 << 20;
    DCHECK(cuMemPoolCreate(&mine, &props));
    CUdeviceptr c;
    DCHECK(cuMemAllocFromPoolAsync(&c, 512 << 10, mine, s));
    DEXPECT_ERR(cuMemAllocFromPoolAsync(&b, 768 << 10, mine, s), CUDA_ERROR_OUT_OF_MEMORY);   // over maxSize
    checks++;
    float v = 2.5f, host[16];
    DCHECK(cuMemsetD32Async(c, *(unsigned *)&v, 16, s));
    DCHECK(cuMemcpyDtoHAsync(host, c, sizeof host, s));
    DCHECK(cuStreamSynchronize(s));
    OKC(host[0] == 2.5f && host[15] == 2.5f);
    DCHECK(cuMemFreeAsync(c, s));
    DCHECK(cuMemPoolTrimTo(mine, 0));
    cuuint64_t reserved = 1;
    DCHECK(cuMemPoolGetAttribute(mine, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    OKC(reserved == 0);
    DCHECK(cuMemPoolDestroy(mine));
    DEXPECT_ERR(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
    checks++;
    DCHECK(cuStreamDestroy(s));
}

/* ------------------------------------------------------------------------------------------ arrays, textures */
static void test_arrays(void)
{
    enum { W = 37, H = 9 };
    float img[W * H], back[W * H], out[W * H];
    for (int i = 0; i < W * H; i++)
        img[i] = 0.25f * i - 3.0f;
    CUarray a;
    CUDA_ARRAY3D_DESCRIPTOR ad = { W, H, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SURFACE_LDST };
    DCHECK(cuArray3DCreate(&a, &ad));
    CUDA_ARRAY3D_DESCRIPTOR gd;
    DCHECK(cuArray3DGetDescriptor(&gd, a));
    OKC(gd.Width == W && gd.Height == H && gd.Depth == 0 && gd.Format == CU_AD_FORMAT_FLOAT && gd.NumChannels == 1 &&
        gd.Flags == CUDA_ARRAY3D_SURFACE_LDST);
    CUDA_MEMCPY2D up = { 0 };
    up.srcMemoryType = CU_MEMORYTYPE_HOST;
    up.srcHost = img;
    up.srcPitch = W * sizeof(float);
    up.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    up.dstArray = a;
    up.WidthInBytes = W * sizeof(float);
    up.Height = H;
    DCHECK(cuMemcpy2D(&up));
    CUDA_MEMCPY2D down = { 0 };
    down.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    down.srcArray = a;
    down.dstMemoryType = CU_MEMORYTYPE_HOST;
    down.dstHost = back;
    down.dstPitch = W * sizeof(float);
    down.WidthInBytes = W * sizeof(float);
    down.Height = H;
    DCHECK(cuMemcpy2D(&down));
    OKC(memcmp(img, back, sizeof img) == 0);
    // the 1D form: bytes from an offset, row after row
    float row[W + 3];
    DCHECK(cuMemcpyAtoH(row, a, (W - 1) * sizeof(float), sizeof row));
    OKC(row[0] == img[W - 1] && row[1] == img[W] && row[W + 2] == img[2 * W + 1]);

    // a texture object over the array: each thread fetches its texel
    CUDA_RESOURCE_DESC rd = { 0 };
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = a;
    CUDA_TEXTURE_DESC td = { 0 };
    td.addressMode[0] = td.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP;
    td.filterMode = CU_TR_FILTER_MODE_POINT;
    CUtexObject t;
    DCHECK(cuTexObjectCreate(&t, &rd, &td, NULL));
    CUDA_RESOURCE_DESC grd;
    DCHECK(cuTexObjectGetResourceDesc(&grd, t));
    OKC(grd.resType == CU_RESOURCE_TYPE_ARRAY && grd.res.array.hArray == a);
    CUdeviceptr d;
    DCHECK(cuMemAlloc(&d, sizeof out));
    int w = W, h = H;
    void *tp[] = { &t, &d, &w, &h };
    DCHECK(cuLaunchKernel(ftex, (W + 31) / 32, H, 1, 32, 1, 1, 0, NULL, tp, NULL));
    DCHECK(cuMemcpyDtoH(out, d, sizeof out));
    OKC(memcmp(img, out, sizeof img) == 0);
    // a surface object: the kernel stores, the array has it
    CUsurfObject sf;
    DCHECK(cuSurfObjectCreate(&sf, &rd));
    float base = 100.0f;
    void *sp[] = { &sf, &base, &w, &h };
    DCHECK(cuLaunchKernel(fsurf, (W + 31) / 32, H, 1, 32, 1, 1, 0, NULL, sp, NULL));
    DCHECK(cuMemcpy2D(&down));
    for (int i = 0; i < W * H; i++)
        DEXPECT(back[i] == 100.0f + i);
    checks++;
    DCHECK(cuSurfObjectDestroy(sf));
    DCHECK(cuTexObjectDestroy(t));
    DEXPECT_ERR(cuTexObjectGetResourceDesc(&grd, t), CUDA_ERROR_INVALID_VALUE);
    checks++;

    // a 3D array through cuMemcpy3D, both ways
    enum { X = 6, Y = 5, Z = 4 };
    unsigned vol[X * Y * Z], vback[X * Y * Z];
    for (int i = 0; i < X * Y * Z; i++)
        vol[i] = 0xabc000u + (unsigned)i;
    CUarray v;
    CUDA_ARRAY3D_DESCRIPTOR vd = { X, Y, Z, CU_AD_FORMAT_UNSIGNED_INT32, 1, 0 };
    DCHECK(cuArray3DCreate(&v, &vd));
    CUDA_MEMCPY3D c3 = { 0 };
    c3.srcMemoryType = CU_MEMORYTYPE_HOST;
    c3.srcHost = vol;
    c3.srcPitch = X * 4;
    c3.srcHeight = Y;
    c3.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c3.dstArray = v;
    c3.WidthInBytes = X * 4;
    c3.Height = Y;
    c3.Depth = Z;
    DCHECK(cuMemcpy3D(&c3));
    CUDA_MEMCPY3D b3 = { 0 };
    b3.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    b3.srcArray = v;
    b3.dstMemoryType = CU_MEMORYTYPE_HOST;
    b3.dstHost = vback;
    b3.dstPitch = X * 4;
    b3.dstHeight = Y;
    b3.WidthInBytes = X * 4;
    b3.Height = Y;
    b3.Depth = Z;
    DCHECK(cuMemcpy3D(&b3));
    OKC(memcmp(vol, vback, sizeof vol) == 0);
    b3.srcXInBytes = 2;                                  // not a whole element
    DEXPECT_ERR(cuMemcpy3D(&b3), CUDA_ERROR_INVALID_VALUE);
    DEXPECT_ERR(cuArrayDestroy((CUarray)img), CUDA_ERROR_INVALID_HANDLE);
    checks += 2;
    DCHECK(cuArrayDestroy(v));
    DCHECK(cuArrayDestroy(a));
    DCHECK(cuMemFree(d));
}

/* ------------------------------------------------------------------------------------------ peers */
static void test_peers(void)
{
    int n = 0, can = -1;
    DCHECK(cuDeviceGetCount(&n));
    DEXPECT(n >= 2);
    DCHECK(cuDeviceCanAccessPeer(&can, 0, 1));
    CUcontext c0, c1;
    DCHECK(cuDevicePrimaryCtxRetain(&c0, 0));
    DCHECK(cuDevicePrimaryCtxRetain(&c1, 1));
    enum { N = 4096 };
    float a[N], b[N], c[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)i, b[i] = 1.0f;
    CUdeviceptr a1, b0, c0buf, a0;
    DCHECK(cuCtxSetCurrent(c1));
    DCHECK(cuMemAlloc(&a1, sizeof a));
    DCHECK(cuMemcpyHtoD(a1, a, sizeof a));
    DCHECK(cuCtxSetCurrent(c0));
    DCHECK(cuMemAlloc(&a0, sizeof a));
    DCHECK(cuMemAlloc(&b0, sizeof b));
    DCHECK(cuMemAlloc(&c0buf, sizeof c));
    DCHECK(cuMemcpyHtoD(b0, b, sizeof b));
    DCHECK(cuMemcpyPeer(a0, c0, a1, c1, sizeof a));     // GPU1 -> GPU0 (one daemon, or daemon to daemon)
    int nn = N;
    void *p[] = { &a0, &b0, &c0buf, &nn };
    DCHECK(cuLaunchKernel(fvadd, N / 256, 1, 1, 256, 1, 1, 0, NULL, p, NULL));
    DCHECK(cuMemcpyDtoH(c, c0buf, sizeof c));
    for (int i = 0; i < N; i++)
        DEXPECT(c[i] == i + 1.0f);
    checks++;
    if (can) {                                           // kernels on GPU0 read GPU1's memory directly
        DEXPECT_ERR(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
        DCHECK(cuCtxEnablePeerAccess(c1, 0));
        DEXPECT_ERR(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
        void *q[] = { &a1, &b0, &c0buf, &nn };
        DCHECK(cuMemsetD32(c0buf, 0, N));
        DCHECK(cuLaunchKernel(fvadd, N / 256, 1, 1, 256, 1, 1, 0, NULL, q, NULL));
        DCHECK(cuMemcpyDtoH(c, c0buf, sizeof c));
        for (int i = 0; i < N; i++)
            DEXPECT(c[i] == i + 1.0f);
        DCHECK(cuCtxDisablePeerAccess(c1));
        checks += 3;
    } else {
        DEXPECT_ERR(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
        checks++;
    }
    printf("peer access %s\n", can ? "yes" : "no");
    DCHECK(cuMemFree(a0));
    DCHECK(cuMemFree(b0));
    DCHECK(cuMemFree(c0buf));
    DCHECK(cuCtxSetCurrent(c1));
    DCHECK(cuMemFree(a1));
    DCHECK(cuDevicePrimaryCtxRelease(1));
    DCHECK(cuCtxSetCurrent(c0));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        printf("usage: %s PTX_FILE [peer]\n", argv[0]);
        return 2;
    }
    size_t len;
    char *ptx = drv_read_file(argv[1], &len);
    CUcontext ctx;
    DCHECK(cuInit(0));
    DCHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    DCHECK(cuCtxSetCurrent(ctx));
    DCHECK(cuModuleLoadData(&mod, ptx));
    DCHECK(cuModuleGetFunction(&fscale, mod, "scale"));
    DCHECK(cuModuleGetFunction(&fvadd, mod, "vadd"));
    DCHECK(cuModuleGetFunction(&ftex, mod, "tex_fetch"));
    DCHECK(cuModuleGetFunction(&fsurf, mod, "surf_store"));
    if (argc > 2 && !strcmp(argv[2], "peer")) {
        test_peers();
    } else {
        test_capture();
        test_explicit_graph();
        test_managed();
        test_pools();
        test_arrays();
    }
    DCHECK(cuModuleUnload(mod));
    DCHECK(cuDevicePrimaryCtxRelease(0));
    free(ptx);
    printf("OK %ld\n", checks);
    return 0;
}
