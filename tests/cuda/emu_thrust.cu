// Emulator end-to-end program: thrust and CUB device-wide algorithms (their kernels take the addresses of their
// parameters, use warp-synchronous code and decoupled look-back scans), each checked against a host computation:
// thrust sort / inclusive_scan / exclusive_scan / reduce / copy_if / count_if, and CUB DeviceRadixSort::SortPairs,
// DeviceScan::ExclusiveSum, DeviceReduce::Sum and ::Max, DeviceSelect::Flagged. Sizes span several CTAs (tiles).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>
#include <cub/cub.cuh>
#include <thrust/copy.h>
#include <thrust/count.h>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include "check.h"

struct IsMultipleOf3 {
    __host__ __device__ bool operator()(int x) const { return x % 3 == 0; }
};

static unsigned rng = 12345;
static int next(int mod) { rng = rng * 1103515245u + 12345u; return (int)((rng >> 8) % (unsigned)mod); }

static int thrustPart(int n) {
    std::vector<int> h(n);
    for (int i = 0; i < n; i++) h[i] = next(200001) - 100000;
    thrust::device_vector<int> d(h.begin(), h.end());

    long long sum = thrust::reduce(d.begin(), d.end(), 0LL);
    EXPECT(sum == std::accumulate(h.begin(), h.end(), 0LL));

    thrust::device_vector<int> scanned(n);
    thrust::inclusive_scan(d.begin(), d.end(), scanned.begin());
    std::vector<int> ref(n);
    std::partial_sum(h.begin(), h.end(), ref.begin());
    thrust::host_vector<int> got = scanned;
    for (int i = 0; i < n; i++) EXPECT(got[i] == ref[i]);

    thrust::exclusive_scan(d.begin(), d.end(), scanned.begin(), 7);
    got = scanned;
    for (int i = 0, run = 7; i < n; run += h[i], i++) EXPECT(got[i] == run);

    thrust::device_vector<int> picked(n);
    auto end = thrust::copy_if(d.begin(), d.end(), picked.begin(), IsMultipleOf3());
    std::vector<int> refPicked;
    std::copy_if(h.begin(), h.end(), std::back_inserter(refPicked), IsMultipleOf3());
    EXPECT((size_t)(end - picked.begin()) == refPicked.size());
    got = picked;
    for (size_t i = 0; i < refPicked.size(); i++) EXPECT(got[i] == refPicked[i]);
    EXPECT((size_t)thrust::count_if(d.begin(), d.end(), IsMultipleOf3()) == refPicked.size());

    thrust::sort(d.begin(), d.end());
    std::sort(h.begin(), h.end());
    got = d;
    for (int i = 0; i < n; i++) EXPECT(got[i] == h[i]);
    return 0;
}

static int cubPart(int n) {
    std::vector<float> keys(n);
    std::vector<int> vals(n);
    std::vector<unsigned char> flags(n);
    for (int i = 0; i < n; i++) {
        keys[i] = (float)(next(100000) - 50000) / 64.0f;
        vals[i] = i;
        flags[i] = (unsigned char)(next(4) == 0);
    }
    float *dk, *dk2, *dmax;
    int *dv, *dv2, *dsum, *dsel, *dnsel, *dscan;
    unsigned char *dflags;
    CHECK(cudaMalloc(&dk, n * sizeof(float)));
    CHECK(cudaMalloc(&dk2, n * sizeof(float)));
    CHECK(cudaMalloc(&dv, n * sizeof(int)));
    CHECK(cudaMalloc(&dv2, n * sizeof(int)));
    CHECK(cudaMalloc(&dscan, n * sizeof(int)));
    CHECK(cudaMalloc(&dsel, n * sizeof(int)));
    CHECK(cudaMalloc(&dnsel, sizeof(int)));
    CHECK(cudaMalloc(&dsum, sizeof(int)));
    CHECK(cudaMalloc(&dmax, sizeof(float)));
    CHECK(cudaMalloc(&dflags, n));
    CHECK(cudaMemcpy(dk, keys.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv, vals.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dflags, flags.data(), n, cudaMemcpyHostToDevice));

    // one temporary buffer, as large as the largest request
    size_t need[5] = {0, 0, 0, 0, 0}, cap = 0;
    CHECK(cub::DeviceRadixSort::SortPairs(nullptr, need[0], dk, dk2, dv, dv2, n));
    CHECK(cub::DeviceScan::ExclusiveSum(nullptr, need[1], dv, dscan, n));
    CHECK(cub::DeviceReduce::Sum(nullptr, need[2], dv, dsum, n));
    CHECK(cub::DeviceReduce::Max(nullptr, need[3], dk, dmax, n));
    CHECK(cub::DeviceSelect::Flagged(nullptr, need[4], dv, dflags, dsel, dnsel, n));
    for (size_t s : need) cap = std::max(cap, s);
    void *tmp;
    CHECK(cudaMalloc(&tmp, cap));

    CHECK(cub::DeviceRadixSort::SortPairs(tmp, need[0], dk, dk2, dv, dv2, n));
    std::vector<float> k2(n);
    std::vector<int> v2(n);
    CHECK(cudaMemcpy(k2.data(), dk2, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(v2.data(), dv2, n * sizeof(int), cudaMemcpyDeviceToHost));
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys[a] < keys[b]; });
    for (int i = 0; i < n; i++) EXPECT(k2[i] == keys[order[i]] && v2[i] == order[i]);   // radix sort is stable

    CHECK(cub::DeviceScan::ExclusiveSum(tmp, need[1], dv, dscan, n));
    std::vector<int> sc(n);
    CHECK(cudaMemcpy(sc.data(), dscan, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(sc[i] == i * (i - 1) / 2);

    CHECK(cub::DeviceReduce::Sum(tmp, need[2], dv, dsum, n));
    CHECK(cub::DeviceReduce::Max(tmp, need[3], dk, dmax, n));
    int s;
    float mx;
    CHECK(cudaMemcpy(&s, dsum, sizeof s, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&mx, dmax, sizeof mx, cudaMemcpyDeviceToHost));
    EXPECT(s == n * (n - 1) / 2);
    EXPECT(mx == *std::max_element(keys.begin(), keys.end()));

    CHECK(cub::DeviceSelect::Flagged(tmp, need[4], dv, dflags, dsel, dnsel, n));
    int nsel;
    CHECK(cudaMemcpy(&nsel, dnsel, sizeof nsel, cudaMemcpyDeviceToHost));
    std::vector<int> sel(n);
    CHECK(cudaMemcpy(sel.data(), dsel, n * sizeof(int), cudaMemcpyDeviceToHost));
    int k = 0;
    for (int i = 0; i < n; i++)
        if (flags[i]) { EXPECT(k < nsel && sel[k] == i); k++; }
    EXPECT(k == nsel);
    return 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    if (thrustPart(n) || cubPart(n)) return 1;
    CHECK(cudaDeviceSynchronize());
    printf("PASS emu_thrust (n=%d)\n", n);
    return 0;
}
