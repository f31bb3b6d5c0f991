// Kernels for the driver-API test programs, loaded by name (extern "C": unmangled) from PTX or a fatbin.
#define TILE 16

extern "C" __global__ void vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

// C = A x B for n x n row-major matrices, one TILE x TILE tile of C per block through shared memory.
extern "C" __global__ void matmul(const float *a, const float *b, float *c, int n)
{
    __shared__ float ta[TILE][TILE], tb[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (n + TILE - 1) / TILE; t++) {
        int ac = t * TILE + threadIdx.x, br = t * TILE + threadIdx.y;
        ta[threadIdx.y][threadIdx.x] = row < n && ac < n ? a[row * n + ac] : 0.0f;
        tb[threadIdx.y][threadIdx.x] = br < n && col < n ? b[br * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++)
            acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n)
        c[row * n + col] = acc;
}

__device__ int counter;

extern "C" __global__ void scale(float *x, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] *= s;
        atomicAdd(&counter, 1);
    }
}

// Texture and surface objects (drv_features.c): one texel per thread of a width x height float array.
extern "C" __global__ void tex_fetch(cudaTextureObject_t t, float *out, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < width && y < height)
        out[y * width + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}

extern "C" __global__ void surf_store(cudaSurfaceObject_t s, float v, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < width && y < height)
        surf2Dwrite(v + y * width + x, s, x * (int)sizeof(float), y);
}
