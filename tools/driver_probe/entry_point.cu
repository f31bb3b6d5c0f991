// cudaGetDriverEntryPointByVersion: shows it is cuGetProcAddress_v2 with the same version and flags.
#include <cstdio>
#include <cuda_runtime.h>
int main(){ void *p = 0; cudaDriverEntryPointQueryResult q; cudaFree(0);
 fprintf(stderr, "==== ByVersion\n");
 cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemAlloc", &p, 12000, cudaEnableDefault, &q); fprintf(stderr, "==== %d %p %d\n", e, p, q);
 fprintf(stderr, "==== ptds\n");
 e = cudaGetDriverEntryPointByVersion("cuMemcpyHtoD", &p, 12000, cudaEnablePerThreadDefaultStream, &q); fprintf(stderr, "==== %d %p %d\n", e, p, q);
 e = cudaGetDriverEntryPointByVersion("cuNoSuch", &p, 12000, cudaEnableDefault, &q); fprintf(stderr, "==== %d %p %d\n", e, p, q);
 e = cudaGetDriverEntryPointByVersion("cuLibraryLoadData", &p, 11000, cudaEnableDefault, &q); fprintf(stderr, "==== %d %p %d\n", e, p, q);
 return 0; }
