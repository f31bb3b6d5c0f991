/* The call census (census.c, census_hook.c). */
#ifndef PV_CENSUS_H
#define PV_CENSUS_H

#include "pv_base.h"

/* The call census (census.c, PYVGPU_CENSUS): entry points reached (the API libraries' census_hook.c), answered
 * "not supported" (the stubs' loggers; lib and name are static strings), names and tables asked for that nothing
 * offers. Each is a no-op while the census is off. */
extern int pv_census_on;
void pv_census_enter(void *fn);
void pv_census_unsupported(const char *lib, const char *name);
void pv_census_missing(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pv_census_absent(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
