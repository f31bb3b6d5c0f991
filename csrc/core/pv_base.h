/* What every header of the client core starts from: msgpack, the generated protocol constants, the export
 * attributes and the few CUDA types the core handles (no CUDA headers are needed: ABI-compatible with CUDA
 * 13.0's). */
#ifndef PV_BASE_H
#define PV_BASE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <msgpack.h>

#include "protocol_gen.h"

/* Entry points an API library exports (its version script decides under which node). */
#define PV_API __attribute__((visibility("default")))
#define PV_WEAK_API __attribute__((visibility("default"), weak))

/* ---- minimal CUDA types (ABI-compatible with CUDA 13.0; CUstream == cudaStream_t, CUevent == cudaEvent_t) ---- */
typedef int cudaError_t;
typedef struct { unsigned x, y, z; } dim3;
typedef struct pv_stream *cudaStream_t;
typedef struct pv_event *cudaEvent_t;

#define PV_SUCCESS 0
#define PV_MAX_DEVICES 64
#define PV_MAX_ATTRS 256

#endif
