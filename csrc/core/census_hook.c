/* The function-entry hook of an API library built with -finstrument-functions (its api_*.c): while the call census
 * is on (census.c) each entry records the function's address; while it is off it returns at once. Compiled into
 * each API library, hidden: every library has its own hook, reading the core's switch. */
#include "pv_census.h"

__attribute__((no_instrument_function, visibility("hidden"))) void __cyg_profile_func_enter(void *fn, void *site)
{
    (void)site;
    if (__builtin_expect(pv_census_on, 0))
        pv_census_enter(fn);
}

__attribute__((no_instrument_function, visibility("hidden"))) void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)fn;
    (void)site;
}
