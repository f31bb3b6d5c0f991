"""The pyvgpu wire protocol: the single source of truth for both sides.

libvcudart (C) gets its constants from a header generated from this file at build time
(`python pyvgpu/protocol.py --c-header OUT.h`, run by CMake); tests/test_protocol.py proves the two agree.
This module must import nothing outside the standard library so the build can run it before install.

Framing (both directions, little endian):

    u32  H      length of the msgpack header that follows
    H bytes     msgpack array (the header)
    P bytes     raw bulk payload; P is given inside the header (0 when there is none)

Request header:  [op, req_id, payload_len, args...]
    req_id == 0 means fire-and-forget: the daemon sends no reply. Only ops whose FLAG_ASYNC is set may be sent
    that way; their failures are latched per (session, device) and returned by the next synchronizing op.
Reply header:    [req_id, err, payload_len, result, stdout]
    err is a cudaError_t value (0 = success). result is an op-specific msgpack value (nil when unused).
    stdout is bytes of device printf output produced since the last reply on this device, or nil.

Handshake: on connect the daemon sends [HELLO_SERVER_MAGIC, PROTOCOL_VERSION, nonce(bytes 32), auth_required(bool)]
as a normal frame (u32 length + msgpack, no payload); the client answers with an OP_HELLO request whose single
argument is a map (see HELLO_* keys); the daemon replies with the reply header whose result is a map with
"devices" (a list of device snapshots, see DeviceInfo keys below), "backend" and "session".
A version mismatch or bad proof gives err=ERR_PROTOCOL_MISMATCH / ERR_AUTH and the connection is closed.
Token proof: hex(HMAC-SHA256(key=token bytes, msg=nonce)).
"""
from __future__ import annotations

import enum
import os
import sys
from dataclasses import dataclass

if not __package__:  # run as a script by the C build, before the package is installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyvgpu.cuda_errors import CUDA_ERRORS  # noqa: E402

PROTOCOL_VERSION = 1
HELLO_SERVER_MAGIC = "pyvgpu"
DEFAULT_PORT = 7700
FRAME_PREFIX_BYTES = 4
MAX_HEADER_BYTES = 1 << 20          # a header larger than this is malformed
MAX_PAYLOAD_BYTES = 1 << 34         # 16 GiB: larger claimed payloads are malformed
# Device-pointer windows: virtual GPU k's emulated allocations live at VA_WINDOW_BYTES * (k + 1) so that
# pointers of different hosts never collide on the client (the client sends its base in the hello).
VA_WINDOW_BYTES = 1 << 40

# Keys of the client hello map.
HELLO_VERSION = "version"
HELLO_PROOF = "proof"          # hex HMAC or None
HELLO_CLIENT = "client"        # free text: "pid@host argv0" for logs and status
HELLO_VA_BASE = "va_base"      # base address for this session's device 0; device r gets va_base + r*VA_WINDOW_BYTES


class OpFlag(enum.IntFlag):
    NONE = 0
    ASYNC = 1        # may be sent fire-and-forget (req_id 0); errors are deferred
    SYNC = 2         # synchronizing: returns the first deferred error of its device (and drains printf output)
    PAYLOAD_IN = 4   # request carries a bulk payload
    PAYLOAD_OUT = 8  # reply carries a bulk payload
    NO_DEVICE = 16   # first argument is not a device ordinal


@dataclass(frozen=True)
class OpSpec:
    code: int
    name: str
    args: tuple[str, ...]    # request arguments after payload_len, in order
    result: str              # what the reply's result holds
    flags: OpFlag


# The table of remoted operations. Arguments named `dev` are the daemon-local device ordinal; `stream`/`event`
# are daemon handles (0 = the legacy default stream); pointers are device addresses (u64).
OPS: tuple[OpSpec, ...] = (
    OpSpec(1, "HELLO", ("hello",), "map: devices, backend, session", OpFlag.NO_DEVICE),
    OpSpec(2, "STATUS", (), "map: sessions, devices, backend", OpFlag.NO_DEVICE),
    OpSpec(3, "GOODBYE", (), "nil", OpFlag.NO_DEVICE),
    OpSpec(10, "MEM_GET_INFO", ("dev",), "[free, total]", OpFlag.NONE),
    OpSpec(11, "MALLOC", ("dev", "size"), "ptr", OpFlag.NONE),
    OpSpec(12, "FREE", ("dev", "ptr"), "nil", OpFlag.SYNC),
    OpSpec(13, "MEMCPY_HTOD", ("dev", "dst", "stream"), "nil", OpFlag.ASYNC | OpFlag.PAYLOAD_IN),
    OpSpec(14, "MEMCPY_DTOH", ("dev", "src", "size", "stream"), "nil (payload)", OpFlag.SYNC | OpFlag.PAYLOAD_OUT),
    OpSpec(15, "MEMCPY_DTOD", ("dev", "dst", "src", "size", "stream"), "nil", OpFlag.ASYNC),
    OpSpec(16, "MEMCPY2D_HTOD", ("dev", "dst", "dpitch", "width", "height", "stream"), "nil",
           OpFlag.ASYNC | OpFlag.PAYLOAD_IN),
    OpSpec(17, "MEMCPY2D_DTOH", ("dev", "src", "spitch", "width", "height", "stream"), "nil (payload, rows packed)",
           OpFlag.SYNC | OpFlag.PAYLOAD_OUT),
    OpSpec(18, "MEMCPY2D_DTOD", ("dev", "dst", "dpitch", "src", "spitch", "width", "height", "stream"), "nil",
           OpFlag.ASYNC),
    OpSpec(19, "MEMSET", ("dev", "ptr", "value", "size", "stream"), "nil", OpFlag.ASYNC),
    OpSpec(20, "MEMSET2D", ("dev", "ptr", "pitch", "value", "width", "height", "stream"), "nil", OpFlag.ASYNC),
    OpSpec(30, "MODULE_LOAD", ("dev", "module_id"),
           "map: kernels {name: {id, params: [[offset, size]...], attrs: {...}}}, vars {name: [addr, size]}",
           OpFlag.PAYLOAD_IN),
    OpSpec(31, "LAUNCH", ("dev", "func_id", "grid", "block", "shmem", "stream"), "nil",
           OpFlag.ASYNC | OpFlag.PAYLOAD_IN),
    # attr: a cudaFuncAttribute value (FUNC_ATTR_*); the client validated it, the daemon checks again.
    OpSpec(32, "FUNC_SET_ATTR", ("dev", "func_id", "attr", "value"), "nil", OpFlag.ASYNC),
    OpSpec(40, "STREAM_CREATE", ("dev", "flags", "priority"), "stream", OpFlag.NONE),
    OpSpec(41, "STREAM_DESTROY", ("dev", "stream"), "nil", OpFlag.ASYNC),
    OpSpec(42, "STREAM_SYNC", ("dev", "stream"), "nil", OpFlag.SYNC),
    OpSpec(43, "STREAM_QUERY", ("dev", "stream"), "nil (err cudaErrorNotReady while busy)", OpFlag.NONE),
    OpSpec(44, "STREAM_WAIT_EVENT", ("dev", "stream", "event", "flags"), "nil", OpFlag.ASYNC),
    OpSpec(50, "EVENT_CREATE", ("dev", "flags"), "event", OpFlag.NONE),
    OpSpec(51, "EVENT_DESTROY", ("dev", "event"), "nil", OpFlag.ASYNC),
    OpSpec(52, "EVENT_RECORD", ("dev", "event", "stream"), "nil", OpFlag.ASYNC),
    OpSpec(53, "EVENT_SYNC", ("dev", "event"), "nil", OpFlag.SYNC),
    OpSpec(54, "EVENT_QUERY", ("dev", "event"), "nil (err cudaErrorNotReady while pending)", OpFlag.NONE),
    OpSpec(55, "EVENT_ELAPSED", ("dev", "start", "end"), "float ms", OpFlag.NONE),
    OpSpec(60, "DEVICE_SYNC", ("dev",), "nil", OpFlag.SYNC),
    OpSpec(61, "DEVICE_RESET", ("dev",), "nil", OpFlag.SYNC),
    # limit: a cudaLimit value (LIMIT_*); anything else is cudaErrorUnsupportedLimit.
    OpSpec(62, "DEVICE_SET_LIMIT", ("dev", "limit", "value"), "nil", OpFlag.NONE),
    OpSpec(63, "DEVICE_GET_LIMIT", ("dev", "limit"), "value (u64)", OpFlag.NONE),
)

# cudaFuncAttribute values FUNC_SET_ATTR accepts (CUDA 13 driver_types.h; the CU_FUNC_ATTRIBUTE_* numbers are equal).
FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE = 8      # cudaFuncAttributeMaxDynamicSharedMemorySize
FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT = 9     # cudaFuncAttributePreferredSharedMemoryCarveout: -1 or 0..100

# cudaLimit values (CUDA 13 driver_types.h; the CU_LIMIT_* numbers are equal) and CUDA's defaults for them.
LIMIT_NAMES: dict[int, str] = {
    0: "cudaLimitStackSize", 1: "cudaLimitPrintfFifoSize", 2: "cudaLimitMallocHeapSize",
    3: "cudaLimitDevRuntimeSyncDepth", 4: "cudaLimitDevRuntimePendingLaunchCount",
    5: "cudaLimitMaxL2FetchGranularity", 6: "cudaLimitPersistingL2CacheSize",
}
LIMIT_DEFAULTS: dict[int, int] = {0: 1024, 1: 1 << 20, 2: 8 << 20, 3: 2, 4: 2048, 5: 64, 6: 0}

OP_BY_NAME: dict[str, OpSpec] = {op.name: op for op in OPS}
OP_BY_CODE: dict[int, OpSpec] = {op.code: op for op in OPS}

# Device snapshot keys (HELLO reply "devices" entries). "attrs" maps cudaDeviceAttr values (int) to ints so the
# client answers cudaDeviceGetAttribute locally; the other keys fill cudaDeviceProp.
DEVICE_INFO_KEYS: tuple[str, ...] = (
    "name", "total_mem", "major", "minor", "multiprocessors", "warp_size", "max_threads_per_block",
    "max_block_dim", "max_grid_dim", "shared_mem_per_block", "shared_mem_per_multiprocessor", "regs_per_block",
    "clock_rate_khz", "memory_clock_rate_khz", "memory_bus_width", "l2_cache_size",
    "max_threads_per_multiprocessor", "total_const_mem", "uuid", "pci_bus_id", "attrs", "backend",
)

# Error codes, from CUDA's own enum (generated file) plus the names this project relies on.
ERROR_CODES: dict[str, int] = {name: value for value, name, _ in CUDA_ERRORS}
ERROR_NAMES: dict[int, str] = {value: name for value, name, _ in CUDA_ERRORS}
ERR_PROTOCOL_MISMATCH = ERROR_CODES["cudaErrorInsufficientDriver"]   # "version mismatch" is the closest meaning
ERR_AUTH = ERROR_CODES["cudaErrorNotPermitted"]
ERR_UNAVAILABLE = ERROR_CODES["cudaErrorDevicesUnavailable"]          # daemon unreachable / connection lost


def cuda_error(name: str) -> int:
    return ERROR_CODES[name]


def c_header() -> str:
    """The C view of this module: op codes, flags, error codes with names and descriptions."""
    out = [
        "/* Generated from pyvgpu/protocol.py by `python pyvgpu/protocol.py --c-header`. Do not edit. */",
        "#ifndef PYVGPU_PROTOCOL_GEN_H",
        "#define PYVGPU_PROTOCOL_GEN_H",
        "",
        f"#define PV_PROTOCOL_VERSION {PROTOCOL_VERSION}",
        f'#define PV_HELLO_SERVER_MAGIC "{HELLO_SERVER_MAGIC}"',
        f"#define PV_DEFAULT_PORT {DEFAULT_PORT}",
        f"#define PV_MAX_HEADER_BYTES {MAX_HEADER_BYTES}u",
        f"#define PV_VA_WINDOW_BYTES {VA_WINDOW_BYTES}ull",
        f"#define PV_ERR_PROTOCOL_MISMATCH {ERR_PROTOCOL_MISMATCH}",
        f"#define PV_ERR_AUTH {ERR_AUTH}",
        f"#define PV_ERR_UNAVAILABLE {ERR_UNAVAILABLE}",
        f"#define PV_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE {FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE}",
        f"#define PV_FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT {FUNC_ATTR_PREFERRED_SHMEM_CARVEOUT}",
        f"#define PV_LIMIT_COUNT {len(LIMIT_NAMES)}",
        "",
    ]
    for flag in OpFlag:
        if flag.name and flag.name != "NONE":
            out.append(f"#define PV_FLAG_{flag.name} {int(flag)}")
    out += ["", "enum pv_op {"]
    out += [f"    PV_OP_{op.name} = {op.code}," for op in OPS]
    out += ["};", "", "/* Flags of each op, indexed by op code (0 = unknown op). */",
            f"#define PV_OP_TABLE_SIZE {max(op.code for op in OPS) + 1}"]
    out.append("static const unsigned char pv_op_flags[PV_OP_TABLE_SIZE] = {")
    out += [f"    [{op.code}] = {int(op.flags)}," for op in OPS]
    out += ["};", "", "/* cudaError_t values (CUDA's numbering). */"]
    out += [f"#define PV_{name} {value}" for value, name, _ in CUDA_ERRORS]
    out += ["", "struct pv_error_desc { int code; const char *name; const char *text; };",
            "static const struct pv_error_desc pv_error_table[] = {"]
    for value, name, text in CUDA_ERRORS:
        esc = text.replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'    {{ {value}, "{name}", "{esc}" }},')
    out += ["};", f"#define PV_ERROR_TABLE_LEN {len(CUDA_ERRORS)}", "", "#endif", ""]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--c-header":
        with open(argv[2], "w", encoding="utf-8") as fh:
            fh.write(c_header())
        return 0
    print("usage: protocol.py --c-header OUT.h", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
