/* The recorder (record.c): fire-and-forget requests captured as frames instead of being sent (graphs). */
#ifndef PV_RECORD_H
#define PV_RECORD_H

#include "pv_base.h"

struct pv_device;

struct pv_frames {                 /* the recorded frames of one device, in order */
    struct pv_device *dev;
    char *data;                    /* u32 length | header | payload, repeated */
    size_t len, cap;
    size_t count;
};
struct pv_recorder {
    struct pv_frames *per_dev;     /* one entry per device that received a frame */
    int ndev, capdev;
    cudaError_t err;               /* first failure while recording (out of memory) */
};
/* While a recorder is active on this thread every pv_send_* appends its frame to it (nothing is sent);
 * pv_call_* requests still go out. Recording does not nest. */
void pv_record_begin(struct pv_recorder *rec);
void pv_record_end(void);
int pv_recording(void);
void pv_recorder_free(struct pv_recorder *rec);
struct pv_recorder *pv_record_pause(void);   /* sends go out again until pv_record_resume(the returned recorder) */
void pv_record_resume(struct pv_recorder *rec);

#endif
