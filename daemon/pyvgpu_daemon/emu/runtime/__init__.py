"""The runtime (executive): runs a translated kernel over a launch's grid, chunk by chunk.

Execution model
---------------
All threads of a launch chunk (whole CTAs, `EmuLimits.lanes_per_chunk` lanes at most) are one NumPy lane vector.
Lane order is thread order: lane = cta * threads_per_cta + (x + y*bx + z*bx*by). There is no padding: a CTA whose
size is not a multiple of 32 simply has a short last warp.

The translator (translator/) compiled the kernel once into `make(S)`. For every chunk, `make(chunk)` binds the
block functions to that chunk's state (registers are closure variables holding immutable NumPy arrays), giving two
functions per block: a converged version (every lane of the chunk is live and at this block: no masks at all) and
a masked one. A launch of a single small chunk keeps that chunk for the next launch of its configuration: its
state is zeroed in one fill and the bound functions' `reset()` rebinds the registers to zero (launch.py). The chunk is the `S` of the generated code; what it offers generated code is ChunkAPI
(emu/chunk_api.py).

Scheduling (chunk.py): per-lane PC (block index) and state (run / barrier / warp-wait / exited). While converged
the driver simply follows the block functions' return values; when lanes diverge it runs the block with the lowest
PC over the lanes sitting there (min-PC, which reconverges at NVVM's join points), and goes back to the converged
path as soon as every lane is live and at one PC again. A diverged block whose lanes are few (EmuLimits.sparse_divisor)
and which needs only its own lanes' memory runs over those lanes alone (sparse.py).

bar.sync/bar.red/barrier: lanes park; when nothing can run, every CTA whose non-exited lanes are all parked is
released (exited threads count as arrived). A CTA that cannot be released with nothing runnable is a deadlock
(cudaErrorLaunchFailure). Warp `.sync` operations wait until the non-exited lanes of their member mask are at
the same instruction (lanes still running elsewhere are waited for; lanes parked elsewhere are not).

Chunks run one after another in CTA order, or at once on a thread pool when the kernel's CTAs cannot observe each
other (launch.py). Large launches bind the kernel's native variant (runs of ALU instructions compiled to C,
translator/cgen.py, emu/native.py) when one can be built; it computes the same bits as the NumPy variant.

Calls of out-of-line functions (recursion, function pointers: translator/inline.py) push frames on a call stack in
each thread's local memory, after its static frame (frames.py); its size is cudaLimitStackSize times
EmuLimits.call_stack_factor, and overflowing it is cudaErrorHardwareStackError.

Memory (spaces.py): global through DeviceMemory (every access checked by `check_access`); module
`.global`/`.const` variables live there too; shared is one uint8 array of `n_cta * shared_size` per chunk (32-bit
shared addresses); local is one uint8 array of `lanes * frame` (the kernel's local depots plus the parameter space
of call sequences, then the call stack); kernel parameters are read from the packed launch buffer, also by
address (read-only); generic addresses are global addresses as they are, and shared, local or parameter addresses
plus a window base (cvta, emu/layout.py).

Files: launch.py (grid -> chunks), chunk.py (chunk state, scheduler), special.py (special registers,
parameters), spaces.py (loads, stores, atomics), sparse.py (a diverged block's few lanes as a chunk), collective.py (barriers, warp operations), calls.py (printf,
assert, trap), frames.py (call frames), printf.py (printf formatting).
"""
from .chunk import Chunk
from .launch import Launch, LaunchPlan

__all__ = ["Chunk", "Launch", "LaunchPlan"]
