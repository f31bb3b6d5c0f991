/* Streams and events (streams.c); new ones belong to the thread's current device. */
#ifndef PV_STREAMS_H
#define PV_STREAMS_H

#include "pv_base.h"

struct pv_device;

/* Device and daemon handle a stream argument refers to (the default streams: the current device's). */
cudaError_t pv_stream_target(cudaStream_t s, struct pv_device **d, uint64_t *remote);
cudaError_t pv_stream_create(unsigned flags, int priority, cudaStream_t *out);
cudaError_t pv_stream_destroy(cudaStream_t s);
cudaError_t pv_stream_sync(cudaStream_t s);
cudaError_t pv_stream_query(cudaStream_t s);                       /* cudaErrorNotReady while busy */
cudaError_t pv_stream_props(cudaStream_t s, unsigned *flags, int *priority);
cudaError_t pv_stream_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t pv_stream_id(cudaStream_t s, unsigned long long *id);
int pv_event_ok(cudaEvent_t e);                                   /* a live event handle */
cudaError_t pv_event_create(unsigned flags, cudaEvent_t *out);
cudaError_t pv_event_destroy(cudaEvent_t e);
cudaError_t pv_event_record(cudaEvent_t e, cudaStream_t s);
cudaError_t pv_event_sync(cudaEvent_t e);
cudaError_t pv_event_query(cudaEvent_t e);                         /* cudaErrorNotReady while pending */
cudaError_t pv_event_elapsed(float *ms, cudaEvent_t start, cudaEvent_t end);
/* A reply's event times (protocol v3, the reply header's sixth field: [handle, records, ms, ...] of events of d
 * whose latest record completed); called by the reader before the caller wakes. */
void pv_event_times_apply(struct pv_device *d, const msgpack_object *times);
/* Destroys the streams and events `owner` made on device dev. */
void pv_streams_release(const void *owner, int dev);
/* Whether `owner` holds allocations, streams or events on device dev. */
int pv_owner_holds(const void *owner, int dev);

#endif
