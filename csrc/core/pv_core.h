/* The client core (libpvcore.so): what every API library of a process (libvcudart, libvcuda, libvcublas) shares.
 * One connection per host, one device numbering, one table of allocations, streams, events and modules, one
 * error model (cudaError_t numbers on the wire), and the generated per-op senders (ops_gen.h).
 *
 * The core's interface, as the API libraries include it: each module of the core declares its own part in its
 * header (pv_<module>.h beside its .c; csrc/README.md has the map), and the core's own files include only the
 * headers they use. */
#ifndef PV_CORE_H
#define PV_CORE_H

#include "pv_base.h"
#include "pv_state.h"
#include "pv_io.h"
#include "pv_wire.h"
#include "pv_transport.h"
#include "pv_stats.h"
#include "pv_census.h"
#include "pv_hello.h"
#include "pv_compress.h"
#include "pv_hostmap.h"
#include "pv_usage.h"
#include "pv_auth.h"
#include "pv_request.h"
#include "pv_record.h"
#include "pv_coherence.h"
#include "pv_refusal.h"
#include "pv_registry.h"
#include "pv_hostmem.h"
#include "pv_copy.h"
#include "pv_launch.h"
#include "pv_streams.h"

#endif
