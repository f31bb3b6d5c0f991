// The workload of NVIDIA's radixSortThrust sample at its defaults, written here: `n` (1M) random 32-bit unsigned keys
// with values 0..n-1 sorted by thrust::sort_by_key `iterations` (100) times, the device vectors reset from the host
// before each sort. Checked: keys ascending, and every value names an input whose key is the key beside it.
//     radix_sort_thrust [n (1048576)] [iterations (100)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 1048576;
    const int iterations = argc > 2 ? atoi(argv[2]) : 100;
    auto t0 = std::chrono::steady_clock::now();
    thrust::host_vector<unsigned> keys(n), values(n);
    unsigned long long seed = 88172645463325252ull;
    for (int i = 0; i < n; i++) {
        seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
        keys[i] = (unsigned)seed;
    }
    thrust::sequence(values.begin(), values.end());
    thrust::device_vector<unsigned> dk, dv;
    for (int it = 0; it < iterations; it++) {
        dk = keys;
        dv = values;
        thrust::sort_by_key(dk.begin(), dk.end(), dv.begin());
    }
    thrust::host_vector<unsigned> sk = dk, sv = dv;
    for (int i = 0; i < n; i++) {
        if ((i && sk[i - 1] > sk[i]) || sv[i] >= (unsigned)n || keys[sv[i]] != sk[i]) {
            printf("FAIL radix_sort_thrust: element %d (key %u, value %u)\n", i, sk[i], sv[i]);
            return 1;
        }
    }
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("%d pairs x %d sorts: %.1f s\n", n, iterations, total);
    printf("PASS radix_sort_thrust\n");
    return 0;
}
