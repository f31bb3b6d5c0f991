// Fault scenarios driven by tests/e2e/test_api_faults.py.
//   api_faults transfer : allocates, prints READY, then copies 64 MiB back and forth forever (killed by the test)
//   api_faults lost     : copies in a loop; after the daemon dies prints "LOST <error> <ms>" for the failing call and
//                         "NEXT <error> <ms>" for a later call, then exits 0
//   api_faults fork     : a forked child's calls fail cleanly; the parent's session carries on ("FORK OK")
//   api_faults midcopy  : against a daemon that refuses to read a large device-to-host frame starting 64 MiB into an
//                         allocation (injected by the test): a 192 MiB copy (frames at 0, 64 and 128 MiB, two in
//                         flight) prints "MIDCOPY <error>"; later copies around the refused frame are byte-exact
//                         ("MIDCOPY OK")
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

static double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define CHECK_FORK(call)                                                                               \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess) {                                                                       \
            printf("FAIL %s -> %s\n", #call, cudaGetErrorName(e_));                                    \
            return 1;                                                                                  \
        }                                                                                              \
    } while (0)

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "lost";
    size_t n = (size_t)64 << 20;
    void *d = nullptr;
    cudaError_t e = cudaMalloc(&d, n);
    if (e != cudaSuccess) {
        printf("FAIL cudaMalloc %s\n", cudaGetErrorName(e));
        return 1;
    }
    std::vector<unsigned char> h(n, 0x5A);
    if (strcmp(mode, "fork") == 0) {
        CHECK_FORK(cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice));
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            void *p;
            cudaError_t ce = cudaMalloc(&p, 16);
            _exit(ce == cudaErrorDevicesUnavailable ? 0 : 3);
        }
        int st = -1;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("FAIL child status %d\n", st);
            return 1;
        }
        std::vector<unsigned char> back(n);
        CHECK_FORK(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost));
        CHECK_FORK(memcmp(back.data(), h.data(), n) == 0 ? cudaSuccess : cudaErrorUnknown);
        CHECK_FORK(cudaFree(d));
        printf("FORK OK\n");
        return 0;
    }
    if (strcmp(mode, "midcopy") == 0) {
        const size_t mib = (size_t)1 << 20, big = 192 * mib;
        unsigned char *db = nullptr;
        CHECK_FORK(cudaMalloc(&db, big));
        std::vector<unsigned char> src(big), back(big, 0);
        for (size_t i = 0; i < big; i++)
            src[i] = (unsigned char)(i * 7 + (i >> 20));
        CHECK_FORK(cudaMemcpy(db, src.data(), big, cudaMemcpyHostToDevice));
        printf("MIDCOPY %s\n", cudaGetErrorName(cudaMemcpy(back.data(), db, big, cudaMemcpyDeviceToHost)));
        std::fill(back.begin(), back.end(), 0);
        CHECK_FORK(cudaMemcpy(back.data(), db, 64 * mib, cudaMemcpyDeviceToHost));               // one frame
        CHECK_FORK(cudaMemcpy(back.data() + 65 * mib, db + 65 * mib, 127 * mib, cudaMemcpyDeviceToHost));  // two
        CHECK_FORK(cudaMemcpy(back.data() + 64 * mib, db + 64 * mib, mib, cudaMemcpyDeviceToHost));
        CHECK_FORK(memcmp(back.data(), src.data(), big) == 0 ? cudaSuccess : cudaErrorUnknown);
        CHECK_FORK(cudaDeviceSynchronize());
        CHECK_FORK(cudaFree(db));
        printf("MIDCOPY OK\n");
        return 0;
    }
    printf("READY\n");
    fflush(stdout);
    for (long i = 0;; i++) {
        double t0 = now_ms();
        e = cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            printf("LOST %s %.0f\n", cudaGetErrorName(e), now_ms() - t0);
            double t1 = now_ms();
            void *p;
            cudaError_t e2 = cudaMalloc(&p, 1024);
            printf("NEXT %s %.0f\n", cudaGetErrorName(e2), now_ms() - t1);
            t1 = now_ms();
            e2 = cudaDeviceSynchronize();
            printf("SYNC %s %.0f\n", cudaGetErrorName(e2), now_ms() - t1);
            fflush(stdout);
            return strcmp(mode, "lost") == 0 ? 0 : 1;
        }
    }
}
