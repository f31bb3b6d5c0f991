// Kernels of the device-time tests and benchmark (tests/daemon/test_device_time.py, bench/device_time_bench.py),
// loaded as PTX through the protocol: a long kernel of one block and a short one.
extern "C" __global__ void spin(unsigned *out, unsigned iters) {
    unsigned acc = threadIdx.x;
    for (unsigned i = 0; i < iters; i++) acc = acc * 1664525u + 1013904223u;
    out[threadIdx.x] = acc;
}

extern "C" __global__ void add_one(unsigned *p, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}
