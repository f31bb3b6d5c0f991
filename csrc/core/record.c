/* The recorder: while active on a thread, fire-and-forget requests (pv_send_*) are appended to per-device frame
 * buffers instead of being sent. A graph's device work is recorded this way at instantiation, so what the daemon
 * replays is exactly what the API would have sent, built by the same code and the same generated senders. */
#include <stdlib.h>

#include "pv_wire.h"
#include "pv_transport.h"
#include "pv_hostmap.h"
#include "pv_request.h"
#include "pv_record.h"

static _Thread_local struct pv_recorder *tls_rec;

void pv_record_begin(struct pv_recorder *rec) { tls_rec = rec; }
void pv_record_end(void) { tls_rec = NULL; }
int pv_recording(void) { return tls_rec != NULL; }

struct pv_recorder *pv_record_pause(void)
{
    struct pv_recorder *r = tls_rec;
    tls_rec = NULL;
    return r;
}

void pv_record_resume(struct pv_recorder *rec) { tls_rec = rec; }

void pv_recorder_free(struct pv_recorder *rec)
{
    for (int i = 0; i < rec->ndev; i++)
        free(rec->per_dev[i].data);
    free(rec->per_dev);
    rec->per_dev = NULL;
    rec->ndev = rec->capdev = 0;
}

static struct pv_frames *frames_of(struct pv_recorder *rec, struct pv_device *d)
{
    for (int i = 0; i < rec->ndev; i++)
        if (rec->per_dev[i].dev == d)
            return &rec->per_dev[i];
    if (rec->ndev == rec->capdev) {
        int nc = rec->capdev ? rec->capdev * 2 : 4;
        struct pv_frames *p = realloc(rec->per_dev, (size_t)nc * sizeof *p);
        if (!p)
            return NULL;
        rec->per_dev = p;
        rec->capdev = nc;
    }
    struct pv_frames *f = &rec->per_dev[rec->ndev++];
    *f = (struct pv_frames){ .dev = d };
    return f;
}

static int append(struct pv_frames *f, const void *a, size_t n)
{
    if (f->len + n > f->cap) {
        size_t nc = f->cap ? f->cap : 4096;
        while (nc < f->len + n)
            nc *= 2;
        char *p = realloc(f->data, nc);
        if (!p)
            return -1;
        f->data = p;
        f->cap = nc;
    }
    memcpy(f->data + f->len, a, n);
    f->len += n;
    return 0;
}

static cudaError_t record(struct pv_recorder *rec, struct pv_req *r)
{
    struct pv_frames *f = r->dev ? frames_of(rec, r->dev) : NULL;
    pv_seal_frame(&r->sb);
    int rc = !f || append(f, r->sb.data, r->sb.size) != 0 ||
             (r->payload_len && append(f, r->payload, r->payload_len) != 0);
    msgpack_sbuffer_destroy(&r->sb);
    if (rc) {
        if (rec->err == PV_SUCCESS)
            rec->err = r->dev ? PV_cudaErrorMemoryAllocation : PV_cudaErrorUnknown;
        return rec->err;
    }
    f->count++;
    return PV_SUCCESS;
}

cudaError_t pv_req_send(struct pv_req *r)
{
    if (tls_rec)
        return record(tls_rec, r);
    return pv_req_finish(r, NULL);
}
