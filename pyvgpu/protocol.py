"""The pyvgpu wire protocol: the single source of truth for both sides.

The C client gets its constants, shared keys and one sender function per op from files generated from this module
at build time (tools/gen_protocol_c.py, run by CMake); tests prove the two sides agree. This module must import
nothing outside the standard library (and pyvgpu's own stdlib-only modules) so the build can run it before install.

Framing (both directions, little endian):

    u32  H      length of the msgpack header that follows
    H bytes     msgpack array (the header)
    P bytes     raw bulk payload; P is given inside the header (0 when there is none)

Request header:  [op, req_id, payload_len, args...]
    req_id == 0 means fire-and-forget: the daemon sends no reply. Only ops whose FLAG_ASYNC is set may be sent
    that way; their failures are latched per (session, device) and returned by the next synchronizing op.
Reply header:    [req_id, err, payload_len, result, stdout_len(, event_times)]
    err is a cudaError_t value (0 = success). result is an op-specific msgpack value (nil when unused).
    The header is followed by payload_len payload bytes, then by stdout_len bytes of device printf output produced
    since the last reply on this device (kept out of the header, so a 1 MiB printf FIFO never overflows a frame;
    at most MAX_STDOUT_BYTES). A reply header may be up to MAX_REPLY_HEADER_BYTES long.
    event_times (optional, absent when empty): a flat array [handle, records, ms, ...] of events of the request's
    device whose latest record has completed since the daemon last reported them (at most MAX_EVENT_TIMES per
    reply): the event's handle, how many records of it the daemon has executed, and its time in ms (f64) on a
    clock of that device and session where only differences count. A client that has sent exactly `records` records
    of the event answers cudaEventElapsedTime from these times instead of asking (EVENT_ELAPSED): the training step
    of examples/dp_train needs one blocking round trip instead of three.
Compressed payloads: when the hello negotiated a codec (HELLO_COMPRESS both ways), the bulk payload of an op flagged
    COMPRESSIBLE (a request's for PAYLOAD_IN ops, the reply's for PAYLOAD_OUT ops) may travel compressed: the
    header's payload_len is then [wire_len, raw_len, codec] (COMPRESS_CODECS) instead of an integer, and the
    wire_len payload bytes are blocks, each u32 LE compressed length | u32 LE raw length | bytes, every raw length
    COMPRESS_BLOCK except the last's, the raw lengths summing to raw_len; a block whose compressed length equals its
    raw length is stored as is. A receiver never decodes a block into more than its raw length. Whether a payload
    is compressed is the sender's choice (compress.py, compress.c: only when the link is slow enough for the codec's
    speed and the data compresses): each side measures the rate at which it receives bulk payloads and tells the
    other (the client with LINK_RATE, the daemon in a heartbeat notice's result {NOTICE_RATE: bytes/s}).
Detached requests: an op flagged DETACHED is sent with a req_id but the client does not wait for its reply; the
    reply's payload lands in the client's buffer when it arrives, before any later reply (replies of a device come
    in order, so a later synchronizing reply proves the bytes are there). Its failure is latched like a
    fire-and-forget op's. A client keeps at most DETACH_WINDOW_BYTES of such replies in flight per connection.
Notices: a reply frame with req_id 0 answers no request. err 0 is a heartbeat: the daemon sends one every
    HEARTBEAT_INTERVAL_S while the session has work in flight and nothing else was written, so a client waiting for
    a long kernel can tell a busy daemon from a stopped one. err != 0 says the daemon is ending the session (result
    is the reason, a str): shutting down, idle timeout, a protocol violation.
Keepalive: a client sends PING (fire-and-forget) when it has sent nothing for a while, so the daemon's idle
    timeout ends only sessions whose client is gone or silent.

Handshake: on connect the daemon sends [HELLO_SERVER_MAGIC, PROTOCOL_VERSION, nonce(bytes 32), auth_required(bool)]
as a normal frame (u32 length + msgpack, no payload); the client answers with an OP_HELLO request whose single
argument is a map (see HELLO_* keys); the daemon replies with the reply header whose result is a map with
"devices" (a list of device snapshots, see DeviceInfo keys below), "backend" and "session".
A version mismatch or bad proof gives err=ERR_PROTOCOL_MISMATCH / ERR_AUTH and the connection is closed.
Token proof: hex(HMAC-SHA256(key=token bytes, msg=nonce)).
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Any, Sequence

from pyvgpu import cublas_spec as _blas
from pyvgpu import cublaslt_spec as _lt
from pyvgpu.cuda_errors import CUDA_ERRORS

PROTOCOL_VERSION = 3
HELLO_SERVER_MAGIC = "pyvgpu"
DEFAULT_PORT = 7700
FRAME_PREFIX_BYTES = 4
MAX_HEADER_BYTES = 1 << 20          # a request header larger than this is malformed
MAX_REPLY_HEADER_BYTES = 16 << 20   # a reply header larger than this is malformed (module-load maps can be big)
MAX_PAYLOAD_BYTES = 1 << 34         # 16 GiB: larger claimed payloads are malformed
MAX_STDOUT_BYTES = 64 << 20         # printf bytes one reply may carry
HEARTBEAT_INTERVAL_S = 1.0          # daemon -> client while work is in flight (see Notices above)
# Client defaults (the C client reads PYVGPU_REPLY_TIMEOUT_MS / PYVGPU_PING_INTERVAL_MS; see docs/security.md).
CLIENT_SILENCE_TIMEOUT_S = 10.0     # a waiting client gives up after this long without a byte from the daemon
CLIENT_PING_INTERVAL_S = 15.0       # a client that sent nothing for this long sends PING
# Device-pointer windows: virtual GPU k's emulated allocations live at VA_WINDOW_BYTES * (k + 1) so that
# pointers of different hosts never collide on the client (the client sends its base in the hello).
VA_WINDOW_BYTES = 1 << 40

# Keys of the client hello map.
HELLO_VERSION = "version"
HELLO_PROOF = "proof"          # hex HMAC or None
HELLO_CLIENT = "client"        # free text: "pid@host argv0" for logs and status
HELLO_VA_BASE = "va_base"      # base address for this session's device 0; device r gets va_base + r*VA_WINDOW_BYTES
HELLO_CLIENT_MAX = 200         # characters of HELLO_CLIENT kept (longer text is cut)
HELLO_PID = "pid"              # the client's process id (u64; status and metrics labels)
HELLO_HOSTNAME = "hostname"    # the client's host name (str; status and metrics labels)
HELLO_MEMORY = "memory"        # device memory the client asks for per device (u64 bytes; capped by the daemon's
                               # per-session limit, which applies when absent); allocations beyond it fail
HELLO_WEIGHT = "weight"        # the client's share of a device's time relative to other sessions (f64 > 0,
                               # default 1; capped by the daemon's --max-weight)
HELLO_LEASES = "leases"        # the leases the client holds (str: lease ids, comma-separated; from PYVGPU_LEASES):
                               # its sessions use the GPUs leased to it (with the leases' quotas and weights)
HELLO_CONTROL = "control"      # true: the client uses the daemon's own ops only (STATUS, leases: NO_DEVICE), never a
                               # device; admitted to one of Bounds.control_slots while --max-sessions are all open
# Environment variables the client library reads and `pyvgpu run` sets (--memory, --weight).
ENV_MEMORY = "PYVGPU_MEMORY"   # bytes, or a size with a K/M/G/T suffix (binary units)
ENV_WEIGHT = "PYVGPU_WEIGHT"
ENV_STATS = "PYVGPU_STATS"     # `pyvgpu run --stats`: the client core's per-op request statistics at exit (stats.c)
ENV_CENSUS = "PYVGPU_CENSUS"   # `pyvgpu run --census`/`--explain`: the call census at exit (census.c)
ENV_LEASES = "PYVGPU_LEASES"   # lease ids, comma-separated (`pyvgpu run -n`, Slurm jobs): sent as HELLO_LEASES
# The daemon's cuda backend: "python" makes its fast ops (launches, memsets, event records, stream waits, async
# copies) call the driver through cuda-python, not through its compiled module libpvdrvcall.so (backends/cuda_calls.py)
ENV_CUDA_CALLS = "PYVGPU_CUDA_CALLS"
# Environment variables the daemon reads: PYVGPU_DAEMON_COMPILED=0 forces its Python frame path instead of the compiled
# one (daemon/pyvgpu_daemon/framepath.py, used whenever it loads); CI runs the daemon's tiers both ways.
# PYVGPU_DAEMON_CAPTURE=DIR writes each session's received bytes to DIR/session-N.frames (tests/daemon/frames/).
ENV_DAEMON_COMPILED = "PYVGPU_DAEMON_COMPILED"
ENV_DAEMON_CAPTURE = "PYVGPU_DAEMON_CAPTURE"
# Host map: the entry that stands for GPUs chosen by placement (`auto` or `auto:N`; resolved by `pyvgpu run`), and
# the separator of a device selection (`host:port/ORDINAL`).
HOSTMAP_AUTO = "auto"
HOSTMAP_DEVICE_SEP = "/"
# Keys of the HELLO reply's map.
HELLO_REPLY_DEVICES = "devices"    # list of device snapshots (DEVICE_INFO_KEYS)
HELLO_REPLY_BACKEND = "backend"
HELLO_REPLY_SESSION = "session"

class OpFlag(enum.IntFlag):
    """What the daemon and the client do with an op: every property either acts on is one of these, on the op's
    spec line (a module that keeps its own list of op names instead is refused by tests/daemon/test_structure.py)."""
    NONE = 0
    ASYNC = 1        # may be sent fire-and-forget (req_id 0); errors are deferred
    SYNC = 2         # synchronizing: returns the first deferred error of its device (and drains printf output)
    PAYLOAD_IN = 4   # request carries a bulk payload
    PAYLOAD_OUT = 8  # reply carries a bulk payload
    NO_DEVICE = 16   # first argument is not a device ordinal: answered by the daemon itself, on its loop
    DETACHED = 32    # sent with a req_id, but nobody waits for the reply (see Detached requests above)
    COMPRESSIBLE = 64  # its bulk payload may travel compressed (see Compressed payloads above)
    HOST = 128       # needs no device execution (allocation, handles, host-side queries and waits): it runs without
                     # the device's turn, so a session never waits for another's kernel to do it (scheduler.py)
    GRAPH = 256      # may be a node of an uploaded graph (GRAPH_CREATE): device work sent fire-and-forget
    LOOP = 512       # may run on the daemon's event loop when its device has nothing queued and the backend completes
                     # such ops at once (DeviceContext.answers_on_loop): state queries, waits with nothing to wait
                     # for, and small work (its extent and payload at most fastpath.LOOP_BYTES; a launch only when
                     # DeviceContext.tiny_launch says so), without the hop to the device's worker thread
    SYNC_POINT = 1024  # after its successful answer the host may read what the device wrote (synchronizing ops, and
                       # queries that report completion): the client brings managed and mapped memory up to date
    FAST = 2048      # small device work a framework issues by the ten thousand (launches, memsets, event records and
                     # waits, device copies, small host-to-device copies): sent fire-and-forget, the daemon's compiled
                     # frame path (daemon/pyvgpu_daemon/framepath.py) decodes runs of them and hands each run to the backend
                     # in one call (DeviceContext.run_fast); its arguments are all integers (dim3 included). It never
                     # creates or frees what ops resolve (allocations, handles, modules and their kernels): fastrun.py
                     # checks a run's ops before the first of them runs, which gives the per-op answers only then
                     # (op() refuses a FAST line that says it creates or frees: creates_or_frees)


# Wire types of op arguments. Each names how the value travels (msgpack) and what both sides make of it:
#   dev      the daemon-local device ordinal; the first argument of every device op (C: from struct pv_device)
#   u64 i64 u32 i32   integers of that range        ptr / size   a device address / a byte count (u64)
#   f64      a double                               dim3         [x, y, z], each u32
#   bytes    a msgpack bin                          str          a msgpack str
#   handle   a raw daemon handle (u64), for create/destroy
#   stream event func blas   a daemon handle (u64) that the daemon resolves to its backend object before the
#            handler runs (unknown: cudaErrorInvalidResourceHandle, or cudaErrorInvalidDeviceFunction for func;
#            blas: a cuBLAS handle of BLAS_CREATE)
#   map      a msgpack map (HELLO, the LEASE_* ops)
ARG_TYPES: frozenset[str] = frozenset({
    "dev", "u64", "i64", "u32", "i32", "ptr", "size", "f64", "dim3", "bytes", "str", "handle", "stream", "event",
    "func", "blas", "map"})
# Reply shapes: what the reply's result holds on success. PAYLOAD_OUT ops answer nil plus the payload.
REPLY_TYPES: frozenset[str] = frozenset({"nil", "u64", "i64", "f64", "u64x2", "map"})
# Roles an argument may have beyond its type (a third field on the spec line, "name:type:role"):
#   extent   a factor of the bytes the op moves: the product of an op's extent arguments is what its PAYLOAD_OUT
#            reply carries (counted against the session's reply bound before it runs) and what a LOOP op touches
#            (bounded on the loop). Ops without one move no bytes in proportion to an argument.
# Roles the wire type says already: the `stream` argument is the stream an op is ordered on, `func` the kernel it
# runs (scheduler.py's figures and priorities, fastpath.py's tiny launches).
ARG_ROLES: frozenset[str] = frozenset({"extent"})
# Wire types a FAST op's arguments may have: the compiled frame path decodes exactly these.
FAST_ARG_TYPES: frozenset[str] = frozenset({"dev", "u64", "i64", "u32", "i32", "ptr", "size", "dim3", "stream",
                                            "event", "func"})


@dataclass(frozen=True)
class Arg:
    name: str
    type: str
    role: str = ""           # ARG_ROLES, or "" for none


def _has(flags: "OpFlag", flag: "OpFlag") -> bool:
    return bool(flags & flag)


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One op of the table. The properties below the first six are derived once from its line (flags as booleans,
    argument positions): the daemon's per-frame path reads them as attributes, never by name or flag arithmetic
    (an enum.Flag `&` costs about a microsecond)."""
    code: int
    name: str
    args: tuple[Arg, ...]    # request arguments after payload_len, in order
    reply: str               # shape of the reply's result (REPLY_TYPES)
    flags: OpFlag
    doc: str = ""
    arg_names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    device: bool = field(init=False, repr=False, compare=False)        # not NO_DEVICE: args[0] is the device
    is_async: bool = field(init=False, repr=False, compare=False)
    sync: bool = field(init=False, repr=False, compare=False)
    payload_in: bool = field(init=False, repr=False, compare=False)
    payload_out: bool = field(init=False, repr=False, compare=False)
    detached: bool = field(init=False, repr=False, compare=False)
    compressible: bool = field(init=False, repr=False, compare=False)
    host: bool = field(init=False, repr=False, compare=False)
    work: bool = field(init=False, repr=False, compare=False)          # device work: runs in the session's turn
    graph: bool = field(init=False, repr=False, compare=False)
    loop: bool = field(init=False, repr=False, compare=False)
    sync_point: bool = field(init=False, repr=False, compare=False)
    fast: bool = field(init=False, repr=False, compare=False)
    stream_arg: int | None = field(init=False, repr=False, compare=False)   # index of the stream it is ordered on
    ordered_on: int | None = field(init=False, repr=False, compare=False)   # ... when its work may move with that
                                                                            # stream alone (no event argument)
    func_arg: int | None = field(init=False, repr=False, compare=False)     # index of the kernel it runs
    extent_args: tuple[int, ...] = field(init=False, repr=False, compare=False)   # indices of its extent arguments

    def __post_init__(self) -> None:
        f = self.flags
        types = [a.type for a in self.args]
        derived = {
            "arg_names": tuple(a.name for a in self.args),
            "device": not _has(f, OpFlag.NO_DEVICE), "is_async": _has(f, OpFlag.ASYNC), "sync": _has(f, OpFlag.SYNC),
            "payload_in": _has(f, OpFlag.PAYLOAD_IN), "payload_out": _has(f, OpFlag.PAYLOAD_OUT),
            "detached": _has(f, OpFlag.DETACHED), "compressible": _has(f, OpFlag.COMPRESSIBLE),
            "host": _has(f, OpFlag.HOST), "work": not _has(f, OpFlag.HOST | OpFlag.NO_DEVICE),
            "graph": _has(f, OpFlag.GRAPH), "loop": _has(f, OpFlag.LOOP), "sync_point": _has(f, OpFlag.SYNC_POINT),
            "fast": _has(f, OpFlag.FAST),
            "stream_arg": types.index("stream") if "stream" in types else None,
            "func_arg": types.index("func") if "func" in types else None,
            "extent_args": tuple(i for i, a in enumerate(self.args) if a.role == "extent"),
        }
        derived["ordered_on"] = derived["stream_arg"] if "event" not in types else None
        for k, v in derived.items():
            object.__setattr__(self, k, v)

    def extent(self, args: Sequence[Any]) -> int | None:
        """Bytes the op moves by its extent arguments (their product; 0 without any); None when one of them is not
        a u64 (the handler refuses it)."""
        total = 1
        for i in self.extent_args:
            v = args[i]
            if type(v) is not int or not 0 <= v < (1 << 64):      # type(): a bool is not a size
                return None
            total *= v
        return total if self.extent_args else 0


# Endings of the words of an op's name that say it makes or ends something other ops resolve (MALLOC, UNLOAD too).
LIFECYCLE_WORDS: tuple[str, ...] = ("CREATE", "DESTROY", "ALLOC", "FREE", "RELEASE", "LOAD", "RESET", "ATTACH",
                                    "DETACH", "RESERVE", "REGISTER")


def creates_or_frees(name: str, args: Sequence[Arg], reply: str) -> str:
    """What on a spec line says the op may create or free something other ops resolve (an allocation, a handle, a
    module's kernels), or "": a result (a create answers with the handle or address it made), a raw `handle`
    argument (what a destroy takes), a word of its name ending in one of LIFECYCLE_WORDS. Conservative: a FAST line
    shows none of them."""
    if reply != "nil":
        return f"its reply carries a result ({reply}), as a create's does"
    raw = [a.name for a in args if a.type == "handle"]
    if raw:
        return f"it takes a raw handle ({', '.join(raw)}), as a destroy does"
    words = [w for w in name.split("_") if w.endswith(LIFECYCLE_WORDS)]
    if words:
        return f"its name says so ({', '.join(words)})"
    return ""


def op(code: int, name: str, args: str, reply: str = "nil", flags: OpFlag = OpFlag.NONE, doc: str = "") -> OpSpec:
    """One op from its spec line: `args` is "name:type[:role] ..." in wire order."""
    parsed = tuple(Arg(*a.split(":")) for a in args.split())
    for a in parsed:
        if a.type not in ARG_TYPES:
            raise ValueError(f"op {name}: argument {a.name} has unknown wire type {a.type!r}")
        if a.role and a.role not in ARG_ROLES:
            raise ValueError(f"op {name}: argument {a.name} has unknown role {a.role!r}")
        if a.role == "extent" and a.type not in ("size", "u32", "u64"):
            raise ValueError(f"op {name}: extent argument {a.name} is not a count")
    if reply not in REPLY_TYPES:
        raise ValueError(f"op {name}: unknown reply shape {reply!r}")
    made = creates_or_frees(name, parsed, reply) if flags & OpFlag.FAST else ""
    if made:
        raise ValueError(f"op {name}: a FAST op never creates or frees (fastrun.py checks a run's ops before any of "
                         f"them ran), but {made}")
    if not flags & OpFlag.NO_DEVICE and (not parsed or parsed[0] != Arg("dev", "dev")):
        raise ValueError(f"op {name}: a device op's first argument is dev:dev")
    if flags & OpFlag.PAYLOAD_OUT and reply != "nil":
        raise ValueError(f"op {name}: a PAYLOAD_OUT op answers with its payload and a nil result")
    if flags & OpFlag.COMPRESSIBLE and not flags & (OpFlag.PAYLOAD_IN | OpFlag.PAYLOAD_OUT):
        raise ValueError(f"op {name}: COMPRESSIBLE needs a payload")
    if flags & OpFlag.DETACHED and flags & (OpFlag.ASYNC | OpFlag.SYNC):
        raise ValueError(f"op {name}: a DETACHED op has a reply nobody waits for: neither ASYNC nor SYNC")
    if flags & OpFlag.ASYNC and reply != "nil":
        raise ValueError(f"op {name}: an ASYNC op may be sent fire-and-forget, so it cannot have a result")
    if flags & OpFlag.GRAPH and (flags & (OpFlag.NO_DEVICE | OpFlag.HOST) or not flags & OpFlag.ASYNC):
        raise ValueError(f"op {name}: a GRAPH op is device work sent fire-and-forget (ASYNC, not HOST)")
    if flags & (OpFlag.LOOP | OpFlag.SYNC_POINT | OpFlag.HOST) and flags & OpFlag.NO_DEVICE:
        raise ValueError(f"op {name}: LOOP, SYNC_POINT and HOST are properties of device ops")
    if flags & OpFlag.FAST and (flags & (OpFlag.NO_DEVICE | OpFlag.HOST | OpFlag.SYNC | OpFlag.PAYLOAD_OUT)
                                or not flags & OpFlag.ASYNC
                                or any(a.type not in FAST_ARG_TYPES for a in parsed)):
        raise ValueError(f"op {name}: a FAST op is ASYNC device work without a reply payload, its arguments "
                         f"integers ({', '.join(sorted(FAST_ARG_TYPES))})")
    return OpSpec(code, name, parsed, reply, flags, doc)


# Stream arguments that name the device's default stream: NULL, cudaStreamLegacy (1), cudaStreamPerThread (2).
DEFAULT_STREAM_HANDLES: frozenset[int] = frozenset({0, 1, 2})

A, S, PIN, POUT, ND, DET, Z, H = (OpFlag.ASYNC, OpFlag.SYNC, OpFlag.PAYLOAD_IN, OpFlag.PAYLOAD_OUT,
                                  OpFlag.NO_DEVICE, OpFlag.DETACHED, OpFlag.COMPRESSIBLE, OpFlag.HOST)
G, L, SP, F = OpFlag.GRAPH, OpFlag.LOOP, OpFlag.SYNC_POINT, OpFlag.FAST

# The table of remoted operations: one line each. Code ranges keep parallel work apart: 1-99 runtime core,
# 100-199 driver API, 200-299 cuBLAS, 300-399 arrays/textures/graphs/managed/pools/peer, 400-449 sharing
# (420-439 leases), 450-499 hardening and performance, 500-559 cuBLASLt; 150-179 and 560-599 frameworks (issue 18).
OPS: tuple[OpSpec, ...] = (
    op(1, "HELLO", "hello:map", "map", ND, "handshake; result: HELLO_REPLY_* keys"),
    op(2, "STATUS", "", "map", ND, "sessions, devices, backend"),
    op(3, "GOODBYE", "", "nil", ND),
    op(450, "PING", "", "nil", ND | A, "keepalive: proves the client is alive while it has nothing to ask"),
    op(460, "MEMCPY_DTOH_ASYNC", "dev:dev src:ptr size:size:extent stream:stream", "nil", POUT | DET | Z,
       "cudaMemcpyAsync device-to-host into pinned memory: the bytes travel when the copy ran, nobody waits"),
    op(461, "LINK_RATE", "rate:u64", "nil", ND | A,
       "the rate (bytes/s) at which the client receives bulk payloads: the daemon compresses replies by it"),
    # 420-439: leases (issue 20; daemon/pyvgpu_daemon/leases.py). A lease holds a GPU of the daemon (or a share of it)
    # for a holder until it expires; sessions that present its id in their hello (HELLO_LEASES) use the GPU, others
    # are refused there. Requests and results are maps of the LEASE_* keys below.
    op(420, "LEASE_ACQUIRE", "request:map", "map", ND,
       "LEASE_COUNT GPUs of this daemon (all or none, preferring LEASE_DEVICES in order), exclusive or a "
       "LEASE_FRACTION share, waiting up to LEASE_WAIT s in line; result {LEASE_LEASES: [lease...]}; none free in "
       "time: cudaErrorDevicesUnavailable with the reason (a str)"),
    op(421, "LEASE_RENEW", "request:map", "map", ND,
       "extends the leases LEASE_IDS by their ttl; result {LEASE_RENEWED: [id...], LEASE_UNKNOWN: [id...]}"),
    op(422, "LEASE_RELEASE", "request:map", "map", ND,
       "ends the leases LEASE_IDS, or every lease of LEASE_JOB; result {LEASE_RELEASED: [id...]}"),
    op(423, "LEASE_LIST", "request:map", "map", ND,
       "the leases of LEASE_JOB with their ids (all leases, ids left out, without it); result {LEASE_LEASES: [...]}"),
    op(10, "MEM_GET_INFO", "dev:dev", "u64x2", H | L, doc="[free, total]"),
    op(11, "MALLOC", "dev:dev size:size", "u64", H, doc="the device pointer"),
    op(12, "FREE", "dev:dev ptr:ptr", "nil", S | H | SP),
    op(13, "MEMCPY_HTOD", "dev:dev dst:ptr stream:stream", "nil", A | PIN | Z | L | F),
    op(14, "MEMCPY_DTOH", "dev:dev src:ptr size:size:extent stream:stream", "nil", S | POUT | Z | L | SP),
    op(15, "MEMCPY_DTOD", "dev:dev dst:ptr src:ptr size:size:extent stream:stream", "nil", A | G | L | F),
    op(16, "MEMCPY2D_HTOD", "dev:dev dst:ptr dpitch:size width:size:extent height:size:extent stream:stream", "nil",
       A | PIN,
       "payload: the rows packed"),
    op(17, "MEMCPY2D_DTOH", "dev:dev src:ptr spitch:size width:size:extent height:size:extent stream:stream", "nil",
       S | POUT | SP,
       "payload: the rows packed"),
    op(18, "MEMCPY2D_DTOD",
       "dev:dev dst:ptr dpitch:size src:ptr spitch:size width:size:extent height:size:extent stream:stream", "nil",
       A | G),
    op(19, "MEMSET", "dev:dev ptr:ptr value:i32 size:size:extent stream:stream", "nil", A | G | L | F),
    op(20, "MEMSET2D", "dev:dev ptr:ptr pitch:size value:i32 width:size:extent height:size:extent stream:stream",
       "nil", A | G),
    op(30, "MODULE_LOAD", "dev:dev module_id:u64", "map", PIN | H,
       "payload: fatbin or PTX; result: MODULE_* keys (kernels by name with id, params, attrs; vars)"),
    op(31, "LAUNCH", "dev:dev func:func grid:dim3 block:dim3 shmem:size stream:stream", "nil", A | PIN | G | L | F,
       "payload: the packed parameter buffer"),
    op(32, "FUNC_SET_ATTR", "dev:dev func:func attr:i32 value:i64", "nil", A | H,
       "attr: FUNC_ATTR_*; the client validated it, the daemon checks again"),
    op(40, "STREAM_CREATE", "dev:dev flags:u32 priority:i32", "u64", H, doc="the stream handle"),
    op(41, "STREAM_DESTROY", "dev:dev stream:handle", "nil", A | H),
    op(42, "STREAM_SYNC", "dev:dev stream:stream", "nil", S | H | L | SP),
    op(43, "STREAM_QUERY", "dev:dev stream:stream", "nil", H | L | SP, doc="err cudaErrorNotReady while busy"),
    op(44, "STREAM_WAIT_EVENT", "dev:dev stream:stream event:event flags:u32", "nil", A | G | L | F),
    op(50, "EVENT_CREATE", "dev:dev flags:u32", "u64", H, doc="the event handle"),
    op(51, "EVENT_DESTROY", "dev:dev event:handle", "nil", A | H),
    op(52, "EVENT_RECORD", "dev:dev event:event stream:stream", "nil", A | G | L | F),
    op(53, "EVENT_SYNC", "dev:dev event:event", "nil", S | H | L | SP),
    op(54, "EVENT_QUERY", "dev:dev event:event", "nil", H | L | SP, doc="err cudaErrorNotReady while pending"),
    op(55, "EVENT_ELAPSED", "dev:dev start:event end:event", "f64", H | L, doc="milliseconds"),
    op(60, "DEVICE_SYNC", "dev:dev", "nil", S | H | L | SP),
    op(61, "DEVICE_RESET", "dev:dev", "nil", S | H),
    # limit: a cudaLimit (LIMIT_*); anything else, even out of an int's range, is cudaErrorUnsupportedLimit,
    # which wins over a bad value (as CUDA's own check order).
    op(62, "DEVICE_SET_LIMIT", "dev:dev limit:i64 value:i64", "nil", H),
    op(63, "DEVICE_GET_LIMIT", "dev:dev limit:i64", "u64", H | L),
    # 100-199: the driver API (libvcuda.so.1, docs/driver.md)
    op(100, "MODULE_UNLOAD", "dev:dev module_id:u64", "nil", A | H,
       doc="cuModuleUnload/cuLibraryUnload: the module's kernels and variables go; unknown id: invalid handle"),
    op(101, "MEMSET_ELEMS",
       "dev:dev ptr:ptr pitch:size value:u32 elem:u32:extent width:size:extent height:size:extent stream:stream",
       "nil", A | G,
       doc="cuMemsetD16/D32 and their 2D forms: elem 1, 2 or 4 bytes; width in elements, pitch in bytes"),
    # 120-149: virtual memory management (cuMemAddressReserve/Create/Map/...; daemon/pyvgpu_daemon/vmm.py holds the
    # rules). Sizes, addresses and offsets are multiples of the device's granularity (snapshot "vmm_granularity").
    op(120, "VMM_RESERVE", "dev:dev size:size align:size addr:ptr", "u64", H,
       doc="a reserved address range of `size` bytes, `align`-aligned (0: the granularity), at `addr` when that "
           "range is free (a hint; 0: none); result: its start"),
    op(121, "VMM_FREE", "dev:dev addr:ptr size:size", "nil", H,
       doc="frees a whole reservation (addr and size as reserved); nothing may be mapped in it"),
    op(122, "VMM_CREATE", "dev:dev size:size", "u64", H,
       doc="a physical allocation of `size` bytes on the device, charged to the session; result: its handle"),
    op(123, "VMM_RELEASE", "dev:dev handle:u64", "nil", H,
       doc="the handle goes; its memory is freed once no mapping of it is left"),
    op(124, "VMM_MAP", "dev:dev addr:ptr size:size offset:size handle:u64", "nil", H,
       doc="maps [offset, offset+size) of the allocation at [addr, addr+size), inside one reservation and over "
           "nothing mapped (offset: 0); the range is not accessible until VMM_SET_ACCESS"),
    op(125, "VMM_UNMAP", "dev:dev addr:ptr size:size", "nil", H,
       doc="unmaps whole mappings covering exactly [addr, addr+size)"),
    op(126, "VMM_SET_ACCESS", "dev:dev addr:ptr size:size flags:u32", "nil", H,
       doc="this device's access to fully mapped [addr, addr+size): VMM_ACCESS_* (none, read, read-write)"),
    # 150-179: frameworks (issue 18). Tensor maps (TMA descriptors, cuTensorMapEncode*): the GPU host's driver encodes
    # them in its own private 128-byte format, so the daemon's backend encodes one and the client copies it into the
    # caller's CUtensorMap (daemon/pyvgpu_daemon/tensor_map.py: the rules checked, the emulated GPU's own format).
    # kind: TENSOR_MAP_TILED, _IM2COL or _IM2COL_WIDE; arrays little-endian: dims rank u64, strides rank-1 u64,
    # box rank u32 (tiled; else empty), elem_strides rank u32, lower/upper i32 (im2col: rank-2 each; wide: 1 each).
    op(150, "TENSOR_MAP_ENCODE", "dev:dev kind:u32 dtype:u32 rank:u32 addr:ptr dims:bytes strides:bytes box:bytes "
                                 "elem_strides:bytes lower:bytes upper:bytes channels:u32 pixels:u32 interleave:u32 "
                                 "mode:u32 swizzle:u32 l2:u32 oob:u32", "nil", POUT | H,
       "payload: the 128-byte CUtensorMap; an argument the driver API's rules refuse: cudaErrorInvalidValue"),
    op(151, "TENSOR_MAP_REPLACE_ADDRESS", "dev:dev tmap:bytes addr:ptr", "nil", POUT | H,
       "cuTensorMapReplaceAddress: payload: the map (TENSOR_MAP_BYTES, as encoded on this daemon) with its global "
       "address replaced"),
    # ---- 300-399: runtime features (issue 13)
    # Graphs: a graph's device work is a sequence of this device's own fire-and-forget request frames (the exact
    # frames the API would have sent, recorded by the client), uploaded once and replayed by one GRAPH_LAUNCH.
    op(300, "GRAPH_CREATE", "dev:dev", "u64", PIN | H,
       "payload: request frames (u32 length | header | payload each, req_id 0, this device, GRAPH ops); "
       "result: the graph handle"),
    op(301, "GRAPH_LAUNCH", "dev:dev graph:handle stream:stream", "nil", A,
       "runs the graph's ops in order; their stream arguments become `stream`"),
    op(302, "GRAPH_DESTROY", "dev:dev graph:handle", "nil", A | H),
    # Managed and mapped memory: the client keeps a host copy at the very same address and keeps both coherent with
    # these ops (see the coherence model in docs/architecture.md). A managed range's pages are digested on the
    # daemon; MANAGED_DIRTY answers the pages that changed since the client last saw them.
    op(310, "MALLOC_MANAGED", "dev:dev size:size align:u32 flags:u32", "u64", H,
       doc="a zero-filled allocation aligned to `align` (the client's page size) and tracked as managed; "
           "flags: MANAGED_FLAG_*; result: its address"),
    op(311, "MANAGED_ATTACH", "dev:dev ptr:ptr size:size", "nil", H,
       doc="tracks [ptr, ptr+size) of this session's memory (a __managed__ variable) as managed; the client does "
           "not know its content yet, so the next MANAGED_DIRTY reports all of it"),
    op(312, "MANAGED_PUSH", "dev:dev", "nil", A | PIN,
       doc="payload: runs of the host's bytes, each u64 address | u32 length (MANAGED_RUN_HEADER) | length bytes "
           "as the host has them | length bytes as the host last saw them from the device, inside managed ranges; "
           "the bytes that differ between the two are written; where the device changed one of them too, nothing "
           "is written and the session's device gets the sticky MANAGED_CONFLICT_ERROR naming the range"),
    op(313, "MANAGED_DIRTY", "dev:dev", "map",
       doc="waits for the device, then result {MANAGED_RUNS: [[address, length]...]}: the bytes of managed ranges "
           "that changed since the client last fetched or pushed them (at most MAX_MANAGED_RUNS runs)"),
    # Runtime features of issue 19 (340-379).
    op(340, "MANAGED_CONFLICT", "dev:dev ptr:ptr size:size", "nil",
       doc="the client found bytes of [ptr, ptr+size) that the host and the device both changed since they last "
           "agreed (at a synchronization): the device gets the sticky MANAGED_CONFLICT_ERROR, which this call "
           "answers"),
    op(341, "HTOD_LANDED", "dev:dev stream:stream", "nil", A | L,
       doc="sent fire-and-forget after the last MEMCPY_HTOD frame of a synchronous copy (cudaMemcpy, "
           "cudaMemcpyToSymbol, cuMemcpyHtoD, cuMemcpy and the other synchronous 1D forms; never after an *Async "
           "one, whose stream order is enough), on the copy's stream. CUDA says a synchronous copy from page-locked "
           "memory has landed when it returns, so a kernel on a non-blocking stream or another context right after "
           "it reads the new bytes. A backend whose copy returns before its DMA lands (a real GPU's, from the "
           "daemon's pageable buffer: once staged) waits for `stream` here, before the session's next op runs; one "
           "that copies in order (the emulator) has nothing to do. 2D and 3D host-to-device copies need none: "
           "every backend finishes them before it runs the next op (their unpacked rows are a buffer that goes)"),
    # Emulator features of issue 19 (380-399).
    op(380, "LAUNCH_COOPERATIVE", "dev:dev func:func grid:dim3 block:dim3 shmem:size stream:stream", "nil",
       A | PIN | G,
       "cudaLaunchCooperativeKernel / cuLaunchCooperativeKernel / the cooperative launch attribute: a LAUNCH whose "
       "blocks are all resident at once, so grid-wide synchronization (cg::this_grid().sync()) works; more blocks "
       "than the occupancy allows on every multiprocessor: cudaErrorCooperativeLaunchTooLarge; payload: the packed "
       "parameter buffer"),
    # Peers. Devices of one daemon: access from one context to another's memory, and copies between them.
    op(320, "PEER_ENABLE", "dev:dev peer:u32", "nil", H, doc="kernels of dev may use the memory of device `peer`"),
    op(321, "PEER_DISABLE", "dev:dev peer:u32", "nil", H),
    op(322, "MEMCPY_PEER", "dev:dev dst:ptr src_dev:u32 src:ptr size:size:extent stream:stream", "nil",
       doc="copy from device src_dev of this daemon (whose earlier work the client has waited for)"),
    # Devices of different daemons: the bytes go daemon to daemon. The source daemon takes a snapshot behind a
    # single-use ticket (PEER_EXPORT); the destination daemon fetches it from the source (PEER_FETCH, over a session
    # it opens with its own token) and writes it (PEER_PULL).
    op(323, "PEER_EXPORT", "dev:dev src:ptr size:size:extent", "map",
       doc="result {PEER_TICKET: bytes}; at most MAX_PEER_CHUNK bytes, held at most PEER_TICKET_TTL_S seconds"),
    op(324, "PEER_PULL", "dev:dev dst:ptr size:size:extent host:str port:u32 ticket:bytes", "nil", H,
       doc="fetch a ticket's bytes from the daemon at host:port and write them at dst"),
    op(325, "PEER_FETCH", "ticket:bytes", "nil", ND | POUT, "the bytes behind a ticket (once)"),
    # CUDA arrays, texture and surface objects. A channel format is the bits of its x, y, z, w channels and a
    # cudaChannelFormatKind; array extents are in elements (height 0: 1D, depth 0: 2D; with ARRAY_FLAG_LAYERED depth
    # counts layers). 3D copies name each side either by an array handle (ptr, pitch, rows unused) or by linear
    # device memory (array 0: ptr, row pitch, rows per slice); offsets (x in bytes, y rows, z slices) and the extent
    # (width in bytes, height rows, depth slices) are in bytes and rows; a host side is the payload, rows packed.
    op(330, "ARRAY_CREATE", "dev:dev bits_x:u32 bits_y:u32 bits_z:u32 bits_w:u32 kind:i32 width:size height:size "
                            "depth:size flags:u32", "u64", H, doc="the array handle"),
    op(331, "ARRAY_DESTROY", "dev:dev array:handle", "nil", S | H | SP),
    op(332, "MEMCPY3D_HTOD", "dev:dev array:handle ptr:ptr pitch:size rows:size x:size y:size z:size "
                             "width:size:extent height:size:extent depth:size:extent stream:stream", "nil", A | PIN),
    op(333, "MEMCPY3D_DTOH", "dev:dev array:handle ptr:ptr pitch:size rows:size x:size y:size z:size "
                             "width:size:extent height:size:extent depth:size:extent stream:stream", "nil",
       S | POUT | SP),
    op(334, "MEMCPY3D_DTOD", "dev:dev dst_array:handle dst:ptr dpitch:size drows:size dx:size dy:size dz:size "
                             "src_array:handle src:ptr spitch:size srows:size sx:size sy:size sz:size "
                             "width:size:extent height:size:extent depth:size:extent stream:stream", "nil", A),
    # A texture object over an array (res_type cudaResourceTypeArray) or linear memory (Linear: width elements;
    # Pitch2D: width x height elements, pitch bytes), with its sampler (cudaTextureDesc fields); result: the value
    # kernels take as cudaTextureObject_t.
    op(335, "TEX_CREATE", "dev:dev res_type:i32 array:handle ptr:ptr bits_x:u32 bits_y:u32 bits_z:u32 bits_w:u32 "
                          "kind:i32 width:size height:size pitch:size addr_x:i32 addr_y:i32 addr_z:i32 filter:i32 "
                          "read_mode:i32 normalized:i32 srgb:i32 border_r:f64 border_g:f64 border_b:f64 "
                          "border_a:f64", "u64", H),
    op(336, "TEX_DESTROY", "dev:dev tex:u64", "nil", H),
    op(337, "SURF_CREATE", "dev:dev array:handle", "u64", H, doc="the value kernels take as cudaSurfaceObject_t"),
    op(338, "SURF_DESTROY", "dev:dev surf:u64", "nil", H),
    # cuBLAS (pyvgpu/cublas_spec.py): a handle lives in the session on one device; each routine family is one op
    # whose arguments are the family's table (cublas_spec.wire_args), sent fire-and-forget unless it returns a
    # result to host memory (then the reply's payload holds the value).
    op(_blas.OP_CREATE, "BLAS_CREATE", "dev:dev", "u64", H, doc="a cuBLAS handle of this session on this device"),
    op(_blas.OP_DESTROY, "BLAS_DESTROY", "dev:dev handle:handle", "nil", A | H),
    op(_blas.OP_SET_WORKSPACE, "BLAS_SET_WORKSPACE", "dev:dev handle:blas ptr:ptr size:size", "nil", A | H,
       "cublasSetWorkspace (ptr 0, size 0: the library's own)"),
    *(op(f.code, f.name, _blas.wire_args(f), "nil", A | POUT if _blas.has_result(f) else A, f.doc)
      for f in _blas.FAMILIES),
    # cuBLASLt (pyvgpu/cublaslt_spec.py): descriptors live on the client; a matmul carries the descriptor's and the
    # four layouts' attributes, so it is one fire-and-forget frame ordered on its stream.
    op(_lt.OP_LT_MATMUL, "LT_MATMUL", _lt.wire_args(), "nil", A,
       "cublasLtMatmul: D = epilogue(alpha op(A) op(B) + beta C), the arguments of cublaslt_spec.matmul_wire()"),
    op(_lt.OP_LT_HEURISTIC, "LT_HEURISTIC", _lt.heuristic_args(), "u64x2", H,
       "cublasLtMatmulAlgoGetHeuristic as the backend answers it: [algorithms (0 or 1), workspace bytes]; the client "
       "asks once per problem"),
)

# cudaFuncAttribute values FUNC_SET_ATTR accepts (CUDA 13 driver_types.h; the CU_FUNC_ATTRIBUTE_* numbers are equal).
FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE = 8      # cudaFuncAttributeMaxDynamicSharedMemorySize
FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT = 9     # cudaFuncAttributePreferredSharedMemoryCarveout: -1 or 0..100
# Thread block cluster attributes, settable on devices of compute capability 9.0 and later (a GPU host's driver checks
# them; cuBLAS sets NonPortableClusterSizeAllowed in cublasCreate on an H100): RequiredClusterWidth/Height/Depth (11,
# 12, 13), NonPortableClusterSizeAllowed (14: 0 or 1), ClusterSchedulingPolicyPreference (15: 0..2).
FUNC_ATTR_CLUSTER_FIRST = 11
FUNC_ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
FUNC_ATTR_CLUSTER_SCHEDULING_POLICY = 15
FUNC_ATTR_CLUSTER_MIN_MAJOR = 9            # compute capability major of the first GPUs with clusters

# cudaLimit values (CUDA 13 driver_types.h; the CU_LIMIT_* numbers are equal) and CUDA's defaults for them.
LIMIT_NAMES: dict[int, str] = {
    0: "cudaLimitStackSize", 1: "cudaLimitPrintfFifoSize", 2: "cudaLimitMallocHeapSize",
    3: "cudaLimitDevRuntimeSyncDepth", 4: "cudaLimitDevRuntimePendingLaunchCount",
    5: "cudaLimitMaxL2FetchGranularity", 6: "cudaLimitPersistingL2CacheSize",
}
LIMIT_DEFAULTS: dict[int, int] = {0: 1024, 1: 1 << 20, 2: 8 << 20, 3: 2, 4: 2048, 5: 64, 6: 0}

# Tensor maps (TENSOR_MAP_ENCODE): which encoding, and the size of a CUtensorMap (cuda.h: CU_TENSOR_MAP_NUM_QWORDS 16).
TENSOR_MAP_TILED, TENSOR_MAP_IM2COL, TENSOR_MAP_IM2COL_WIDE = 0, 1, 2
TENSOR_MAP_BYTES = 128

# Uploaded graphs (GRAPH_CREATE): their nodes are ops flagged GRAPH.
MAX_GRAPH_OPS = 1 << 16              # ops of one uploaded graph
MAX_GRAPH_BYTES = 256 << 20          # bytes of uploaded graphs one session may hold per device

# Managed memory (MALLOC_MANAGED, MANAGED_PUSH, MANAGED_DIRTY).
MANAGED_FLAG_MAPPED = 1              # zero-copy host memory (cudaHostAllocMapped / cudaHostRegisterMapped), not managed
MANAGED_RUN_HEADER = "<QI"           # struct format of a MANAGED_PUSH run header: address, length
MANAGED_RUNS = "runs"                # MANAGED_DIRTY result key
MAX_MANAGED_RUNS = 16384             # runs in one MANAGED_DIRTY answer, and managed ranges per session and device
MAX_MANAGED_ALIGN = 1 << 16          # largest page size a client may ask MALLOC_MANAGED to align to
# Host and device changed the same bytes of managed or mapped memory between two synchronizations: pyvgpu cannot know
# the right value, so the device's context is unusable (sticky) until cudaDeviceReset, as after a fault.
MANAGED_CONFLICT_ERROR = "cudaErrorIllegalState"
MANAGED_CONFLICT_WORD = 4            # ... per aligned word of this many bytes: a merge never makes a value neither side
                                     # wrote; different 4-byte elements of one page still merge
# Device attributes whose truth is how pyvgpu carries memory and launches between hosts, not the GPU's: the emulated
# device reports these values and the client answers them for every daemon's GPUs, real ones included (name without
# the cudaDevAttr prefix -> value).
REMOTED_DEVICE_ATTRS: dict[str, int] = {
    "ManagedMemory": 1,                           # cudaMallocManaged: a host copy kept coherent
    "ConcurrentManagedAccess": 1,                 # host and device may touch managed memory at once (other bytes)
    "DirectManagedMemAccessFromHost": 0,          # the host reads its copy, not the device's memory
    "PageableMemoryAccess": 0,                    # kernels cannot reach malloc'd memory of the client
    "PageableMemoryAccessUsesHostPageTables": 0,
    "HostNativeAtomicSupported": 0,               # host and device atomics on one word do not combine
    "OnlyPartialHostNativeAtomicSupported": 0,
    "CanMapHostMemory": 1,                        # mapped host memory: a coherent device copy
    "CanUseHostPointerForRegisteredMem": 0,       # registered memory's device copy has another address
    "HostRegisterSupported": 1,
    "HostRegisterReadOnlySupported": 0,
    "UnifiedAddressing": 1,
    "GPUDirectRDMASupported": 0,
    "CanFlushRemoteWrites": 0,
    "CooperativeLaunch": 1,                       # LAUNCH_COOPERATIVE: grid-wide synchronization
    "ClusterLaunch": 0,                           # thread-block clusters of more than one block are refused
}

# Virtual memory management (VMM_*): CU_MEM_ACCESS_FLAGS_PROT_* values, and what one session may hold per device.
VMM_ACCESS_NONE, VMM_ACCESS_READ, VMM_ACCESS_READWRITE = 0, 1, 3
MAX_VMM_OBJECTS = 1 << 14            # reservations + physical allocations + mappings per session and device

# CUDA arrays (ARRAY_CREATE flags: cudaArray* values).
ARRAY_FLAG_LAYERED = 1               # cudaArrayLayered
ARRAY_FLAG_SURFACE = 2               # cudaArraySurfaceLoadStore
ARRAY_FLAG_CUBEMAP = 4               # cudaArrayCubemap (not supported)
ARRAY_FLAG_GATHER = 8                # cudaArrayTextureGather

# Copies between daemons (PEER_EXPORT / PEER_PULL / PEER_FETCH).
PEER_TICKET = "ticket"               # PEER_EXPORT result key
# STATUS result: per device figures (the daemon's sharing.py writes them; libvnvml and the CLI read them)
STATUS_DEVICE_USAGE = "device_usage"
USAGE_DEVICE = "device"
USAGE_MEMORY_USED = "memory_used"    # bytes in use by every session
USAGE_MEMORY_TOTAL = "memory_total"
USAGE_MEMORY_FREE = "memory_free"
USAGE_BUSY_RATIO_1S = "busy_ratio_1s"  # share of the last second the device ran work
MAX_PEER_CHUNK = 64 << 20            # bytes behind one ticket (the client splits larger copies)
MAX_PEER_HELD = 256 << 20            # bytes of tickets one session may hold on a daemon at once
PEER_TICKET_TTL_S = 60.0             # an unfetched ticket is dropped after this long
PEER_CONNECT_TIMEOUT_S = 5.0         # the destination daemon's connect + handshake to the source
PEER_FETCH_TIMEOUT_S = 60.0          # ... and its whole fetch

# Compressed payloads (see the module docstring). The sender's policy (pyvgpu_daemon/compress.py, csrc/core/compress.c):
# a payload of at least COMPRESS_MIN_BYTES is compressed with the codec whose predicted time, bytes / codec speed +
# compressed bytes / link rate, is lowest, if that is at most COMPRESS_GAIN of bytes / link rate; ratio and
# speed come from compressing COMPRESS_SAMPLES pieces of COMPRESS_SAMPLE_BYTES spread over the payload; the link rate
# is what the receiver reported (nothing reported yet: no compression).
COMPRESS_CODECS: dict[str, int] = {"lz4": 1, "zstd": 2}   # LZ4 block format; zstd frames (level ZSTD_LEVEL)
ZSTD_LEVEL = 1
COMPRESS_BLOCK = 1 << 20
COMPRESS_MIN_BYTES = 64 << 10
COMPRESS_SAMPLE_BYTES = 16 << 10
COMPRESS_SAMPLES = 3
COMPRESS_GAIN = 0.8
RATE_SAMPLE_MIN_BYTES = 256 << 10    # payloads at least this large on the wire give a sample of the receive rate
RATE_REPORT_CHANGE = 0.25            # a receiver reports its rate again when it moved by more than this fraction
HELLO_COMPRESS = "compress"          # hello (both ways): the codecs a side offers / the ones the daemon accepted
NOTICE_RATE = "rate"                 # key of a heartbeat notice's result: the daemon's receive rate (bytes/s)
# client: off | auto (default: the policy above, never to a loopback address) | adaptive (the policy on loopback too,
# for benchmarks through bench/netshape.py) | lz4 | zstd (always that codec: tests)
ENV_COMPRESS = "PYVGPU_COMPRESS"

# Leases (LEASE_* ops; daemon/pyvgpu_daemon/leases.py, the client side in pyvgpu/leasing.py). Keys of the request
# and result maps, and of each lease in them.
LEASE_COUNT = "count"                # GPUs wanted from this daemon (u64 >= 1)
LEASE_DEVICES = "devices"            # ordinals to choose from, best first (default: every device, in order)
LEASE_FRACTION = "fraction"          # absent: an exclusive lease; 0 < f <= 1: a share of f of each GPU
LEASE_MEMORY = "memory"              # a share's memory quota per session (bytes; default f x the GPU's memory)
LEASE_WEIGHT = "weight"              # a share's weight on the device's time (default f; capped by --max-weight)
LEASE_TTL = "ttl"                    # seconds the lease lives unless renewed (a renewal extends it by as much)
LEASE_WAIT = "wait"                  # seconds the request may wait in line for free GPUs (0: answer at once)
LEASE_HOLDER = "holder"              # who holds it, for people (str)
LEASE_JOB = "job"                    # the job it belongs to (str), to find or release a job's leases
LEASE_IDS = "ids"                    # lease ids (list of str)
LEASE_LEASES = "leases"              # result: the leases (maps with the keys below)
LEASE_RENEWED = "renewed"
LEASE_UNKNOWN = "unknown"            # ids this daemon does not hold (never granted, released or expired)
LEASE_RELEASED = "released"
LEASE_ID = "id"                      # a lease: id (32 hex digits; a capability: status shows only its tag),
LEASE_TAG = "tag"                    # ... its first 8 digits,
LEASE_DEVICE = "device"              # ... the device ordinal, LEASE_HOLDER, LEASE_JOB, LEASE_FRACTION (1 for an
LEASE_EXCLUSIVE = "exclusive"        # exclusive lease), exclusive (bool), LEASE_MEMORY (None: no quota),
LEASE_EXPIRES_IN = "expires_in"      # LEASE_WEIGHT, LEASE_TTL, seconds until it expires,
LEASE_GRANTED = "granted"            # when it was granted (Unix time), and
LEASE_SESSIONS = "sessions"          # the sessions using it
MAX_LEASE_TTL_S = 86400.0            # the longest ttl a lease may have
MAX_LEASE_WAIT_S = 30.0              # the longest a request waits in line (clients ask again; below the idle timeout)
MIN_LEASE_FRACTION = 1 / 64          # the smallest share (bounds the leases per device)
MAX_LEASE_IDS = 256                  # ids in one request or hello
MAX_LEASE_TEXT = 200                 # characters kept of a holder or job
STATUS_LEASES = "leases"             # STATUS result: every lease (ids left out)

# Replies' event times and detached requests (see the module docstring).
MAX_EVENT_TIMES = 1024               # events one reply reports (the rest follow in later replies)
DETACH_WINDOW_BYTES = 64 << 20       # detached reply bytes a client lets be in flight per connection (= the daemon's
                                     # default bound on reply bytes a session is owed)

OP_BY_NAME: dict[str, OpSpec] = {op.name: op for op in OPS}
OP_BY_CODE: dict[int, OpSpec] = {op.code: op for op in OPS}

# Device snapshot keys (HELLO reply "devices" entries). "attrs" maps cudaDeviceAttr values (int) to ints so the
# client answers cudaDeviceGetAttribute locally; the other keys fill cudaDeviceProp.
DEVICE_INFO_KEYS: tuple[str, ...] = (
    "name", "total_mem", "major", "minor", "multiprocessors", "warp_size", "max_threads_per_block",
    "max_block_dim", "max_grid_dim", "shared_mem_per_block", "shared_mem_per_multiprocessor", "regs_per_block",
    "clock_rate_khz", "memory_clock_rate_khz", "memory_bus_width", "l2_cache_size",
    "max_threads_per_multiprocessor", "total_const_mem", "uuid", "pci_bus_id", "attrs", "backend",
    "peers",                  # daemon-local ordinals whose memory this device's kernels can use after PEER_ENABLE
    "vmm_granularity",        # virtual memory management's granularity in bytes (0: the backend offers none)
)

# Keys of the MODULE_LOAD reply: {kernels: {name: {id, params: [[offset, size]...], attrs: {KERNEL_ATTR_KEYS}}},
# vars: {name: [address, size]}}.
MODULE_KERNELS = "kernels"
MODULE_VARS = "vars"
KERNEL_ID = "id"
KERNEL_PARAMS = "params"
KERNEL_ATTRS = "attrs"
# Function attributes a kernel entry reports (cudaFuncAttributes fields); a backend omits what it does not know.
KERNEL_ATTR_KEYS: tuple[str, ...] = (
    "max_threads_per_block", "shared_size_bytes", "const_size_bytes", "local_size_bytes", "num_regs",
    "ptx_version", "binary_version", "max_dynamic_shared_size_bytes", "preferred_shmem_carveout",
)


def shared_keys() -> dict[str, str]:
    """Every string key both sides use, by its C name (PV_KEY_...): generated into the C header."""
    keys = {f"HELLO_{n}": v for n, v in (("VERSION", HELLO_VERSION), ("PROOF", HELLO_PROOF),
                                          ("CLIENT", HELLO_CLIENT), ("VA_BASE", HELLO_VA_BASE),
                                          ("PID", HELLO_PID), ("HOSTNAME", HELLO_HOSTNAME),
                                          ("MEMORY", HELLO_MEMORY), ("WEIGHT", HELLO_WEIGHT),
                                          ("REPLY_DEVICES", HELLO_REPLY_DEVICES),
                                          ("REPLY_BACKEND", HELLO_REPLY_BACKEND),
                                          ("REPLY_SESSION", HELLO_REPLY_SESSION))}
    keys.update({"MODULE_KERNELS": MODULE_KERNELS, "MODULE_VARS": MODULE_VARS, "KERNEL_ID": KERNEL_ID,
                 "KERNEL_PARAMS": KERNEL_PARAMS, "KERNEL_ATTRS": KERNEL_ATTRS})
    keys.update({"HELLO_LEASES": HELLO_LEASES, "ENV_LEASES": ENV_LEASES})
    keys.update({"ENV_MEMORY": ENV_MEMORY, "ENV_WEIGHT": ENV_WEIGHT, "ENV_STATS": ENV_STATS,
                 "ENV_CENSUS": ENV_CENSUS,
                 "HOSTMAP_AUTO": HOSTMAP_AUTO,
                 "HOSTMAP_DEVICE_SEP": HOSTMAP_DEVICE_SEP})
    keys.update({f"KATTR_{k.upper()}": k for k in KERNEL_ATTR_KEYS})
    keys.update({f"DEV_{k.upper()}": k for k in DEVICE_INFO_KEYS})
    keys.update({"HELLO_COMPRESS": HELLO_COMPRESS, "NOTICE_RATE": NOTICE_RATE, "ENV_COMPRESS": ENV_COMPRESS})
    keys["MANAGED_RUNS"] = MANAGED_RUNS
    keys["PEER_TICKET"] = PEER_TICKET
    keys.update({"STATUS_DEVICE_USAGE": STATUS_DEVICE_USAGE, "USAGE_DEVICE": USAGE_DEVICE,
                 "USAGE_MEMORY_USED": USAGE_MEMORY_USED, "USAGE_MEMORY_TOTAL": USAGE_MEMORY_TOTAL,
                 "USAGE_MEMORY_FREE": USAGE_MEMORY_FREE, "USAGE_BUSY_RATIO_1S": USAGE_BUSY_RATIO_1S})
    return keys


# Error codes, from CUDA's own enum (generated file) plus the names this project relies on.
ERROR_CODES: dict[str, int] = {name: value for value, name, _ in CUDA_ERRORS}
ERROR_NAMES: dict[int, str] = {value: name for value, name, _ in CUDA_ERRORS}
ERR_PROTOCOL_MISMATCH = ERROR_CODES["cudaErrorInsufficientDriver"]   # "version mismatch" is the closest meaning
ERR_AUTH = ERROR_CODES["cudaErrorNotPermitted"]
ERR_UNAVAILABLE = ERROR_CODES["cudaErrorDevicesUnavailable"]          # daemon unreachable / connection lost


def fast_signature() -> str:
    """The FAST ops with their argument types, one string: the daemon's compiled frame path is generated from it
    (tools/gen_frame_c.py) and refused when built from another (daemon/pyvgpu_daemon/framepath.py)."""
    return ";".join(f"{op.code}:{int(op.payload_in)}:" + ",".join(a.type for a in op.args) for op in OPS if op.fast)


def cuda_error(name: str) -> int:
    return ERROR_CODES[name]


def _is_u64(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (1 << 64)


def reply_matches(spec: OpSpec, result: object) -> bool:
    """Whether a successful reply's result has the shape spec.reply declares (checked by the Python client)."""
    shape = spec.reply
    if shape == "nil":
        return result is None
    if shape == "u64":
        return _is_u64(result)
    if shape == "i64":
        return isinstance(result, int) and not isinstance(result, bool)
    if shape == "f64":
        return isinstance(result, (int, float)) and not isinstance(result, bool)
    if shape == "u64x2":
        return isinstance(result, (list, tuple)) and len(result) == 2 and all(map(_is_u64, result))
    return isinstance(result, dict)


class CU32(int):
    """A constant that C declares unsigned (suffix u): sizes compared with 32-bit lengths."""


class CU64(int):
    """A constant that C declares unsigned long long (suffix ull): sizes and addresses past 32 bits."""


def c_constants() -> dict[str, int | float | str]:
    """Every scalar constant the C client reads, by its C name (`#define PV_<name>` in protocol_gen.h, written by
    tools/gen_protocol_c.py; tests/interposer/test_interposer_protocol.py compiles and checks each). A constant the C
    side needs is added here, and only here. CU32/CU64 give its C type; str values are C string literals."""
    out: dict[str, int | float | str] = {
        "PROTOCOL_VERSION": PROTOCOL_VERSION, "HELLO_SERVER_MAGIC": HELLO_SERVER_MAGIC, "DEFAULT_PORT": DEFAULT_PORT,
        "MAX_HEADER_BYTES": CU32(MAX_HEADER_BYTES), "MAX_REPLY_HEADER_BYTES": CU32(MAX_REPLY_HEADER_BYTES),
        "MAX_STDOUT_BYTES": CU64(MAX_STDOUT_BYTES), "MAX_EVENT_TIMES": MAX_EVENT_TIMES,
        "DETACH_WINDOW_BYTES": CU64(DETACH_WINDOW_BYTES)}
    out.update({f"CODEC_{name.upper()}": code for name, code in COMPRESS_CODECS.items()})
    out.update({
        "ZSTD_LEVEL": ZSTD_LEVEL, "COMPRESS_BLOCK": CU32(COMPRESS_BLOCK),
        "COMPRESS_MIN_BYTES": CU32(COMPRESS_MIN_BYTES), "COMPRESS_SAMPLE_BYTES": CU32(COMPRESS_SAMPLE_BYTES),
        "COMPRESS_SAMPLES": COMPRESS_SAMPLES, "COMPRESS_GAIN": COMPRESS_GAIN,
        "RATE_SAMPLE_MIN_BYTES": CU32(RATE_SAMPLE_MIN_BYTES), "RATE_REPORT_CHANGE": RATE_REPORT_CHANGE,
        "CLIENT_SILENCE_TIMEOUT_MS": int(CLIENT_SILENCE_TIMEOUT_S * 1000),
        "CLIENT_PING_INTERVAL_MS": int(CLIENT_PING_INTERVAL_S * 1000),
        "VA_WINDOW_BYTES": CU64(VA_WINDOW_BYTES),
        "ERR_PROTOCOL_MISMATCH": ERR_PROTOCOL_MISMATCH, "ERR_AUTH": ERR_AUTH, "ERR_UNAVAILABLE": ERR_UNAVAILABLE,
        "FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE": FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE,
        "FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT": FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT,
        "FUNC_ATTR_CLUSTER_FIRST": FUNC_ATTR_CLUSTER_FIRST,
        "FUNC_ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED": FUNC_ATTR_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
        "FUNC_ATTR_CLUSTER_SCHEDULING_POLICY": FUNC_ATTR_CLUSTER_SCHEDULING_POLICY,
        "FUNC_ATTR_CLUSTER_MIN_MAJOR": FUNC_ATTR_CLUSTER_MIN_MAJOR,
        "LIMIT_COUNT": len(LIMIT_NAMES),
        "MAX_GRAPH_OPS": MAX_GRAPH_OPS, "MAX_GRAPH_BYTES": CU64(MAX_GRAPH_BYTES),
        "MANAGED_FLAG_MAPPED": MANAGED_FLAG_MAPPED,
        "MANAGED_RUN_HEADER_BYTES": struct.calcsize(MANAGED_RUN_HEADER),
        "MAX_MANAGED_RUNS": MAX_MANAGED_RUNS, "MAX_MANAGED_ALIGN": MAX_MANAGED_ALIGN,
        "MAX_PEER_CHUNK": CU64(MAX_PEER_CHUNK),
        "TENSOR_MAP_TILED": TENSOR_MAP_TILED, "TENSOR_MAP_IM2COL": TENSOR_MAP_IM2COL,
        "TENSOR_MAP_IM2COL_WIDE": TENSOR_MAP_IM2COL_WIDE, "TENSOR_MAP_BYTES": TENSOR_MAP_BYTES,
        "ARRAY_FLAG_LAYERED": ARRAY_FLAG_LAYERED, "ARRAY_FLAG_SURFACE": ARRAY_FLAG_SURFACE,
        "ARRAY_FLAG_CUBEMAP": ARRAY_FLAG_CUBEMAP, "ARRAY_FLAG_GATHER": ARRAY_FLAG_GATHER,
        "VMM_ACCESS_NONE": VMM_ACCESS_NONE, "VMM_ACCESS_READ": VMM_ACCESS_READ,
        "VMM_ACCESS_READWRITE": VMM_ACCESS_READWRITE, "MAX_VMM_OBJECTS": MAX_VMM_OBJECTS,
        "MANAGED_CONFLICT_ERROR": ERROR_CODES[MANAGED_CONFLICT_ERROR],
        "MANAGED_CONFLICT_WORD": MANAGED_CONFLICT_WORD})
    return out
