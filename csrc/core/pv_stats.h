/* Per-op request statistics and the at-exit reports (stats.c). */
#ifndef PV_STATS_H
#define PV_STATS_H

#include <stdio.h>

#include "pv_base.h"

/* stats.c: per-op request statistics, printed at exit when PYVGPU_STATS is set (`pyvgpu run --stats`). */
int64_t pv_now_ns(void);
void pv_stats_note(int op, int dev, int calls, uint64_t bytes, int blocked, int64_t ns);
/* An at-exit report (stats, census): stdout flushed, `target` opened for appending (NULL: stderr; failure logged
 * naming env), its first words "pyvgpu TITLE: pid P EXE" written, the line left open. */
FILE *pv_exit_report_open(const char *target, const char *env, const char *title);
void pv_exit_report_close(FILE *f);

#endif
