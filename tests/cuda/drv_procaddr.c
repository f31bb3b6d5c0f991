// cuGetProcAddress without a daemon: every request NVIDIA's 13.0 runtime makes (REQUESTS: "name version flags
// symbol" per line) resolves to that exported symbol; every base name of EXPORTS (one symbol per line) resolves at
// the driver's version (cuDriverGetVersion); unknown names and too-old versions get CUDA_ERROR_NOT_FOUND with their status; an unsupported
// function answers CUDA_ERROR_NOT_SUPPORTED. Usage: drv_procaddr EXPORTS REQUESTS. Prints "OK <checks>".
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "drv_check.h"

/* symbol without _vN / _ptds / _ptsz: the name callers ask for */
static void base_of(const char *sym, char *out, size_t cap)
{
    snprintf(out, cap, "%s", sym);
    size_t n = strlen(out);
    if (n > 5 && (strcmp(out + n - 5, "_ptds") == 0 || strcmp(out + n - 5, "_ptsz") == 0))
        out[n -= 5] = 0;
    char *v = strrchr(out, '_');
    if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9')
        *v = 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        printf("usage: drv_procaddr EXPORTS REQUESTS\n");
        return 2;
    }
    char line[512], name[256], sym[256];
    FILE *f = fopen(argv[2], "r");
    DEXPECT(f != NULL);
    while (fgets(line, sizeof line, f)) {
        int version;
        unsigned long long flags;
        if (sscanf(line, "%255s %d %llu %255s", name, &version, &flags, sym) != 4 || name[0] == '"')
            continue;
        void *fn = NULL;
        CUdriverProcAddressQueryResult status;
        CUresult r = cuGetProcAddress(name, &fn, version, flags, &status);
        if (strcmp(sym, "NOT_FOUND") == 0)
            continue;   // GL/EGL/VDPAU names the probe did not know: checked through EXPORTS below
        if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || fn != dlsym(RTLD_DEFAULT, sym)) {
            printf("FAIL %s@%d flags %llu: %d, wanted %s\n", name, version, flags, (int)r, sym);
            return 1;
        }
        checks++;
    }
    fclose(f);
    int driver_version = 0;
    DCHECK(cuDriverGetVersion(&driver_version));
    DEXPECT(driver_version >= 13000);
    f = fopen(argv[1], "r");
    DEXPECT(f != NULL);
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%255s", sym) != 1)
            continue;
        base_of(sym, name, sizeof name);
        void *fn = NULL;
        CUdriverProcAddressQueryResult status;
        if (cuGetProcAddress(name, &fn, driver_version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || !fn ||
            !dlsym(RTLD_DEFAULT, sym)) {
            printf("FAIL %s (from %s) does not resolve\n", name, sym);
            return 1;
        }
        checks++;
    }
    fclose(f);
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult status;
    DEXPECT_ERR(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
    DEXPECT(fn == NULL && status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    DEXPECT_ERR(cuGetProcAddress("cuLibraryLoadData", &fn, 11000, 0, &status), CUDA_ERROR_NOT_FOUND);
    DEXPECT(status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    DCHECK(cuGetProcAddress("cuMemcpyHtoD", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    DEXPECT(fn == dlsym(RTLD_DEFAULT, "cuMemcpyHtoD_v2_ptds"));
    // a function outside the supported set, through its pointer: CUDA_ERROR_NOT_SUPPORTED (and one log line)
    CUresult (*mipmap_create)(void *, const void *, unsigned) = NULL;
    DCHECK(cuGetProcAddress("cuMipmappedArrayCreate", (void **)&mipmap_create, 13000, 0, &status));
    DEXPECT_ERR(mipmap_create(NULL, NULL, 0), CUDA_ERROR_NOT_SUPPORTED);
    DEXPECT_ERR(mipmap_create(NULL, NULL, 0), CUDA_ERROR_NOT_SUPPORTED);
    const char *s = NULL;
    DCHECK(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &s));
    DEXPECT(strcmp(s, "CUDA_ERROR_NOT_SUPPORTED") == 0);
    checks += 6;
    printf("OK %ld\n", checks);
    return 0;
}
