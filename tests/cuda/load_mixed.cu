// One client of the mixed-load test (tests/daemon/test_flow_control.py, bench/load_bench.py): NOPS operations
// chosen by a seeded generator over up to 8 live allocations, every byte of every device-to-host copy compared with
// a host model of device memory.
//   load_mixed SEED NOPS [BURST_PAYLOAD]
// Operations: cudaMalloc (filled by a blocking copy), cudaFree, blocking and asynchronous host-to-device copies,
// cudaMemsetAsync, device-to-device copies, a kernel that XORs a range with a key, bursts of 16-256 small
// asynchronous operations, stream and device synchronizations, and blocking device-to-host copies that check the
// model. With BURST_PAYLOAD, bursts are 256-767 asynchronous copies of BURST_PAYLOAD bytes each on the legacy
// stream: equal frames, whose size the caller may choose to divide 64 KiB (it knows the wire format), so that a
// lagging daemon's reads fill its 64 KiB read buffer exactly with whole frames before the client goes quiet to wait
// for a reply (the pattern that left reading paused: issue 23).
// Prints "DONE ops=N checked=BYTES mismatches=M" and exits 0 only when M is 0; a failed CUDA call prints
// "FAIL ..." (check.h) and exits 1.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"

__global__ void xor_range(unsigned char *p, unsigned n, unsigned char key) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] ^= key;
}

struct Rng {
    uint64_t s;
    uint32_t next() {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return (uint32_t)(s >> 33);
    }
    uint32_t below(uint32_t n) { return n ? next() % n : 0; }
};

struct Alloc {
    unsigned char *dev = nullptr;
    std::vector<unsigned char> model;   // what the device holds once all issued work ran
};

static const int MAX_ALLOCS = 8;
static Alloc allocs[MAX_ALLOCS];
static Rng rng;
static unsigned long long checked = 0, mismatches = 0;
static cudaStream_t stream;
static std::vector<std::vector<unsigned char>> pending;   // host sources of asynchronous copies, kept until a sync
static size_t burst_payload = 0;

static void fill_random(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)rng.next();
}

static int live(int *out) {
    int n = 0;
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].dev) out[n++] = i;
    return n;
}

// A random [off, off+len) inside allocation a, len >= 1 and at most `cap`.
static void range(const Alloc &a, size_t cap, size_t *off, size_t *len) {
    size_t size = a.model.size();
    *len = 1 + rng.below((uint32_t)(size < cap ? size : cap));
    *off = rng.below((uint32_t)(size - *len + 1));
}

static void check_range(const Alloc &a, size_t off, size_t len) {
    std::vector<unsigned char> got(len);
    CHECK(cudaMemcpy(got.data(), a.dev + off, len, cudaMemcpyDeviceToHost));
    pending.clear();   // a blocking copy waits for all earlier work of the legacy stream's device
    for (size_t i = 0; i < len; i++)
        if (got[i] != a.model[off + i]) mismatches++;
    checked += len;
}

static void op_malloc(int slot) {
    size_t size = 256 + rng.below(256 << 10);
    Alloc &a = allocs[slot];
    CHECK(cudaMalloc(&a.dev, size));
    a.model.resize(size);
    fill_random(a.model.data(), size);
    CHECK(cudaMemcpy(a.dev, a.model.data(), size, cudaMemcpyHostToDevice));
}

static void op_async_small(Alloc &a, bool tiny) {
    size_t off, len;
    switch (tiny ? 1 + rng.below(2) : rng.below(3)) {
    case 0: {   // a pageable copy below the daemon's direct-read size: the client sends it fire-and-forget
        range(a, rng.below(4) ? 192 : 60 << 10, &off, &len);
        pending.emplace_back(len);
        fill_random(pending.back().data(), len);
        memcpy(&a.model[off], pending.back().data(), len);
        CHECK(cudaMemcpyAsync(a.dev + off, pending.back().data(), len, cudaMemcpyHostToDevice, stream));
        break;
    }
    case 1: {
        range(a, 4096, &off, &len);
        unsigned char v = (unsigned char)rng.next();
        memset(&a.model[off], v, len);
        CHECK(cudaMemsetAsync(a.dev + off, v, len, stream));
        break;
    }
    default: {
        range(a, 1024, &off, &len);
        unsigned char key = (unsigned char)rng.next();
        for (size_t i = 0; i < len; i++) a.model[off + i] ^= key;
        xor_range<<<(unsigned)((len + 255) / 256), 256, 0, stream>>>(a.dev + off, (unsigned)len, key);
        CHECK(cudaGetLastError());
    }
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: load_mixed SEED NOPS\n");
        return 2;
    }
    rng.s = strtoull(argv[1], nullptr, 10) * 2654435761ULL + 1;
    long nops = strtol(argv[2], nullptr, 10);
    burst_payload = argc > 3 ? strtoul(argv[3], nullptr, 10) : 0;
    CHECK(cudaStreamCreate(&stream));
    op_malloc(0);
    long ops = 0;
    while (ops < nops) {
        int ids[MAX_ALLOCS];
        int n = live(ids);
        uint32_t r = rng.below(100);
        ops++;
        if (n == 0 || (r < 8 && n < MAX_ALLOCS)) {
            int slot = 0;
            while (allocs[slot].dev) slot++;
            op_malloc(slot);
            continue;
        }
        Alloc &a = allocs[ids[rng.below(n)]];
        size_t off, len;
        if (r < 12) {                                   // free (after checking all of it)
            if (n > 1) {
                CHECK(cudaStreamSynchronize(stream));
                check_range(a, 0, a.model.size());
                CHECK(cudaFree(a.dev));
                a.dev = nullptr;
                a.model.clear();
            }
        } else if (r < 22) {                            // blocking host-to-device copy
            range(a, 64 << 10, &off, &len);
            CHECK(cudaStreamSynchronize(stream));
            fill_random(&a.model[off], len);
            CHECK(cudaMemcpy(a.dev + off, &a.model[off], len, cudaMemcpyHostToDevice));
        } else if (r < 30) {                            // device-to-device copy (on the stream, after its work)
            Alloc &b = allocs[ids[rng.below(n)]];
            range(a, 32 << 10, &off, &len);
            if (len > b.model.size()) len = b.model.size();
            size_t src = rng.below((uint32_t)(b.model.size() - len + 1));
            memmove(&a.model[off], &b.model[src], len);
            CHECK(cudaMemcpyAsync(a.dev + off, b.dev + src, len, cudaMemcpyDeviceToDevice, stream));
        } else if (r < 55) {                            // one small asynchronous op
            op_async_small(a, false);
        } else if (r < 65) {                            // a burst, then (next) whatever comes
            if (burst_payload && a.model.size() >= burst_payload) {
                int burst = 256 + (int)rng.below(512);
                for (int i = 0; i < burst && ops < nops; i++, ops++) {
                    size_t at = rng.below((uint32_t)(a.model.size() - burst_payload + 1));
                    pending.emplace_back(burst_payload);
                    fill_random(pending.back().data(), burst_payload);
                    memcpy(&a.model[at], pending.back().data(), burst_payload);
                    CHECK(cudaMemcpyAsync(a.dev + at, pending.back().data(), burst_payload, cudaMemcpyHostToDevice,
                                          0));
                }
            } else {
                int burst = 64 + (int)rng.below(449);
                for (int i = 0; i < burst && ops < nops; i++, ops++)
                    op_async_small(allocs[ids[rng.below(n)]], true);
            }
        } else if (r < 70) {
            CHECK(rng.below(2) ? cudaStreamSynchronize(stream) : cudaDeviceSynchronize());
            pending.clear();
        } else {                                        // blocking device-to-host copy, checked
            range(a, 64 << 10, &off, &len);
            CHECK(cudaStreamSynchronize(stream));
            check_range(a, off, len);
        }
    }
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].dev) {
            check_range(allocs[i], 0, allocs[i].model.size());
            CHECK(cudaFree(allocs[i].dev));
        }
    CHECK(cudaStreamDestroy(stream));
    printf("DONE ops=%ld checked=%llu mismatches=%llu\n", ops, checked, mismatches);
    return mismatches ? 1 : 0;
}
