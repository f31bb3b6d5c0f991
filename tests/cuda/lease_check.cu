// A job's program on leased GPUs (tests/control/test_leasing.py, tests/slurm/): on every GPU it sees, it adds two
// vectors and checks the sum against the CPU. It prints, for the tests to compare:
//   gpus N hosts=<PYVGPU_HOSTS>
//   gpu I total=<cudaMemGetInfo total> free=<free>    (a share's quota shows as the total)
//   start <unix time>          after its first work on the GPUs
//   end <unix time>            after its last, then PASSED
// Options: --hold-ms MS keeps the GPUs that long after the first work; --until-file PATH keeps them until PATH
// exists (at most 120 s), so a test decides when the job ends.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <unistd.h>
#include <sys/stat.h>
#include "check.h"

__global__ void vector_add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void add_on(int dev, int n) {
    CHECK(cudaSetDevice(dev));
    float *a, *b, *c;
    size_t bytes = n * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes), *hc = (float *)malloc(bytes);
    for (int i = 0; i < n; i++) {
        ha[i] = 0.5f * i;
        hb[i] = 2.0f * i + dev;
    }
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMalloc(&c, bytes));
    CHECK(cudaMemcpy(a, ha, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, hb, bytes, cudaMemcpyHostToDevice));
    vector_add<<<(n + 255) / 256, 256>>>(a, b, c, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hc, c, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(hc[i] == ha[i] + hb[i]);
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(c));
    free(ha);
    free(hb);
    free(hc);
}

int main(int argc, char **argv) {
    long hold_ms = 0;
    const char *until = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--hold-ms")) hold_ms = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--until-file")) until = argv[i + 1];
    }
    const char *hosts = getenv("PYVGPU_HOSTS");
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    printf("gpus %d hosts=%s\n", count, hosts ? hosts : "");
    for (int d = 0; d < count; d++) {
        size_t free_b = 0, total_b = 0;
        CHECK(cudaSetDevice(d));
        CHECK(cudaMemGetInfo(&free_b, &total_b));
        printf("gpu %d total=%zu free=%zu\n", d, total_b, free_b);
    }
    for (int d = 0; d < count; d++)
        add_on(d, 4096);
    printf("start %.6f\n", now_s());
    fflush(stdout);
    if (hold_ms > 0)
        usleep(hold_ms * 1000);
    struct stat st;
    for (int waited = 0; until && stat(until, &st) != 0 && waited < 1200; waited++)
        usleep(100 * 1000);
    for (int d = 0; d < count; d++)
        add_on(d, 4096);
    printf("end %.6f\n", now_s());
    printf("PASSED\n");
    return 0;
}
