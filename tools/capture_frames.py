"""Capture the request frames of the CUDA test programs into tests/daemon/frames/ (the differential corpus of
tests/daemon/test_framepath.py): each program is built (nvcc, cached under build/), run the way its tests run it
(through libvcudart, libvcuda for programs built with NVIDIA's static runtime or on the driver API, or `pyvgpu run`
for the cuBLAS ones) against one emulated daemon started with PYVGPU_DAEMON_CAPTURE, and each session's received
bytes are kept, xz-compressed, as <program>[-<args>][-<session>].frames.xz. frames/MANIFEST.json records what the
corpus was captured from and against which protocol: the protocol version, the spec line of every op the corpus
sends (the test refuses a stale corpus by name), and for each session the errors its replay meets and whether it
depends on daemon-wide values. Run it again whenever the protocol changes:

    PYTHONPATH=$PWD:$PWD/daemon python tools/capture_frames.py --all          # the whole corpus (CORPUS below)
    PYTHONPATH=$PWD:$PWD/daemon python tools/capture_frames.py emu_warp        # entries whose name starts so

The programs the corpus leaves out, and why, are listed in LEFT_OUT (and in the test's docstring).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import msgpack  # noqa: E402

from pyvgpu import wire  # noqa: E402

from harness import build_cuda, interposer_env, lib_path, start_daemon  # noqa: E402

from pyvgpu.protocol import (ENV_DAEMON_CAPTURE, FRAME_PREFIX_BYTES, OP_BY_CODE, OP_BY_NAME,  # noqa: E402
                             PROTOCOL_VERSION)

OUT = ROOT / "tests" / "daemon" / "frames"
MANIFEST = OUT / "MANIFEST.json"
SUFFIX = ".frames.xz"
REPLAY_DEVICES = 2                    # the emulated GPUs of the test's daemons (tests/daemon/test_framepath.py)

XZ = 9 | lzma.PRESET_EXTREME          # a third of zlib's size on this corpus (bulk copies of patterns)


@dataclass(frozen=True)
class Program:
    """One run of a test program: as (one of) its tests run it, or with the smallest arguments that make the same
    calls. `via`: "runtime" (-cudart shared, LD_PRELOAD=libvcudart), "static" (NVIDIA's static runtime on
    libvcuda), "driver" (a driver-API program on libvcuda; {ptx} and {fatbin} in args are drv_kernels.cu's) or
    "pyvgpu run" (a program linked with `blas`, built against NVIDIA's headers; {work} in args is a folder);
    {digits} in args is examples/dp_train's data set, prepared as tests/e2e/test_dp_train.py prepares it."""
    source: str                              # relative to the checkout
    args: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()              # nvcc's, beyond the runtime's
    via: str = "runtime"
    devices: int = 1                         # emulated GPUs of the daemon
    env: tuple[tuple[str, str], ...] = ()    # the daemon's environment (emulator switches)
    client_env: tuple[tuple[str, str], ...] = ()
    runtime: str = ""                        # nvcc -cudart: shared, static, none (default: the via's)
    blas: str = ""                           # cublas or cublasLt: linked against pyvgpu's, NVIDIA's headers
    hosts: int = 1                           # daemons (GPU hosts) it runs against; each session is replayed alone
    host_args: tuple[tuple[str, ...], ...] = ()  # each daemon's own arguments (its test's, e.g. a slowdown)
    label: str = ""                          # the name's words instead of the arguments' (long option lists)

    @property
    def name(self) -> str:
        stem = Path(self.source).stem
        words = [self.label] if self.label else [a for a in self.args if not a.startswith("{")]
        return "-".join([stem, *words]) + ("-static" if self.via == "static" else "") + \
            (f"-{self.devices}gpus" if self.devices > 1 else "") + \
            (f"-{self.hosts}hosts" if self.hosts > 1 else "")


T = "tests/cuda/"
LIBCUDA = ("-lcuda",)
DRIVER = ("-lcuda", "-lpthread", "-ldl", "-lm")
# Every program under tests/cuda (and the examples and bench programs) that a test runs against one emulated daemon.
CORPUS: tuple[Program, ...] = (
    Program(T + "api_device.cu"), Program(T + "api_device.cu", devices=2),
    Program(T + "api_faults.cu", ("fork",)),              # (midcopy needs a daemon patched to refuse a frame)
    Program(T + "api_func_by_symbol.cu", flags=LIBCUDA),
    Program(T + "api_funcattr.cu"), Program(T + "api_funcattr.cu", ("printf", "4096")),
    Program(T + "api_graph.cu"), Program(T + "api_graph_mem.cu"), Program(T + "api_graph_mem.cu", via="static"),
    Program(T + "api_kernels.cu"), Program(T + "api_kernels.cu", ("fault",)),
    Program(T + "api_launch_ex.cu", flags=LIBCUDA),
    Program(T + "api_managed.cu"), Program(T + "api_managed.cu", ("multi",), devices=2),
    *(Program(T + "api_managed_conflict.cu", (s,)) for s in ("ordered", "atomics", "mapped", "kernel-after",
                                                              "thread")),
    # two hosts: each thread drives the GPU of one daemon, copies between them staged through the client, so each
    # daemon's session stands alone (not churn's: 82 sessions and 170 MB, whose frees of blocks another session
    # made fail when each is replayed alone)
    Program(T + "api_multihost.cu", ("managed",), hosts=2),
    # two hosts, one slowed down as its test runs it: each thread drives its own daemon's GPU and nothing passes
    # between them, so what each daemon receives is fixed (only when it arrives is timing), each session alone
    Program(T + "api_parallel.cu", ("2000",), hosts=2, host_args=(("--emu-slowdown", "200"), ())),
    Program(T + "api_memory.cu", ("4096",)), Program(T + "api_memory.cu", ("65536",)),
    Program(T + "api_occupancy.cu"),
    Program(T + "api_peer.cu", devices=2),
    Program(T + "api_pinned_device.cu"), Program(T + "api_pinned_device.cu", via="static"),
    Program(T + "api_copy_order.cu", ("1048576", "2")),        # (its test: 32 MiB, 12 rounds)
    Program(T + "api_pool.cu", devices=2),
    Program(T + "api_texture.cu"), Program(T + "api_texture.cu", ("trap",)),
    Program(T + "api_threads.cu"),
    Program(T + "drv_mixed.cu", flags=LIBCUDA, devices=2),
    *(Program(T + p) for p in ("emu_basic.cu", "emu_shared.cu", "emu_atomics.cu", "emu_math.cu", "emu_misc.cu",
                               "emu_assert.cu", "emu_warp.cu", "emu_calls.cu", "emu_eigen.cu", "emu_video.cu",
                               "emu_coop.cu", "emu_wmma.cu", "emu_malloc.cu")),
    Program(T + "emu_histogram.cu", ("262144",)), Program(T + "emu_thrust.cu", ("5000",)),
    Program(T + "emu_reduce.cu", ("262144",)),
    Program(T + "emu_refusal.cu", ("fault",)),
    Program(T + "emu_refusal.cu", ("refused",), ("-gencode", "arch=compute_75,code=sm_75")),
    Program(T + "harden.cu", ("printf", "65536")),              # (grid: the launch time limit)
    Program(T + "harden.cu", ("long",)), Program(T + "harden.cu", ("idle", "0")),   # (their tests: slowed, idle)
    Program(T + "load_mixed.cu", ("3", "150")), Program(T + "load_mixed.cu", ("4", "150", "64")),
    Program(T + "lease_check.cu"),
    Program(T + "wire_async.cu"), Program(T + "wire_copy_landed.cu"),
    Program(T + "wire_compress.cu", client_env=(("PYVGPU_COMPRESS", "lz4"),)),
    Program(T + "drv_vector_add.c", ("{ptx}", "{fatbin}"), DRIVER, "driver"),
    Program(T + "drv_matmul.c", ("{fatbin}", "40"), DRIVER, "driver"),
    Program(T + "drv_contexts.c", ("{ptx}", "4", "stress", "6"), DRIVER, "driver", devices=2),
    Program(T + "drv_features.c", ("{ptx}",), DRIVER, "driver"),
    Program(T + "drv_features.c", ("{ptx}", "peer"), DRIVER, "driver", devices=2),
    Program(T + "drv_ctx13.c", ("{ptx}", "6"), ("-lcuda", "-lpthread"), "driver", runtime="shared"),
    Program(T + "drv_vmm.c", ("{ptx}",), DRIVER, "driver"),
    Program(T + "drv_tensormap.c", (), DRIVER, "driver"),
    Program(T + "drv_addr_overlap.c", ("{ptx}",), DRIVER, "driver"),
    Program(T + "drv_memset_pinned.c", (), DRIVER, "driver"),
    Program(T + "drv_ctx_semantics.c", ("{ptx}",), DRIVER, "driver", devices=2),
    Program(T + "cublas_done_when.cu", ("{work}",), via="pyvgpu run", devices=2, blas="cublas"),
    Program(T + "cublas_semantics.cu", via="pyvgpu run", blas="cublas"),
    Program(T + "cublaslt_torch.cu", ("{work}",), via="pyvgpu run", devices=2, blas="cublasLt"),
    Program("examples/hello/vector_add.cu"),
    # test_dp_train.py's small configuration, on two one-GPU hosts averaged through the client (--sync ps)
    Program("examples/dp_train/dp_train.cu", ("--data", "{digits}", "--batch", "64", "--hidden", "32", "--lr", "0.5",
                                              "--seed", "3", "--log-every", "5", "--steps", "10", "--gpus", "2",
                                              "--sync", "ps"), ("-std=c++17",), hosts=2, label="ps-10"),
    Program("bench/cuda/black_scholes.cu", ("2000", "1"), env=(("PYVGPU_EMU_NATIVE", "on"),)),
    Program("bench/cuda/streams_overlap.cu", ("4096", "4", "2"), env=(("PYVGPU_EMU_NATIVE", "on"),)),
)

# Test programs the corpus does not hold, and why (the test's docstring repeats them).
LEFT_OUT = {
    "device_time.cu": "its kernels are loaded as PTX by tests/daemon/test_device_time.py, never run as a program",
    "emu_ml.cu": "its kernels are loaded into the emulator directly (tests/emu/test_emu_kernels.py), never "
                 "through a daemon",
    "emu_cta_talk.cu": "its kernels are loaded into the emulator directly (tests/emu/test_emu_ctaatomic.py, "
                       "bench/emu_cta_talk_bench.py), never through a daemon",
    "drv_procaddr.c": "it resolves the driver's exports (cuGetProcAddress) with no daemon: it sends no frames",
    "nvml_check.c": "NVML is answered in the client library: it sends no frames",
}


def kernels(work: Path) -> dict[str, str]:
    """drv_kernels.cu as PTX and as a fatbin, as tests/driver/test_driver.py's `kernels` fixture builds them."""
    src = ROOT / T / "drv_kernels.cu"
    return {"ptx": str(build_cuda(src, ("-ptx",), "none")), "fatbin": str(build_cuda(src, ("-fatbin",), "none"))}


def digits(work: Path) -> str:
    """examples/dp_train's data set (scikit-learn's digits), prepared as tests/e2e/test_dp_train.py prepares it."""
    sys.path.insert(0, str(ROOT / "examples" / "dp_train"))
    import prepare_digits  # noqa: PLC0415
    return str(prepare_digits.prepare(work / "digits"))


def run(p: Program, address: str, work: Path) -> None:
    lib = lib_path()
    flags = tuple(x for f in p.flags for x in ((f"-L{lib.parent}", f) if f == "-lcuda" else (f,)))
    if p.blas:
        sys.path.insert(0, str(ROOT / "tools"))
        import cublas_wheel  # noqa: PLC0415 (NVIDIA's headers, as the test tier fetches them)
        flags += ("-I", str(cublas_wheel.fetch()), "-L", str(lib.parent), f"-l{p.blas}")
    runtime = p.runtime or {"driver": "none", "static": "static"}.get(p.via, "shared")
    exe = build_cuda(ROOT / p.source, flags, runtime)
    places = {"work": str(work), **(kernels(work) if p.via == "driver" else {}),
              **({"digits": digits(work)} if "{digits}" in p.args else {})}
    args = [a.format(**places) if a.startswith("{") else a for a in p.args]
    env = {**os.environ, "PYVGPU_HOSTS": address}
    command = [str(exe), *args]
    if p.via == "pyvgpu run":           # as tests/e2e/test_cublas*_programs.py run them
        command = [sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", address, "--", *command]
    elif p.via == "runtime":
        env.update(interposer_env([]))
        env["PYVGPU_HOSTS"] = address
    else:
        env.pop("LD_PRELOAD", None)
        env["LD_LIBRARY_PATH"] = str(lib.parent)
    env.update(p.client_env)
    proc = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900, env=env,
                          cwd=work)
    # a kernel fault or a trap ends those cases' programs with a failure, as their tests expect
    if proc.returncode != 0 and p.args != ("fault",) and "trap" not in p.args:
        raise RuntimeError(f"{p.name} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def read(name: str) -> bytes:
    """A captured session's bytes."""
    return lzma.decompress((OUT / name).read_bytes())


def frames_of(data: bytes) -> list[tuple[int, bytes]]:
    """A well-formed session's frames: (op code, the frame's bytes)."""
    out, pos = [], 0
    while len(data) - pos >= FRAME_PREFIX_BYTES:
        n = struct.unpack_from("<I", data, pos)[0]
        header = msgpack.unpackb(data[pos + FRAME_PREFIX_BYTES:pos + FRAME_PREFIX_BYTES + n], strict_map_key=False)
        end = pos + FRAME_PREFIX_BYTES + n + wire.parse_request(header).payload_len   # (compressed: [wire, raw, codec])
        out.append((header[0], data[pos:end]))
        pos = end
    return out


def session(name: str) -> bytes:
    """A captured session's frames without its GOODBYE (a replay reads the daemon's state after them)."""
    goodbye = OP_BY_NAME["GOODBYE"].code
    return b"".join(f for op, f in frames_of(read(name)) if op != goodbye)


def ops_of(data: bytes) -> set[int]:
    """The op codes of a session's frames."""
    return {op for op, _ in frames_of(data)}


def spec_line(code: int) -> str:
    """What a captured frame of this op depends on: its code, name and arguments (their names and wire types)."""
    spec = OP_BY_CODE[code]
    return f"{code} {spec.name} " + " ".join(f"{a.name}:{a.type}" for a in spec.args) + \
        (" payload" if spec.payload_in else "")


def digest(line: str) -> str:
    return hashlib.sha256(line.encode()).hexdigest()[:12]


def capture(p: Program) -> list[tuple[str, bytes]]:
    """The sessions the program's run opened, in the order each daemon accepted them (daemon after daemon)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        extra = ("--emu-devices", str(p.devices)) if p.devices > 1 else ()
        daemons = []
        try:
            for i in range(p.hosts):
                own = p.host_args[i] if p.host_args else ()
                daemons.append(start_daemon(work, *extra, *own, env={ENV_DAEMON_CAPTURE: str(work / f"capture{i}"),
                                                               **dict(p.env)}))
            run(p, ",".join(d.address for d in daemons), work)
        finally:
            for d in daemons:
                d.stop()
        sessions = [f.read_bytes() for i in range(p.hosts) for f in sorted(
            (work / f"capture{i}").glob("*.frames"), key=lambda f: int(f.stem.split("-")[-1]))]
    sessions = [s for s in sessions if s]                   # not the interposer's port probe
    if len(sessions) == 1:
        return [(f"{p.name}{SUFFIX}", sessions[0])]
    return [(f"{p.name}-{i}{SUFFIX}", s) for i, s in enumerate(sessions)]


def replayed(sessions: list[str]) -> tuple[list[int], bool]:
    """Each session replayed (in lockstep, as the test replays it) into a fresh emulated daemon, then all of them
    again into the same daemon → (how many requests of each failed the first time: the errors the program met,
    which a replay must meet again; whether the second time answered otherwise: the program depends on what the
    daemon numbers daemon-wide, texture objects for one, and the test replays it into daemons of its own)."""
    sys.path.insert(0, str(ROOT / "tests" / "daemon"))
    import test_framepath as tf  # noqa: PLC0415 (the replay the test makes)
    devices = tuple(range(REPLAY_DEVICES))
    with tempfile.TemporaryDirectory() as tmp:
        d = start_daemon(Path(tmp), "--emu-devices", str(REPLAY_DEVICES))
        try:
            first = [tf.replay(d.port, session(n), devices, lockstep=True) for n in sessions]
            again = [tf.replay(d.port, session(n), devices, lockstep=True) for n in sessions]
        finally:
            d.stop()
    return [tf.errors(r) for r in first], first != again


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="capture the CORPUS entries whose name starts with one of these")
    ap.add_argument("--all", action="store_true", help="capture the whole corpus again (old files removed)")
    ap.add_argument("--list", action="store_true", help="list the corpus's entries and what it leaves out")
    opts = ap.parse_args()
    if opts.list:
        for p in CORPUS:
            print(f"{p.name:40} {p.source} {' '.join(p.args)} ({p.via}, {p.devices} GPU)")
        for what, why in LEFT_OUT.items():
            print(f"left out: {what}: {why}")
        return 0
    if not opts.all and not opts.names:
        ap.error("name entries to capture, or --all")
    chosen = [p for p in CORPUS if opts.all or any(p.name.startswith(n) for n in opts.names)]
    if not chosen:
        ap.error(f"no entry starts with {opts.names} (--list shows them)")
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() and not opts.all else {}
    entries = manifest.get("programs", {})
    if opts.all:
        for f in OUT.glob("*.frames.*"):
            f.unlink()
    failed: list[str] = []
    for p in chosen:
        for f in OUT.glob(f"{p.name}*{SUFFIX}"):
            if f.name in entries.get(p.name, {}).get("sessions", []):
                f.unlink()
        t0 = time.monotonic()
        try:
            files = capture(p)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            failed.append(p.name)
            print(f"{p.name}: not captured: {exc}", file=sys.stderr, flush=True)
            continue
        for name, data in files:
            (OUT / name).write_bytes(lzma.compress(data, preset=XZ))
        entries[p.name] = {"source": p.source, "args": list(p.args), "via": p.via, "devices": p.devices,
                           "sessions": [n for n, _ in files],
                           "ops": sorted(set().union(*(ops_of(d) for _, d in files)))}
        entries[p.name]["errors"], entries[p.name]["fresh"] = replayed(entries[p.name]["sessions"])
        size = sum((OUT / n).stat().st_size for n, _ in files)
        print(f"{p.name}: {len(files)} session(s), {sum(len(d) for _, d in files)} bytes received, {size} kept, "
              f"{sum(entries[p.name]['errors'])} requests failed{', daemon-wide values' * entries[p.name]['fresh']} "
              f"({time.monotonic() - t0:.1f} s)", flush=True)
    listed = {p.name for p in CORPUS}
    for name in [n for n in entries if n not in listed]:          # entries CORPUS no longer has
        for f in entries.pop(name)["sessions"]:
            (OUT / f).unlink(missing_ok=True)
    used = sorted(set().union(*(e["ops"] for e in entries.values())))
    manifest = {"protocol_version": PROTOCOL_VERSION, "programs": dict(sorted(entries.items())),
                "spec": {str(c): digest(spec_line(c)) for c in used if c in OP_BY_CODE}}
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(f.stat().st_size for f in OUT.glob(f"*{SUFFIX}"))
    print(f"{len(entries)} programs, {total} bytes compressed in {OUT.relative_to(ROOT)}")
    if failed:
        print(f"not captured: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
