// A block sum as CUDA's reduction samples write it (no warp-synchronous tail): each thread adds a grid-stride run of
// the input, then the block adds its threads' sums in shared memory, a barrier after each halving step.
__global__ void blockSum(float *out, const float *in, int n)
{
    __shared__ float s[256];
    float v = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        v += in[i];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k)
            s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = s[0];
}
