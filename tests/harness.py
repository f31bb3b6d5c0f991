"""The one shared harness of the tests and the benchmarks: daemons on free loopback ports, CUDA programs built once
and run under the interposer.

tests/conftest.py wraps these in pytest fixtures; bench/*.py import this module directly (they put tests/ on
sys.path). Nothing here depends on pytest.

    d = start_daemon(workdir, "--emu-devices", "2")     # python -m pyvgpu_daemon on 127.0.0.1:<free port>
    c = start_daemon(workdir, backend="chain")           # the cuda backend on pyvgpu's libcuda.so.1 over an emu daemon
    exe = build_cuda(CUDA_SRC / "api_device.cu")        # nvcc -cudart shared, cached under build/tests-cuda
    proc = run_cuda(exe, [d])                            # LD_PRELOAD=libvcudart, PYVGPU_HOSTS=the daemons
    d.stop()

Build caching: every build is keyed by a hash of its sources, its command and the compiler's path, and written
atomically (a temporary name, then a rename), so concurrent sessions and repeated runs reuse one result.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

ROOT = Path(__file__).resolve().parent.parent
# The backend of the daemons the tests start: emu, or cuda where scripts/gpu-check.sh runs the CUDA test programs on a
# real GPU (tools/gpu_check.py; tests that pass emulator options then fail there, and the report says so). On emu,
# the tests of CUDA programs also run on chains (start_chain): CHAIN_BACKENDS.
TEST_BACKEND = os.environ.get("PYVGPU_TEST_BACKEND", "emu")
CHAIN_BACKENDS = ("emu", "chain")
CUDA_SRC = ROOT / "tests" / "cuda"
NVCC = shutil.which("nvcc") or "/usr/local/bin/nvcc"
LOOPBACK = "127.0.0.1"


def call_ok(client, op: str, *args, payload=b""):
    """client.call(op, *args) that must succeed (assert); → its result."""
    err, result, _ = client.call(op, *args, payload=payload)
    assert err == 0, f"{op}{args}: error {err}"
    return result


# ---------------------------------------------------------------------------------------------- processes
def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_listening(proc: subprocess.Popen, port: int, log: Path, what: str = "daemon", host: str = LOOPBACK,
                   timeout: float = 30) -> None:
    """Wait until something accepts connections on host:port; RuntimeError with the log if proc exits first or
    nothing listens within `timeout` seconds (then proc is killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{_read(log)}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"{what} did not listen on {host}:{port}:\n{_read(log)}")


def stop_process(proc: subprocess.Popen, group: bool = False, timeout: float = 10) -> None:
    """SIGTERM (to its process group when `group`), then SIGKILL after `timeout` seconds."""
    if proc.poll() is None:
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_text(read: Callable[[], str], pattern: str, count: int = 1, timeout: float = 10) -> str:
    """read() once the regular expression `pattern` matches in it `count` times, or as it is after `timeout` seconds
    (the caller's assert then shows it). For log lines written after what a test can see: the daemon logs a refused
    greeting or a TLS handshake's end after the peer has its answer, and a loaded machine may run the peer first; a
    fixed sleep before reading the log is a race (tests/README.md, "Test reliability")."""
    deadline = time.monotonic() + timeout
    while True:
        text = read()
        if len(re.findall(pattern, text)) >= count or time.monotonic() > deadline:
            return text
        time.sleep(0.02)


def _read(log: Path | None) -> str:
    return log.read_text(errors="replace") if log is not None and log.exists() else ""


def serve_one_connection(handle: Callable[[socket.socket], None]) -> int:
    """A stand-in peer on 127.0.0.1:<free port>: a background thread accepts one connection and runs
    handle(connection), then closes both. Returns the port."""
    srv = socket.socket()
    srv.bind((LOOPBACK, 0))
    srv.listen(4)

    def serve() -> None:
        with srv:
            conn, _ = srv.accept()
            with conn:
                handle(conn)

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


# ---------------------------------------------------------------------------------------------- raw protocol peers
def wait_no_sessions(port: int, keep: int | None = None, timeout: float = 10) -> dict:
    """Poll STATUS until only the observer's own session (and `keep`) is left, at most `timeout` seconds: a session
    ends on the daemon after its client has closed, so a state read at once or after a fixed sleep is a race.
    → {"others": the sessions left, "status": the last status}."""
    deadline = time.monotonic() + timeout
    from pyvgpu.client import Client   # noqa: PLC0415 (bench scripts put the checkout on sys.path first)
    with Client.connect("127.0.0.1", port) as obs:
        while True:
            st = obs.status()
            others = [s for s in st["sessions"] if not s["self"] and s["id"] != keep]
            if not others or time.monotonic() > deadline:
                return {"others": others, "status": st}
            time.sleep(0.05)


def frame(obj: object, payload: bytes = b"") -> bytes:
    """One frame from any msgpack-able header (well-formed or not) and raw payload bytes."""
    import msgpack   # noqa: PLC0415 (a dependency of the package; imported where frames are made)
    body = msgpack.packb(obj, use_bin_type=True)
    return len(body).to_bytes(4, "little") + body + payload


def raw_session(port: int, host: str = LOOPBACK, client: str = "raw", timeout: float = 10) -> socket.socket:
    """A connected socket past the handshake (no token, plain TCP), speaking raw bytes."""
    from pyvgpu import wire   # noqa: PLC0415
    from pyvgpu.protocol import PROTOCOL_VERSION   # noqa: PLC0415
    s = socket.create_connection((host, port), timeout=timeout)
    wire.parse_server_hello(wire.recv_header(s))
    wire.send_parts(s, wire.encode_request(1, 1, [{"version": PROTOCOL_VERSION, "client": client}]))
    rep, _, _ = wire.recv_reply(s)
    assert rep.err == 0, rep
    return s


# A module image with one kernel, put(out, v): *out = v (PTX, as the emulated GPU and a real driver both load it).
PUT_PTX = b""".version 9.0
.target sm_75
.address_size 64
.visible .entry put(.param .u64 out, .param .u32 v)
{
  .reg .b32 %r<2>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [v];
  st.global.u32 [%rd1], %r1;
  ret;
}
"""


def pipelined(client, op: str, args, n: int, payload: bytes = b"", between: Callable[[], None] | None = None,
              batch: int = 1024) -> list[tuple[int, object]]:
    """n requests of op on a connected pyvgpu.client.Client, sent `batch` at a time without waiting for each reply
    (args: a tuple, or a function of the request's index giving one) → (err, result) of each, in order. `between`
    runs after each batch (e.g. to check that another session is served meanwhile)."""
    from pyvgpu import wire   # noqa: PLC0415
    from pyvgpu.protocol import OP_BY_NAME   # noqa: PLC0415
    code = OP_BY_NAME[op].code
    out: list[tuple[int, object]] = []
    for start in range(0, n, batch):
        ids = range(start, min(start + batch, n))
        client.sock.sendall(b"".join(bytes(p) for i in ids for p in wire.encode_request(
            code, 1 + i, list(args(i) if callable(args) else args), payload)))
        for i in ids:
            rep, _, _ = wire.recv_reply(client.sock)
            assert rep.req_id == 1 + i, f"reply {rep.req_id} for request {1 + i}"
            out.append((rep.err, rep.result))
        if between is not None:
            between()
    return out


def rss(pid: int) -> int:
    """Resident memory of a process in bytes (Linux)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    raise RuntimeError(f"no VmRSS for pid {pid}")


# ---------------------------------------------------------------------------------------------- daemons
@dataclass
class Daemon:
    port: int
    proc: subprocess.Popen | None
    log: Path | None
    host: str = LOOPBACK
    extra: tuple[str, ...] = field(default_factory=tuple)
    under: tuple["Daemon", ...] = ()     # a chain's emulated daemon(s): stopped with it, their logs part of its log
    backend: str = "emu"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        for d in self.under:
            d.stop()

    def log_text(self) -> str:
        return _read(self.log) + "".join(d.log_text() for d in self.under)

    def log_tail(self, n: int = 2000) -> str:
        return self.log_text()[-n:]

    def wait_log(self, pattern: str, count: int = 1, timeout: float = 10) -> str:
        """The log once `pattern` matches in it `count` times (or as it is after `timeout` s): wait_text."""
        return wait_text(self.log_text, pattern, count, timeout)


def daemon_command(*args: str, backend: str = "emu") -> list[str]:
    return [sys.executable, "-m", "pyvgpu_daemon", "--backend", backend, *args]


# Options of the emulated device: in a chain they go to the emu daemon underneath (with their values).
EMU_OPTIONS = ("--emu-devices", "--emu-memory", "--emu-slowdown")


def start_daemon(workdir: Path, *extra: str, backend: str = "emu", env: dict | None = None,
                 cwd: Path | None = None, timeout: float = 30) -> Daemon:
    """`python -m pyvgpu_daemon` on 127.0.0.1 and a free port, its log in workdir; returns once it listens.
    `env` is added to this process's environment; `cwd` is the daemon's working directory (`python -m` puts it
    first on sys.path).

    backend "chain": a `cuda` backend daemon whose cuda-python loads pyvgpu's own libcuda.so.1 (and libcublas.so.13),
    pointed at an emulated daemon started for it: the real-GPU backend on a real implementation of the driver API,
    without a GPU (docs/architecture.md, "The chain"). The emulator's options (EMU_OPTIONS) go to the emu daemon, the
    other options to the cuda one, `env` to both (over the chain's own settings, chain_env); stopping the chain stops
    both."""
    if backend == "chain":
        return start_chain(workdir, *extra, env=env, cwd=cwd, timeout=timeout)
    # Port 0: the daemon binds a free port itself and names it in its ready line. A port picked free here and bound
    # there later can be taken in between (by another test's listener or an outgoing connection), and a readiness
    # probe by connecting leaves a connection the daemon may not have closed yet when a test counts descriptors.
    log = Path(workdir) / f"daemon-{time.monotonic_ns()}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(daemon_command("--host", LOOPBACK, "--port", "0", *extra, backend=backend),
                                stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd)
    port = wait_ready_line(proc, log, timeout=timeout)
    return Daemon(port, proc, log, extra=extra, backend=backend)


def wait_ready_line(proc: subprocess.Popen, log: Path, timeout: float = 30) -> int:
    """The port of a daemon started with --port 0, once its ready line ("pyvgpu-daemon listening on HOST:PORT",
    printed after it listens) is in its log; RuntimeError with the log if it exits first or says nothing within
    `timeout` seconds (then it is killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"^pyvgpu-daemon listening on \S+:(\d+) ", _read(log), re.M)
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}:\n{_read(log)}")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"daemon did not say it listens within {timeout} s:\n{_read(log)}")


def unmet_on_a_gpu_host(extra: tuple[str, ...], devices: int) -> str | None:
    """Why a test that asked a daemon for `extra` cannot run as meant on a cuda daemon with `devices` real GPUs (None
    when it can): a cuda daemon takes no emulator option, so a test that needs N devices on one host runs where the
    host has them, and one that needs an emulated slowdown or configured memory sizes cannot run on real GPUs."""
    emu, _ = split_emu_options(extra)
    pairs = []
    while emu:
        opt = emu.pop(0)
        pairs.append(opt.split("=", 1) if "=" in opt else (opt, emu.pop(0) if emu else ""))
    for opt, value in pairs:
        if opt == "--emu-devices" and devices < int(value):
            return f"needs {value} GPUs on one host; this GPU host has {devices}"
        if opt == "--emu-slowdown" and float(value) != 1.0:
            return f"needs a GPU slowed down {value} times (--emu-slowdown): a real GPU runs at its own speed"
        if opt == "--emu-memory":
            return f"needs a GPU of {value} of memory (--emu-memory): a real GPU has the memory it has"
    return None


def split_emu_options(extra: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(the emulator's options with their values, the rest) of a daemon command line."""
    emu, rest = [], []
    args = list(extra)
    while args:
        a = args.pop(0)
        if a.split("=", 1)[0] in EMU_OPTIONS:
            emu.append(a)
            if "=" not in a and args:
                emu.append(args.pop(0))
        else:
            rest.append(a)
    return emu, rest


# The chain's driver keeps its own allocations far above the pointer windows of the programs the cuda daemon serves
# (as a GPU's driver places its own wherever it likes), so their windows are free for the backend to reserve.
CHAIN_VA_BASE = 64 << 40


def window_candidate(ptr: int, size: int, window: int) -> int | None:
    """Which of the places a window may lie at (cuda_vmm.window_candidates: a GPU host's choice; the emulator's is
    the window itself, the last) holds [ptr, ptr+size); None when none does."""
    from pyvgpu.protocol import VA_WINDOW_BYTES                        # noqa: PLC0415
    from pyvgpu_daemon.backends.cuda_vmm import window_candidates     # noqa: PLC0415
    for i, base in enumerate(window_candidates(window)):
        if base <= ptr and ptr + size <= base + VA_WINDOW_BYTES:
            return i
    return None


def chain_env(emu: Daemon, lib_dir: Path | None = None) -> dict[str, str]:
    """What a cuda backend daemon needs to run on pyvgpu's driver against the emulated daemon `emu`."""
    lib_dir = Path(lib_dir or lib_path().parent)
    return {"LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(lib_dir), os.environ.get("LD_LIBRARY_PATH")])),
            "PYVGPU_VA_BASE": str(CHAIN_VA_BASE),
            "PYVGPU_HOSTS": emu.address, "PYVGPU_CUBLAS_LIB": str(lib_dir / "libcublas.so.13"),
            "PYVGPU_CUBLASLT_LIB": str(lib_dir / "libcublasLt.so.13")}


def nvidia_chain_env(workdir: Path, lib_dir: Path | None = None) -> dict[str, str]:
    """`env` for start_daemon(..., backend="chain") whose cuda daemon runs NVIDIA's cuBLAS and cuBLASLt (the
    nvidia-cublas wheel, as on a GPU host) over pyvgpu's driver: a folder holding only libcuda.so.1 (and the core
    it needs) on LD_LIBRARY_PATH, so nothing else of pyvgpu's can stand in for NVIDIA's libraries. RuntimeError
    when the wheel is not installed (the frameworks tier brings it, torch's dependency)."""
    from pyvgpu_daemon.backends import nvidia_libs   # noqa: PLC0415
    lib_dir = Path(lib_dir or lib_path().parent)
    drv = Path(workdir) / "driver-only"
    drv.mkdir(parents=True, exist_ok=True)
    for link, target in (("libcuda.so.1", "libvcuda.so.1"), ("libpvcore.so", "libpvcore.so")):
        (drv / link).unlink(missing_ok=True)
        (drv / link).symlink_to(lib_dir / target)
    env = {"LD_LIBRARY_PATH": str(drv)}
    for lib in (nvidia_libs.CUBLAS, nvidia_libs.CUBLASLT):
        found = [path for where, path in nvidia_libs.candidates(lib) if path and where.startswith("the ")
                 and "/" in path]
        if not found:
            raise RuntimeError(f"NVIDIA's {lib.soname} is not installed ({lib.wheel}: scripts/setup-frameworks.sh)")
        env[lib.env] = found[0]
    return env


def start_chain(workdir: Path, *extra: str, env: dict | None = None, cwd: Path | None = None,
                timeout: float = 30) -> Daemon:
    emu_args, rest = split_emu_options(extra)
    emu = start_daemon(workdir, *emu_args, backend="emu", env=env, cwd=cwd, timeout=timeout)
    try:
        top = start_daemon(workdir, *rest, backend="cuda", env={**chain_env(emu), **(env or {}), "LD_PRELOAD": ""},
                           cwd=cwd, timeout=timeout)
    except BaseException:
        emu.stop()
        raise
    return Daemon(top.port, top.proc, top.log, extra=extra, under=(emu,), backend="chain")


def on_backends(cases: Iterable[tuple], chain: Callable[[tuple], bool] = lambda case: True) -> list[tuple]:
    """Parameters of a test run on several backends: each case (a tuple of the test's other arguments) with the
    backend appended, on every CHAIN_BACKENDS entry where `chain(case)` (else on emu only) when TEST_BACKEND is emu,
    else on TEST_BACKEND alone."""
    backends = CHAIN_BACKENDS if TEST_BACKEND == "emu" else (TEST_BACKEND,)
    return [(*c, b) for c in cases for b in backends if b == backends[0] or chain(c)]


# ---------------------------------------------------------------------------------------------- builds
def cached_build(out_dir: Path, name: str, sources: Iterable[Path], command: Callable[[Path], list[str]],
                 key: bytes = b"", timeout: float | None = None) -> Path:
    """Run `command(output path)` once per distinct (sources, command, key); later calls return the cached
    result. RuntimeError with the compiler's output when the build fails; subprocess.TimeoutExpired past
    `timeout` seconds."""
    digest = hashlib.sha256(b"".join(Path(s).read_bytes() for s in sources) + key +
                            repr(command(Path("OUT"))).encode()).hexdigest()[:16]
    out = Path(out_dir) / f"{name}-{digest}"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    proc = subprocess.run(command(tmp), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"build of {name} failed:\n{proc.stderr}")
    os.replace(tmp, out)
    return out


def cuda_headers() -> list[Path]:
    """The shared headers of tests/cuda (check.h, ...): part of every test program's cache key."""
    return sorted(CUDA_SRC.glob("*.h"))


def build_cuda(src: Path, extra: tuple[str, ...] = (), runtime: str = "shared") -> Path:
    """nvcc -cudart RUNTIME -O3 (shared: for libvcudart; static: nvcc's default, for libvcuda; none: driver-API
    programs and kernel images), cached by the source (with the tests/cuda headers), flags and nvcc path."""
    src = Path(src)
    return cached_build(ROOT / "build" / "tests-cuda", src.stem, [src, *cuda_headers()],
                        lambda o: [NVCC, "-cudart", runtime, "-O3", "-o", str(o), str(src), *extra])


def real_driver_fatbin(workdir: Path, source: str, name: str = "k") -> Path:
    """CUDA source as a fatbin for the cuda backend here: PTX for the emulated GPU underneath a chain, SASS for an
    sm_90 GPU (the driver picks)."""
    (Path(workdir) / f"{name}.cu").write_text(source)
    out = Path(workdir) / f"{name}.fatbin"
    subprocess.run([NVCC, "-fatbin", "-gencode", "arch=compute_75,code=compute_75", "-gencode",
                    "arch=compute_90,code=sm_90", "-o", str(out), str(Path(workdir) / f"{name}.cu")], check=True)
    return out


def ptx_of(name: str, *flags: str) -> bytes:
    """tests/cuda/<name> compiled to sm_75 PTX by nvcc (cached under build/emu-ptx)."""
    src = CUDA_SRC / name
    out = cached_build(ROOT / "build" / "emu-ptx", src.stem, [src, *cuda_headers()],
                       lambda o: [NVCC, "-ptx", "-arch=sm_75", "-O3", *flags, "-o", str(o), str(src)])
    return out.read_bytes()


# ---------------------------------------------------------------------------------------------- CUDA programs
def lib_path() -> Path:
    import pyvgpu   # noqa: PLC0415 (bench scripts put the checkout on sys.path first)
    return pyvgpu.lib_path()


def interposer_env(daemons: Iterable[Daemon], lib: str | Path | None = None) -> dict[str, str]:
    """What a CUDA program needs to run through libvcudart against `daemons` (GPU order = their order); the other
    client libraries (libcublas.so.13, ...) are found beside it, as `pyvgpu run` sets them up."""
    lib = Path(lib or lib_path())
    return {"LD_PRELOAD": str(lib), "PYVGPU_HOSTS": ",".join(d.address for d in daemons),
            "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(lib.parent), os.environ.get("LD_LIBRARY_PATH")]))}


def run_cuda(program: Path, daemons: list[Daemon], *args: str, timeout: float = 300,
             env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a CUDA program under LD_PRELOAD=libvcudart against the given daemons (GPU order = list order)."""
    full_env = {**os.environ, **interposer_env(daemons), **(env or {})}
    proc = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=timeout, env=full_env)
    if check and proc.returncode != 0:
        logs = "\n".join(d.log_text()[-3000:] for d in daemons)
        raise AssertionError(f"{program.name} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}\ndaemon logs:\n{logs}")
    return proc


def run_static(program: Path, daemons: list[Daemon], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a program built the default way (NVIDIA's static runtime inside it) on libvcuda: nothing preloaded, the
    client libraries' directory on LD_LIBRARY_PATH (its libcuda.so.1 is ours); the caller checks the result."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_path().parent), "PYVGPU_HOSTS": ",".join(d.address for d in daemons)}
    env.pop("LD_PRELOAD", None)
    return subprocess.run([str(program), *args], capture_output=True, text=True, timeout=timeout, env=env)
