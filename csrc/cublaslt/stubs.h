/* What the generated fallbacks (unsupported_gen.c) need: libvcublas's stub declarations serve libvcublasLt too
 * (the same cublasStatus_t and return types; pvb_unsupported is each library's own, api_lt.c here). */
#include "../cublas/stubs.h"
