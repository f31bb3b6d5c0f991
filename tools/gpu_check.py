"""The real-GPU check, offline and within a time budget (scripts/gpu-check.sh runs it; issue 17 part 5).

    bash scripts/gpu-check.sh [--budget SECONDS] [--out DIR] [--bundle DIR] [--stages LIST] [--libs HOW] [--rehearse]

It needs no network: what the GPU machine's image lacks comes from the offline bundle (tools/gpu_bundle.py). First
the set-up (with its own hard timeouts): the machine and its GPU; the bundle's wheels for the Python packages the
interpreter lacks (pip install --no-index into build/gpu-check/site); the client libraries built from the checkout
(CMake; with the bundle's msgpack-c/OpenSSL headers when the system has none), else the bundle's prebuilt ones when
their source digest is this checkout's; the driver's own word on the GPU (cuInit, cuDeviceGetCount). Then the stages,
most valuable first, each with a share of what is left of the budget (what is left less what the later stages
usually need, within the stage's minimum and cap) and a hard timeout at its share; a stage that no longer fits is
skipped and the report says so:

  hello         examples/hello through a `--backend cuda` daemon on loopback (`pyvgpu run`, libvcudart and libvcuda)
  frameworks    every framework probe script (tests/**/gpu_probe_*.py, tools/gpu_probes/gpu_probe_*.py)
  backend       the cuda backend's own tests (tests/daemon/test_daemon_cuda*.py: they run where a GPU is, else skip)
  programs      the CUDA test programs as their tests run them (tests/e2e, tests/driver), every daemon they start on
                the cuda backend (PYVGPU_TEST_BACKEND=cuda; two daemons on the one GPU where a test wants two)
  differential  every differential check script (gpu_diff_*.py under tests/ and tools/gpu_probes/):
                the emulator against the GPU, bit for bit
  figures       local against remote: sync-call latency, bulk copies, launch rate (bench/cuda/bandwidth.cu) and the
                paper workload (examples/dp_train), natively and through pyvgpu on the same GPU

The report is written into DIR as it goes (report.md, report.json, gpu-check.log, logs.tar.gz): a run killed at any
point leaves what it finished. Probe and differential scripts: docs/gpu-check.md says what they get and return.

--rehearse: the chain stands in for the GPU (the GPU machine rehearsed on a machine without one): an emulated-GPU
daemon, and every process's libcuda.so.1 is pyvgpu's own (LD_LIBRARY_PATH = the client libraries, PYVGPU_HOSTS =
that daemon), so `--backend cuda` daemons and "native" runs reach it through cuda-python and libvcuda.

Exit status: 0 when the set-up and the hello stage passed (the report lists every other stage's failures), 0 also
with "no usable GPU: <why>" when there is none (nothing to check), 1 when the set-up or hello failed, 2 on an
internal error of the check itself.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools"
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench"), str(TOOLS)]

import gpu_bundle  # noqa: E402
import harness  # noqa: E402
from harness import LOOPBACK, Daemon, cached_build, chain_env, free_port, wait_listening  # noqa: E402

MiB = 1 << 20
WORK = ROOT / "build" / "gpu-check"
PROBE_DIRS = (ROOT / "tests", TOOLS / "gpu_probes")
# tools/gpu_probes' own probes in this order (the cheapest, framework-free baseline first), after those of tests/.
OWN_PROBES = ("gpu_probe_driver.py", "gpu_probe_torch.py", "gpu_probe_cupy.py", "gpu_probe_numba.py",
              "gpu_diff_warp.py", "gpu_diff_kernels.py")
RUN_MARK = "PYVGPU_GPU_CHECK_RUN"   # in every child's environment: a killed run's orphans can be found and ended
PROGRAM_DIRS = ("tests/e2e", "tests/driver")
BACKEND_TESTS = "tests/daemon/test_daemon_cuda*.py"     # the cuda backend's tests; each needs a GPU or skips
# The test files most worth their time first (the rest follow by name): device queries, memory, kernels, the driver
# API, threads and two hosts (unique addresses), cuBLAS, then the runtime features.
PROGRAM_ORDER = ("tests/e2e/test_api_device.py", "tests/e2e/test_api_memory.py", "tests/e2e/test_api_kernels.py",
                 "tests/driver/test_driver.py", "tests/e2e/test_api_threads.py", "tests/e2e/test_api_multihost.py",
                 "tests/e2e/test_cublas_programs.py", "tests/driver/test_nvml.py")
SKIP_EXIT = 77                  # a probe's "not applicable here" (its last line says why)
DEFAULT_BUDGET = 420.0         # seconds: the default --budget, for which the stages' expect_s are set
RESERVE_S = 8.0                 # kept back from the stages: the last report, the logs archive, stopping daemons
LOG_CAP = 4 * MiB               # the tail of each log that goes into logs.tar.gz


class Interrupted(Exception):
    """SIGTERM/SIGINT/SIGHUP: stop the stage in flight, write what is known, exit."""


# ---------------------------------------------------------------------------------------------- the report
class Report:
    """report.json + report.md rewritten (atomically) whenever something is known; gpu-check.log appended line by
    line; logs.tar.gz rebuilt after each stage from the work folder."""

    def __init__(self, out: Path, work: Path, budget: float):
        self.out, self.work = out, work
        out.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.data: dict = {"report_version": 1, "status": "running", "budget_s": budget, "elapsed_s": 0.0,
                           "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": {}, "gpu": {},
                           "setup": {}, "stages": []}
        self._log = open(out / "gpu-check.log", "a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def say(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        self._log.write(line + "\n")

    def stage(self, name: str) -> dict:
        return next(s for s in self.data["stages"] if s["name"] == name)

    def write(self) -> None:
        with self._lock:
            self.data["elapsed_s"] = round(time.monotonic() - self.t0, 1)
            _atomic_write(self.out / "report.json", json.dumps(self.data, indent=1, default=str) + "\n")
            _atomic_write(self.out / "report.md", render(self.data))

    def archive_logs(self) -> None:
        """logs.tar.gz: the tail (LOG_CAP) of every file of the work folder except programs and archives."""
        tmp = self.out / ".logs.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tf:
            for f in sorted(self.work.rglob("*")):
                if not f.is_file() or f.suffix not in (".log", ".txt", ".jsonl", ".json", ".md"):
                    continue
                data = f.read_bytes()[-LOG_CAP:]
                info = tarfile.TarInfo(f"logs/{f.relative_to(self.work).as_posix()}")
                info.size, info.mtime = len(data), int(f.stat().st_mtime)
                tf.addfile(info, _BytesReader(data))
        os.replace(tmp, self.out / "logs.tar.gz")

    def close(self) -> None:
        self._log.close()


class _BytesReader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        out, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return out


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _cell(v: object, n: int = 160) -> str:
    return str(v).replace("\n", " ").replace("|", "/")[:n]


def render(d: dict) -> str:
    out = ["# pyvgpu real-GPU check", "",
           f"status **{d['status']}**, {d['elapsed_s']:.0f} s of a {d['budget_s']:.0f} s budget, started "
           f"{d['started']}{' (rehearsal: the chain stands in for the GPU)' if d.get('rehearsal') else ''}", ""]
    m, g = d.get("machine", {}), d.get("gpu", {})
    if m:
        out += [f"machine: {m.get('host', '')}, {m.get('cpus', '?')} CPUs, Python {m.get('python', '?')} "
                f"({m.get('python_path', '')}), network: {m.get('network', '?')}", ""]
    if g:
        out += [f"GPU: {g.get('count', '?')} x {g.get('name', '?')}, driver {g.get('driver', '?')}, "
                f"CUDA {g.get('cuda', '?')}, {g.get('memory', '')} ({g.get('how', '')})", ""]
    if d.get("no_gpu"):
        out += [f"no usable GPU: {d['no_gpu']}; nothing to check", ""]
    s = d.get("setup", {})
    if s:
        out += ["## Set-up", ""] + [f"- {k}: {_cell(v, 400)}" for k, v in s.items()] + [""]
    out += ["## Stages", "", "| stage | status | seconds | share | summary |", "|---|---|---:|---:|---|"]
    for st in d["stages"]:
        out.append(f"| {st['name']} | {st['status']} | {st.get('seconds', '')} | {st.get('share_s', '')} | "
                   f"{_cell(st.get('summary', ''), 300)} |")
    for st in d["stages"]:
        rows = st.get("rows")
        if rows and len(rows) > 30:     # long lists (the test programs): what did not pass; report.json has all
            passed = sum(r.get("result") in ("pass", "passed") for r in rows)
            rows = [r for r in rows if r.get("result") not in ("pass", "passed")]
            out += ["", f"({passed} passed rows of {st['name']} are in report.json)"]
        if rows:
            out += ["", f"### {st['name']}: {st['title']}", "", "| item | result | detail |", "|---|---|---|"]
            out += [f"| {_cell(r.get('item'), 90)} | {r.get('result')} | {_cell(r.get('detail', ''), 240)} |"
                    for r in rows]
        if st.get("figures"):
            out += ["", f"### {st['name']}: {st['title']}", "", "| figure | local | remote | remote / local |",
                    "|---|---:|---:|---:|"]
            for k, (a, b) in st["figures"].items():
                ratio = f"{b / a:.3f}" if a and b else ""
                out.append(f"| {k} | {_num(a)} | {_num(b)} | {ratio} |")
        if st.get("fast_ops") or st.get("fast_ops_error"):
            out += ["", "### the cuda backend's fast ops: compiled calls against cuda-python (bench/cuda_calls_bench.py)",
                    "", "| op | compiled CPU µs | cuda-python CPU µs | ratio |", "|---|---:|---:|---:|"]
            for k, row in st.get("fast_ops", {}).items():
                c, p = row["compiled"][0], row["python"][0]
                out.append(f"| {k} | {c:.2f} | {_num(p)} | {f'{c / p:.2f}' if p else ''} |")
            if st.get("launches_python_calls"):
                out.append(f"| remote empty launches per s, the daemon calling through cuda-python | "
                           f"{_num(st['launches_python_calls'])} | | |")
            if st.get("fast_ops_error"):
                out.append(f"| failed | {_cell(st['fast_ops_error'], 240)} | | |")
        if st.get("sync_on_loop"):
            loop, worker = st["sync_on_loop"]["loop"], st["sync_on_loop"]["worker"]
            out += ["", "### synchronous calls: the cuda daemon's loop answering against its worker (µs)", "",
                    "| figure | loop | worker | loop / worker |", "|---|---:|---:|---:|"]
            out += [f"| {k} | {loop[k]:.1f} | {worker[k]:.1f} | {loop[k] / worker[k]:.2f} |" for k in loop]
    return "\n".join(out) + "\n"


def _num(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


# ---------------------------------------------------------------------------------------------- processes
@dataclass
class Proc:
    """A child in its own session (process group), so a timeout or an interrupt ends it with everything it
    started."""
    popen: subprocess.Popen
    log: Path | None = None

    def stop(self, grace: float = 5.0) -> None:
        if self.popen.poll() is None:
            _killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        _killpg(self.popen.pid, signal.SIGKILL)   # what the group left behind, the leader gone or not
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            pass


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class Result:
    rc: int | None          # None: killed at its deadline
    out: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.rc is None


# ---------------------------------------------------------------------------------------------- the check
@dataclass
class Check:
    out: Path
    budget: float
    rehearse: bool
    bundle: Path
    report: Report
    env: dict = field(default_factory=dict)        # every child's environment
    gpu_env: dict = field(default_factory=dict)    # what makes "the GPU" reachable (rehearsal: the chain)
    libdir: Path | None = None
    procs: list[Proc] = field(default_factory=list)
    cuda_daemon: tuple[Proc, str] | None = None
    builds: dict[str, "Build"] = field(default_factory=dict)
    cpus: int = os.cpu_count() or 2
    run_id: str = field(default_factory=lambda: f"{os.getpid()}-{time.time_ns()}")

    # -- time
    def left(self) -> float:
        return self.budget - (time.monotonic() - self.report.t0)

    # -- children
    def popen(self, cmd: list[str], log: Path, env: dict | None = None, cwd: Path = ROOT) -> Proc:
        fh = open(log, "ab")
        try:
            p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
                                 env={**(env or self.env), RUN_MARK: self.run_id}, start_new_session=True)
        finally:
            fh.close()
        proc = Proc(p, log)
        self.procs.append(proc)
        return proc

    def run(self, cmd: list[str], timeout: float, log: Path, env: dict | None = None,
            poll: Callable[[], None] | None = None) -> Result:
        """Run to completion or to `timeout` seconds (then its whole group is killed); output appended to `log`
        and returned (its last 64 KiB). `poll` is called every second while it runs."""
        t0 = time.monotonic()
        start = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as fh:
            fh.write(f"$ {' '.join(cmd)}\n".encode())
        proc = self.popen(cmd, log, env)
        rc: int | None = None
        while True:
            try:
                rc = proc.popen.wait(timeout=min(1.0, max(0.05, timeout - (time.monotonic() - t0))))
                break
            except subprocess.TimeoutExpired:
                if poll is not None:
                    poll()
                if time.monotonic() - t0 >= timeout:
                    break
        proc.stop()
        self.procs.remove(proc)
        with open(log, "rb") as fh:
            fh.seek(start)
            text = fh.read()[-65536:].decode(errors="replace")
        return Result(rc, text, round(time.monotonic() - t0, 1))

    def prebuild(self) -> None:
        """The later stages' programs, built by nvcc while the earlier stages run (CPU work beside GPU work)."""
        for name, make in _prebuilds().items():
            self.builds[name] = Build(make)

    def built(self, name: str, deadline: float) -> Path:
        """A prebuilt program, waiting for its build until `deadline`; TimeoutError or the build's error."""
        return self.builds[name].result(deadline)

    def start_daemon(self, backend: str, extra: tuple[str, ...] = (), timeout: float = 90,
                     env_extra: dict | None = None) -> tuple[Proc, str]:
        port = free_port()
        log = self.report.work / f"daemon-{backend}-{port}.log"
        env = dict(self.env) if backend == "cuda" else {k: v for k, v in self.env.items()
                                                       if k not in ("LD_LIBRARY_PATH", "PYVGPU_HOSTS")}
        env.update(env_extra or {})
        proc = self.popen([sys.executable, "-m", "pyvgpu_daemon", "--backend", backend, "--host", LOOPBACK,
                           "--port", str(port), *extra], log, env)
        wait_listening(proc.popen, port, log, what=f"{backend} daemon", timeout=timeout)
        return proc, f"{LOOPBACK}:{port}"

    def daemon(self) -> str:
        """The shared `--backend cuda` daemon of the stages (restarted when it died)."""
        if self.cuda_daemon is None or self.cuda_daemon[0].popen.poll() is not None:
            self.cuda_daemon = self.start_daemon("cuda")
            self.report.say(f"cuda daemon on {self.cuda_daemon[1]} (log {self.cuda_daemon[0].log.name})")
        return self.cuda_daemon[1]

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            p.stop(grace=3)
        self.procs.clear()
        self.cuda_daemon = None
        reap(self.run_id)       # what escaped its group (a daemon a test detached)


    # -- environments
    def remote_env(self, hosts: list[str]) -> dict:
        """What `pyvgpu run --hosts ...` gives a program (pyvgpu.cli.run_env), over this check's environment."""
        from pyvgpu import cli, hostmap   # noqa: PLC0415
        return cli.run_env(hostmap.parse_env(",".join(hosts), "--hosts"), base=self.env)

    def native_env(self) -> dict:
        """A program run on the GPU itself: NVIDIA's libcudart.so.13 findable for -cudart shared builds (rehearsal:
        libvcudart/libvcuda against the emulated GPU, the chain's far end)."""
        env = dict(self.env)
        if not self.rehearse:
            cudart = nvidia_cudart_dir()
            if cudart:
                env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(cudart), env.get("LD_LIBRARY_PATH")]))
        return env


def reap(run_id: str) -> list[int]:
    """SIGKILL, by pid, every process whose environment carries this run's mark (children of a run killed before
    it could stop them: they live in sessions of their own); → their pids."""
    mark = f"{RUN_MARK}={run_id}".encode()
    killed: list[int] = []
    for _ in range(5):              # again until a scan finds none: one not yet killed may fork meanwhile
        found = 0
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) in (os.getpid(), *killed) or _state(d) in ("Z", "X", ""):
                continue
            try:
                if mark in (d / "environ").read_bytes().split(b"\0"):
                    os.kill(int(d.name), signal.SIGKILL)
                    killed.append(int(d.name))
                    found += 1
            except (OSError, ValueError):
                continue
        if not found:
            break
    deadline = time.monotonic() + 5          # SIGKILL lands asynchronously: wait until each is gone (or a zombie)
    while time.monotonic() < deadline and any(_state(Path(f"/proc/{pid}")) not in ("Z", "X", "") for pid in killed):
        time.sleep(0.05)
    return killed


def _state(proc_dir: Path) -> str:
    """A process's state letter from /proc/PID/stat ('' when it is gone)."""
    try:
        return proc_dir.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


class Build:
    """One program built on a daemon thread (an exit never waits for it; nvcc is bounded by its own timeout)."""

    def __init__(self, make: Callable[[], Path]):
        self._done = threading.Event()
        self._value: Path | BaseException | None = None
        threading.Thread(target=self._run, args=(make,), daemon=True, name="prebuild").start()

    def _run(self, make: Callable[[], Path]) -> None:
        try:
            self._value = make()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for it
            self._value = exc
        self._done.set()

    def result(self, deadline: float) -> Path:
        if not self._done.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError("its build did not finish within the stage's share")
        if isinstance(self._value, BaseException):
            raise self._value
        return self._value


def _prebuilds() -> dict[str, Callable[[], Path]]:
    """The later stages' programs, built the way their own scripts build them (one cache, no second recipe)."""
    import paper              # noqa: PLC0415 (imported once nvcc's folder is on PATH: they look for it at import)
    import remoting_bench     # noqa: PLC0415
    sys.path.insert(0, str(TOOLS / "gpu_probes"))
    import gpu_diff_kernels   # noqa: PLC0415
    return {"bandwidth": lambda: remoting_bench.build()[0], "dp_train": paper.build_binary,
            "diff_kernels": gpu_diff_kernels.build}


def nvcc_path() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in sorted(Path("/usr/local").glob("cuda*/bin/nvcc"), reverse=True):
        return str(cand)
    return None


def nvidia_cudart_dir() -> Path | None:
    """Where NVIDIA's libcudart.so.13 is: beside nvcc's toolkit, else in the nvidia-cuda-runtime wheel."""
    cands: list[Path] = []
    nvcc = nvcc_path()
    if nvcc:
        top = Path(nvcc).resolve().parent.parent
        cands += [top / "lib64", top / "targets" / "x86_64-linux" / "lib"]
    cands += [Path("/usr/local/cuda/lib64")]
    try:
        import nvidia   # noqa: PLC0415 (namespace package of NVIDIA's wheels)
        for base in nvidia.__path__:
            cands += sorted(Path(base).glob("*/lib"))
    except ImportError:
        pass
    return next((c for c in cands if (c / "libcudart.so.13").exists()), None)


# ---------------------------------------------------------------------------------------------- set-up
def machine_facts(chk: Check) -> None:
    # This network namespace's own view (/proc/self/net; /sys/class/net shows the namespace sysfs was mounted in).
    routes = _read_lines("/proc/self/net/route")[1:]
    ifaces = sorted(ln.split(":")[0].strip() for ln in _read_lines("/proc/self/net/dev")[2:] if ":" in ln)
    net = f"interfaces {','.join(ifaces) or 'none'}, {len(routes)} IPv4 route(s)"
    if os.environ.get("PYVGPU_GPU_CHECK_NETNS"):
        net += f" ({os.environ['PYVGPU_GPU_CHECK_NETNS']})"
    chk.report.data["machine"] = {"host": f"{platform.node()} {platform.platform()}", "cpus": chk.cpus,
                                  "python": platform.python_version(), "python_path": sys.executable,
                                  "network": net, "nvcc": nvcc_path() or "not found"}


def _read_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def no_gpu_reason() -> str:
    """Why no GPU can be used, before anything is built ('' : there may be one; the driver has the last word)."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and cvd.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES='{cvd}' hides every GPU"
    smi = shutil.which("nvidia-smi")
    if not Path("/dev/nvidiactl").exists() and not smi:
        return "no NVIDIA driver here (no /dev/nvidiactl, no nvidia-smi)"
    if smi:
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"nvidia-smi -L failed: {exc}"
        if not any(line.startswith("GPU ") for line in listed.splitlines()):
            return "nvidia-smi lists no GPU"
    return ""


def install_wheels(chk: Check) -> str:
    """The bundle's wheels of distributions this interpreter lacks → build/gpu-check/site (on PYTHONPATH)."""
    man = gpu_bundle.read_manifest(chk.bundle) or {}
    wheels = man.get("wheels", {})
    from importlib import metadata   # noqa: PLC0415
    missing = []
    for dist in gpu_bundle.WHEELS:
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            missing.append(dist)
    if not missing:
        return f"none needed (this Python has {', '.join(gpu_bundle.WHEELS)})"
    files = [chk.bundle / "wheels" / f for f, dist in wheels.items() if dist in missing]
    lacking = sorted(set(missing) - {d for d in wheels.values()})
    if lacking:
        return f"MISSING {', '.join(lacking)}: not installed and not in the bundle {chk.bundle} (scripts/gpu-bundle.sh)"
    site = WORK / "site"
    shutil.rmtree(site, ignore_errors=True)
    log = chk.report.work / "setup-pip.log"
    res = chk.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                   "--no-deps", "--no-compile", "--no-cache-dir", "--target", str(site), *map(str, files)],
                  timeout=min(120, chk.left()), log=log)
    if res.rc != 0:
        return f"FAILED: pip install --no-index of {', '.join(missing)} (exit {res.rc}): {res.out.strip()[-300:]}"
    chk.env["PYTHONPATH"] = os.pathsep.join([chk.env["PYTHONPATH"], str(site)])
    sys.path.append(str(site))
    mods = [man.get("modules", {}).get(d, d) for d in missing]
    check = chk.run([sys.executable, "-c", f"import {', '.join(mods)}"], timeout=60, log=log)
    if check.rc != 0:
        return f"FAILED: installed {', '.join(missing)} but importing them fails: {check.out.strip()[-300:]}"
    return f"installed {', '.join(missing)} from the bundle ({res.seconds:.0f} s)"


def build_libs(chk: Check, how: str) -> tuple[Path | None, str]:
    """The client libraries: built from the checkout (the system's msgpack-c/OpenSSL, else the bundle's), else the
    bundle's prebuilt ones when they are this checkout's. → (lib dir or None, what happened)."""
    notes: list[str] = []
    tries = {"auto": ("system", "bundle", "carried"), "system": ("system",), "bundle": ("bundle",),
             "carried": ("carried",)}[how]
    for way in tries:
        if way == "carried":
            why = gpu_bundle.stale_reason(chk.bundle)
            if why:
                notes.append(f"carried: refused: {why}; rerun scripts/gpu-bundle.sh")
                break
            dest = WORK / "carried"
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            _extract(chk.bundle / "libs.tar.gz", dest)
            notes.append(f"carried: the bundle's prebuilt libraries (sources {gpu_bundle.source_digest()})")
            return dest / "lib", "; ".join(notes)
        if way == "bundle" and not (chk.bundle / "sysroot.tar.gz").is_file():
            notes.append(f"bundle sysroot: none in {chk.bundle}")
            continue
        t_cap = min(240.0, chk.left() - 60)
        if t_cap < 20:
            notes.append(f"{way}: no time left to build")
            continue
        lib, note = _cmake(chk, way, t_cap)
        notes.append(note)
        if lib is not None:
            return lib, "; ".join(notes)
    return None, "; ".join(notes)


def _extract(tgz: Path, dest: Path) -> None:
    """A bundle archive into dest; members must stay inside it (tarfile's "data" filter where Python has it)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tgz) as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, filter="data")
        else:
            tf.extractall(dest)


def _cmake_path() -> str:
    """cmake on PATH, else the one beside this interpreter (the GPU image's cmake is a pip package)."""
    beside = Path(sys.executable).parent / "cmake"
    return shutil.which("cmake") or (str(beside) if beside.exists() else "cmake")


def _cmake(chk: Check, way: str, timeout: float) -> tuple[Path | None, str]:
    build = WORK / f"libs-{way}"
    log = chk.report.work / f"setup-cmake-{way}.log"
    args = [f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"]
    if way == "bundle":
        sysroot = WORK / "sysroot"
        shutil.rmtree(sysroot, ignore_errors=True)
        sysroot.mkdir(parents=True)
        _extract(chk.bundle / "sysroot.tar.gz", sysroot)
        ssl, crypto = _system_lib("libssl.so.3"), _system_lib("libcrypto.so.3")
        if not ssl or not crypto:
            return None, "bundle sysroot: no libssl.so.3/libcrypto.so.3 on this system"
        args += [f"-Dmsgpack_DIR={sysroot / 'cmake'}", f"-DOPENSSL_INCLUDE_DIR={sysroot / 'include'}",
                 f"-DOPENSSL_SSL_LIBRARY={ssl}", f"-DOPENSSL_CRYPTO_LIBRARY={crypto}"]
    t0 = time.monotonic()
    cmake = _cmake_path()
    res = chk.run([cmake, "-S", str(ROOT), "-B", str(build), *args], timeout=min(60, timeout), log=log)
    if res.rc == 0:
        res = chk.run([cmake, "--build", str(build), "-j", str(chk.cpus)],
                      timeout=timeout - (time.monotonic() - t0), log=log)
    lib = build / "lib"
    if res.rc == 0 and all((lib / f).is_file() for f in gpu_bundle.LIB_FILES):
        return lib, f"{way}: built from the checkout's sources {gpu_bundle.source_digest()} in {time.monotonic() - t0:.0f} s"
    why = "timed out" if res.timed_out else f"exit {res.rc}"
    tail = [ln for ln in res.out.splitlines() if "rror" in ln][-2:] or res.out.strip().splitlines()[-2:]
    return None, f"{way}: build failed ({why}): {' / '.join(tail)[-300:]}"


def _system_lib(name: str) -> str | None:
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=20).stdout
        for line in out.splitlines():
            if line.strip().startswith(name + " ") and "x86-64" in line:
                return line.split("=>")[-1].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib"):
        if Path(d, name).exists():
            return str(Path(d, name))
    return None


def cublas_headers(chk: Check) -> str:
    import cublas_wheel   # noqa: PLC0415
    inc = cublas_wheel.include_dir()
    if all((inc / h).is_file() for h in cublas_wheel.HEADERS):
        return f"present ({inc.relative_to(ROOT)})"
    tgz = chk.bundle / "cublas.tar.gz"
    if not tgz.is_file():
        return "MISSING (not cached, not in the bundle): the cuBLAS test programs cannot build"
    _extract(tgz, cublas_wheel.CACHE)
    ok = all((inc / h).is_file() for h in cublas_wheel.HEADERS)
    return f"from the bundle ({inc.relative_to(ROOT)})" if ok else f"MISSING: the bundle holds another version than {inc}"


PROBE_GPU = """
import json
from cuda.bindings import driver as d
from pyvgpu_daemon.backends.cuda import probe
n, why = probe(d)
out = {"count": n, "why": why}
if n:
    err, dev = d.cuDeviceGet(0)
    err, name = d.cuDeviceGetName(256, dev)
    out["name"] = name.split(b"\\0", 1)[0].decode(errors="replace")
    err, mem = d.cuDeviceTotalMem(dev)
    out["memory"] = f"{int(mem) / (1 << 30):.1f} GiB"
    err, ver = d.cuDriverGetVersion()
    out["cuda"] = f"{int(ver) // 1000}.{int(ver) % 1000 // 10}"
print("PROBE " + json.dumps(out))
"""


def probe_gpu(chk: Check) -> dict:
    res = chk.run([sys.executable, "-c", PROBE_GPU], timeout=min(90, max(10, chk.left())),
                  log=chk.report.work / "setup-probe.log")
    line = next((ln for ln in res.out.splitlines() if ln.startswith("PROBE ")), None)
    if line is None:
        return {"count": 0, "why": f"the probe failed ({'timed out' if res.timed_out else res.rc}): "
                                   f"{res.out.strip()[-300:]}"}
    return json.loads(line[6:])


def smi_facts() -> dict:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if not out:
        return {}
    name, driver, mem = (x.strip() for x in (out[0].split(",") + ["", "", ""])[:3])
    return {"name": name, "driver": driver, "memory": mem}


def setup(chk: Check, a: argparse.Namespace) -> bool:
    """The set-up; False (the report says why) when nothing can be checked."""
    rep = chk.report
    s = rep.data["setup"]
    nvcc = nvcc_path()
    if nvcc and not shutil.which("nvcc"):
        chk.env["PATH"] = os.pathsep.join([str(Path(nvcc).parent), chk.env.get("PATH", "")])
        os.environ["PATH"] = chk.env["PATH"]
        harness.NVCC = nvcc            # read by name at import by the bench scripts (imported after this)
    s["nvcc"] = nvcc or "MISSING: no CUDA program can be built"
    rep.say("set-up: wheels of the Python packages this interpreter lacks")
    s["wheels"] = install_wheels(chk)
    rep.say(f"  {s['wheels']}")
    rep.write()
    rep.say("set-up: client libraries")
    lib, note = build_libs(chk, a.libs)
    s["libraries"] = note
    rep.say(f"  {note}")
    if lib is None:
        s["result"] = "FAILED: no client libraries"
        rep.say("gpu-check: no client libraries to run with: " + note)
        return False
    chk.libdir = lib
    chk.env["PYVGPU_LIB"] = os.environ["PYVGPU_LIB"] = str(lib / "libvcudart.so")
    s["cublas_headers"] = cublas_headers(chk)
    rep.write()
    if chk.rehearse:
        rep.say("set-up: rehearsal: an emulated-GPU daemon stands in for the GPU (the chain's far end)")
        _, emu = chk.start_daemon("emu")
        host, port = emu.rsplit(":", 1)
        # What the test harness gives a chain's cuda daemon, here given to every process: "the GPU" is the chain.
        chk.gpu_env = chain_env(Daemon(int(port), None, None, host), lib)
        chk.env.update(chk.gpu_env)
        s["stand_in"] = f"emu daemon {emu}; LD_LIBRARY_PATH={lib} (libcuda.so.1 = libvcuda)"
    rep.say("set-up: the driver's word on the GPU")
    gpu = probe_gpu(chk)
    gpu.update({k: v for k, v in smi_facts().items() if k not in gpu or k == "driver"})
    gpu["how"] = "cuda-python through libvcuda and the chain" if chk.rehearse else "cuda-python + nvidia-smi"
    if chk.rehearse:
        gpu["driver"] = "libvcuda (pyvgpu's own libcuda.so.1)"
    rep.data["gpu"] = gpu
    rep.say(f"  {gpu}")
    if not gpu.get("count"):
        rep.data["no_gpu"] = gpu.get("why", "?")
        s["result"] = "no usable GPU"
        return False
    s["result"] = "ok"
    return True


# ---------------------------------------------------------------------------------------------- stages
@dataclass
class Stage:
    name: str
    title: str
    expect_s: float              # what it usually needs on a GPU machine (default budget): kept for it while
                                 # earlier stages run
    min_s: float                 # less than this left: skipped
    cap_s: float | None          # never more than this
    fn: Callable[[Check, dict, float], None]


def stage_hello(chk: Check, st: dict, deadline: float) -> None:
    work = chk.report.work
    src = ROOT / "examples" / "hello" / "vector_add.cu"
    out_dir = WORK / "programs"
    nvcc = nvcc_path() or "nvcc"
    builds: dict[str, Path | BaseException] = {}

    def build(name: str, runtime: str) -> None:
        try:
            builds[name] = cached_build(out_dir, name, [src], lambda o: [nvcc, "-cudart", runtime, "-O3", "-o",
                                                                         str(o), str(src)],
                                        timeout=max(5.0, deadline - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - reported below
            builds[name] = exc
    threads = [threading.Thread(target=build, args=a) for a in (("hello", "shared"), ("hello_static", "static"))]
    for t in threads:
        t.start()
    addr = chk.daemon()               # the daemon starts while nvcc works
    for t in threads:
        t.join()
    rows = st["rows"]
    for name, b in builds.items():
        if isinstance(b, BaseException):
            rows.append({"item": f"build {name}", "result": "fail", "detail": str(b)[-300:]})
    chk.report.write()
    dev = chk.run([sys.executable, "-m", "pyvgpu.cli", "devices", "--hosts", addr],
                  timeout=max(5, min(30, deadline - time.monotonic())), log=work / "hello.log")
    rows.append({"item": "pyvgpu devices", "result": "pass" if dev.rc == 0 else "fail",
                 "detail": " / ".join(dev.out.strip().splitlines()[-2:])})
    runs = [("native (the GPU itself, static runtime)", "hello_static", chk.native_env()),
            ("pyvgpu run, -cudart shared (libvcudart)", "hello", None),
            ("pyvgpu run, static runtime (libvcuda)", "hello_static", None)]
    for label, prog, env in runs:
        b = builds.get(prog)
        if not isinstance(b, Path):
            continue
        cmd = [str(b)] if env is not None else [sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", addr, "--",
                                                str(b)]
        r = chk.run(cmd, timeout=max(5, deadline - time.monotonic()), log=work / "hello.log", env=env)
        ok = r.rc == 0 and "PASSED" in r.out
        rows.append({"item": label, "result": "pass" if ok else "fail",
                     "detail": next((ln for ln in r.out.splitlines() if "PASSED" in ln or "rror" in ln
                                     or "fail" in ln), f"exit {r.rc}" + (" (timed out)" if r.timed_out else ""))})
        chk.report.write()
    through = [r for r in rows if r["item"].startswith("pyvgpu run")]
    st["status"] = "pass" if through and all(r["result"] == "pass" for r in rows) else "fail"
    st["summary"] = f"{sum(r['result'] == 'pass' for r in rows)} of {len(rows)} passed"


def discover(pattern: str) -> list[Path]:
    """The scripts of a hook: the check's framework-free baseline first (gpu_probe_driver.py: seconds, and it tells
    a driver failure from a framework's), then those of tests/ (the issues' own, by path), then the rest of
    tools/gpu_probes in OWN_PROBES order."""
    own = TOOLS / "gpu_probes"
    found = sorted(p for d in PROBE_DIRS if d.is_dir() for p in d.rglob(pattern) if "__pycache__" not in p.parts)

    def rank(p: Path) -> tuple[int, int, str]:
        if p.parent != own:
            return (1, 0, p.as_posix())
        first = p.name == OWN_PROBES[0]
        return (0 if first else 2, OWN_PROBES.index(p.name) if p.name in OWN_PROBES else len(OWN_PROBES), p.name)
    return sorted(found, key=rank)


def script_weight(script: Path) -> float:
    """A script's claim on its stage's time against the scripts after it: the issues' own scripts (tests/) cover
    whole frameworks; the check's own ones are a baseline and a fallback."""
    return 0.5 if script.parent == TOOLS / "gpu_probes" else 4.0


def run_scripts(chk: Check, st: dict, deadline: float, scripts: list[Path], extra_env: dict, cap: float) -> None:
    """Each script with its share of the stage (at most `cap` s): exit 0 pass, 77 skipped, else fail; its last
    output line is its summary."""
    rows = st["rows"]
    for i, script in enumerate(scripts):
        left = deadline - time.monotonic()
        weight = script_weight(script) / sum(script_weight(x) for x in scripts[i:])
        share = min(cap, max(left * weight, min(left, 10.0)))     # by weight, never a sliver
        name = script.relative_to(ROOT).as_posix()
        if share < 3:
            rows.append({"item": name, "result": "not run", "detail": "no time left in the stage"})
            continue
        out_dir = chk.report.work / st["name"] / script.stem
        out_dir.mkdir(parents=True, exist_ok=True)
        env = {**chk.env, **extra_env, "PYVGPU_GPU_CHECK_OUT": str(out_dir),
               "PYVGPU_GPU_CHECK_SECONDS": str(int(share)), "PYVGPU_GPU_CHECK_LIBDIR": str(chk.libdir),
               "PYVGPU_GPU_CHECK_REHEARSAL": "1" if chk.rehearse else "0"}
        chk.report.say(f"  {name} (at most {share:.0f} s)")
        r = chk.run([sys.executable, str(script)], timeout=share, log=out_dir / "output.log", env=env)
        last = next((ln for ln in reversed(r.out.splitlines()) if ln.strip() and not ln.startswith("$ ")), "")
        result = ("timed out" if r.timed_out else "pass" if r.rc == 0 else "skipped" if r.rc == SKIP_EXIT
                  else f"fail (exit {r.rc})")
        rows.append({"item": name, "result": result, "detail": last, "seconds": r.seconds})
        chk.report.say(f"    {result}: {last}")
        chk.report.write()
    ran = [r for r in rows if r["result"] not in ("skipped", "not run")]
    passed = sum(r["result"] == "pass" for r in rows)
    st["status"] = ("none" if not rows else "skipped" if not ran
                    else "pass" if passed == len(ran) and len(ran) == len(rows) - sum(r["result"] == "skipped"
                                                                                     for r in rows)
                    else "fail")
    st["summary"] = (f"{passed} passed, {sum(r['result'] == 'skipped' for r in rows)} skipped, "
                     f"{len(rows) - passed - sum(r['result'] == 'skipped' for r in rows)} failed or not run, "
                     f"of {len(rows)}")


def stage_frameworks(chk: Check, st: dict, deadline: float) -> None:
    scripts = discover("gpu_probe_*.py")
    if not scripts:
        st["status"], st["summary"] = "none", "no probe scripts (tests/**/gpu_probe_*.py)"
        return
    run_scripts(chk, st, deadline, scripts, {"PYVGPU_GPU_CHECK_HOSTS": chk.daemon()}, cap=240)


def stage_differential(chk: Check, st: dict, deadline: float) -> None:
    scripts = discover("gpu_diff_*.py")
    if not scripts:
        st["status"], st["summary"] = "none", "no differential checks yet (tests/**/gpu_diff_*.py)"
        return
    _, emu = chk.start_daemon("emu")
    run_scripts(chk, st, deadline, scripts, {"PYVGPU_GPU_CHECK_HOSTS": chk.daemon(), "PYVGPU_GPU_CHECK_EMU": emu},
                cap=120)


def program_test_files() -> list[str]:
    """PROGRAM_ORDER first, the emulator's own programs and the benchmark tests last, the rest by name between."""
    files = sorted(p.relative_to(ROOT).as_posix() for d in PROGRAM_DIRS for p in (ROOT / d).glob("test_*.py"))

    def rank(f: str) -> tuple[int, int, str]:
        late = Path(f).name.startswith(("test_emu_", "test_bench_", "test_dp_train"))
        return (PROGRAM_ORDER.index(f) if f in PROGRAM_ORDER else len(PROGRAM_ORDER), int(late), f)
    return sorted(files, key=rank)


def _has_module(name: str) -> bool:
    import importlib.util   # noqa: PLC0415
    return importlib.util.find_spec(name) is not None


def stage_programs(chk: Check, st: dict, deadline: float) -> None:
    # Tests of the emulator's own behaviour (marked emu_only) say nothing about a GPU.
    run_pytest(chk, st, deadline, ["-m", "not emu_only", *program_test_files()], {"PYVGPU_TEST_BACKEND": "cuda"})


def stage_backend(chk: Check, st: dict, deadline: float) -> None:
    files = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob(BACKEND_TESTS))
    run_pytest(chk, st, deadline, ["-rs", *files], {})
    if st["rows"] and all(r["result"] == "skipped" for r in st["rows"]):
        st["status"] = "fail"          # the GPU was found in the set-up: skipping every test here is a failure
        st["summary"] += "; every test skipped although the set-up found a GPU"


def run_pytest(chk: Check, st: dict, deadline: float, args: list[str], extra_env: dict) -> None:
    """pytest ARGS, the results streamed into the stage's rows (tools/gpu_check_pytest.py) as each test ends."""
    work = chk.report.work
    results = work / f"{st['name']}-results.jsonl"
    results.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-rN", "-p", "no:cacheprovider", "-p", "gpu_check_pytest"]
    notes = []
    workers = int(os.environ.get("PYVGPU_GPU_CHECK_WORKERS") or max(1, min(8, chk.cpus // 2)))
    if _has_module("xdist") and workers > 1:
        cmd += ["-n", str(workers)]
        notes.append(f"pytest-xdist, {workers} workers")
    if _has_module("pytest_timeout"):
        cmd += ["--timeout", "150"]
        notes.append("150 s per test")
    cmd += args
    env = {**chk.env, **extra_env, "PYVGPU_GPU_CHECK_RESULTS": str(results)}
    rows = st["rows"]
    collected: list[int] = []
    shown = [time.monotonic()]

    def poll() -> None:
        if not results.exists():
            return
        lines = results.read_text().splitlines()
        new = lines[len(rows) + len(collected):]
        for line in new:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if "collected" in obj:
                collected.append(obj["collected"])
                continue
            rows.append({"item": obj["test"], "result": obj["outcome"], "detail": obj.get("detail", ""),
                         "seconds": obj.get("seconds"), "chain": obj.get("chain", False)})
        if new:
            _programs_summary(st, rows, collected, notes)
            chk.report.write()
            if time.monotonic() - shown[0] > 20:     # progress on the console every 20 s
                shown[0] = time.monotonic()
                chk.report.say(f"  {st['name']} so far: {st['summary']}")

    r = chk.run(cmd, timeout=max(5, deadline - time.monotonic()), log=work / f"{st['name']}-pytest.log", env=env,
                poll=poll)
    poll()
    _programs_summary(st, rows, collected, notes)
    failed = sum(x["result"] in ("failed", "error") for x in rows)
    if r.timed_out:
        st["status"] = "partial"
    elif not rows:
        st["status"] = "fail"
        st["summary"] += f"; pytest exit {r.rc}: {r.out.strip()[-300:]}"
    else:
        st["status"] = "fail" if failed else "pass"


def _programs_summary(st: dict, rows: list[dict], collected: list[int], notes: list[str]) -> None:
    count = {k: sum(x["result"] == k for x in rows) for k in ("passed", "failed", "error", "skipped")}
    total = collected[0] if collected else None
    marked = [x for x in rows if x.get("chain")]      # the tests meant to pass on the cuda backend too
    st["collected"] = total
    st["summary"] = (f"{count['passed']} passed, {count['failed']} failed, {count['error']} errors, "
                     f"{count['skipped']} skipped"
                     + (f" (chain-marked: {sum(x['result'] == 'passed' for x in marked)} of {len(marked)} passed)"
                        if marked else "")
                     + (f", {total - len(rows)} not reached, of {total} tests" if total is not None else "")
                     + (f" ({'; '.join(notes)})" if notes else ""))


def stage_figures(chk: Check, st: dict, deadline: float) -> None:
    import paper              # noqa: PLC0415
    import remoting_bench as rb   # noqa: PLC0415
    work = chk.report.work
    figs: dict[str, list] = {}
    st["figures"] = figs
    addr = chk.daemon()
    envs = {"local": chk.native_env(), "remote": chk.remote_env([addr])}
    size = 16 * MiB if chk.rehearse else 256 * MiB
    left = lambda: deadline - time.monotonic()   # noqa: E731

    bench = chk.built("bandwidth", deadline)

    def measure(name: str, args: list[str], value: Callable[[dict], float]) -> None:
        for i, where in enumerate(("local", "remote")):
            if left() < 3:
                return
            r = chk.run([str(bench), *args], timeout=min(left(), 90), log=work / "figures.log", env=envs[where])
            row = figs.setdefault(name, [None, None])
            if r.rc == 0:
                parsed: dict[str, list[int]] = {}
                for line in r.out.splitlines():
                    words = line.split()
                    if words and not line.startswith("$ ") and all(w.lstrip("-").isdigit() for w in words[1:]):
                        parsed.setdefault(words[0], []).extend(int(w) for w in words[1:])
                try:
                    row[i] = value(parsed)
                except (KeyError, IndexError, ValueError, ZeroDivisionError) as exc:
                    st.setdefault("errors", []).append(f"{name} {where}: {exc}")
            else:
                st.setdefault("errors", []).append(f"{name} {where}: exit {r.rc}: {r.out.strip()[-200:]}")
            chk.report.write()

    measure("sync call (cudaMemGetInfo) p50 us", ["lat", "200"], lambda p: rb.pct(p["meminfo"], 50) / 1e3)
    measure("empty launches per s", ["launch", "2000"], lambda p: 2000 / ((p["kernel"][0] + p["kernel"][1]) / 1e9))
    for d in ("h2d", "d2h"):
        measure(f"{d} pinned {size // MiB} MiB GB/s", ["bw", d, "pinned", str(size), "3"],
                lambda p: size / statistics.median(p["bw"]))
    if left() > 20:
        binary = chk.built("dp_train", deadline)
        data = paper.digits_dir()
        steps = "20" if chk.rehearse else "200"
        args = ["--data", str(data), "--batch", "100", "--hidden", "128", "--steps", steps, "--log-every", "1000",
                "--gpus", "1"]
        for i, where in enumerate(("local", "remote")):
            if left() < 5:
                break
            r = chk.run([str(binary), *args], timeout=min(left(), 120), log=work / "figures.log", env=envs[where])
            final = paper.parse_output(r.out).get("final", {})
            figs.setdefault(f"dp_train ms per 1000 batches ({steps} steps)", [None, None])[i] = \
                final.get("ms_per_1000")
            figs.setdefault("dp_train test error", [None, None])[i] = final.get("test_err")
            if r.rc != 0:
                st.setdefault("errors", []).append(f"dp_train {where}: exit {r.rc}: {r.out.strip()[-200:]}")
            chk.report.write()
    if left() > 40:
        fast_ops(chk, st, bench, left)
    complete = sum(1 for a, b in figs.values() if a is not None and b is not None)
    st["status"] = "pass" if complete == len(figs) and not st.get("errors") and len(figs) >= 6 else \
        "partial" if complete else "fail"
    st["summary"] = f"{complete} of {len(figs)} figures measured both ways" + \
        (f"; errors: {' / '.join(st['errors'])[:300]}" if st.get("errors") else "")


def fast_ops(chk: Check, st: dict, bench: Path, left: Callable[[], float]) -> None:
    """The cuda backend's fast ops from compiled code against cuda-python (PYVGPU_CUDA_CALLS=python): its CPU time
    per op (bench/cuda_calls_bench.py), and the remote launch rate with a daemon calling through cuda-python (the
    rows above are the default, compiled calls). Not part of the stage's verdict; a failure is noted in the summary."""
    work = chk.report.work
    out = work / "cuda_calls.json"
    r = chk.run([sys.executable, str(ROOT / "bench" / "cuda_calls_bench.py"), "--ops", "2000", "--rounds", "2",
                 "--json", str(out)], timeout=min(left() - 15, 150), log=work / "figures.log", env=chk.env)
    if r.rc == 0 and out.is_file():
        data = json.loads(out.read_text())
        st["fast_ops"] = data["table"]
        st["sync_on_loop"] = data.get("sync")      # queries answered on the daemon's loop against its worker
    else:
        st["fast_ops_error"] = f"cuda_calls_bench: exit {r.rc}: {r.out.strip()[-200:]}"
    chk.report.write()
    if left() < 20:
        return
    proc, addr = chk.start_daemon("cuda", env_extra={"PYVGPU_CUDA_CALLS": "python"})
    try:
        r = chk.run([str(bench), "launch", "2000"], timeout=min(left(), 60), log=work / "figures.log",
                    env=chk.remote_env([addr]))
        ns = [int(w) for line in r.out.splitlines() if line.startswith("kernel ") for w in line.split()[1:]]
        if r.rc == 0 and len(ns) >= 2:
            st["launches_python_calls"] = 2000 / ((ns[0] + ns[1]) / 1e9)
    finally:
        proc.stop(grace=3)
    chk.report.write()


STAGES = (
    Stage("hello", "examples/hello through a --backend cuda daemon", 30, 20, 90, stage_hello),
    Stage("frameworks", "framework probes (gpu_probe_*.py)", 150, 15, 300, stage_frameworks),
    Stage("backend", "the cuda backend's own tests (tests/daemon/test_daemon_cuda*.py)", 45, 25, 150, stage_backend),
    Stage("programs", "CUDA test programs through --backend cuda daemons", 120, 30, None, stage_programs),
    Stage("differential", "emulator against the GPU (gpu_diff_*.py)", 30, 10, 120, stage_differential),
    Stage("figures", "local against remote on the same GPU", 60, 20, 240, stage_figures),
)


def share_of(chk: Check, stages: list[Stage], i: int) -> float:
    """Stage i's share: what is left less what the stages after it usually need, within [min_s, cap_s] (time a
    stage leaves unused flows on); 0 when even its minimum no longer fits (earlier stages are worth more, so they
    take their minimum first)."""
    left = chk.left() - RESERVE_S
    scale = min(1.0, chk.budget / DEFAULT_BUDGET)    # a shorter budget: every stage's usual need shrinks alike
    share = left - scale * sum(s.expect_s for s in stages[i + 1:])
    if stages[i].cap_s is not None:
        share = min(share, stages[i].cap_s)
    if share < stages[i].min_s:
        share = stages[i].min_s if left >= stages[i].min_s else 0.0
    return share


def run_stages(chk: Check, stages: list[Stage]) -> None:
    rep = chk.report
    for s in stages:
        rep.data["stages"].append({"name": s.name, "title": s.title, "status": "pending", "summary": "",
                                   "rows": []})
    rep.write()
    for i, s in enumerate(stages):
        st = rep.stage(s.name)
        share = share_of(chk, stages, i)
        if share <= 0:
            st["status"], st["summary"] = "skipped", f"no time left (needs {s.min_s:.0f} s, {chk.left():.0f} s left)"
            rep.say(f"stage {s.name}: skipped, no time left")
            rep.write()
            continue
        st.update(status="running", share_s=round(share))
        rep.say(f"stage {s.name}: {s.title} (share {share:.0f} s of {chk.left():.0f} s left)")
        rep.write()
        t0 = time.monotonic()
        try:
            s.fn(chk, st, t0 + share)
        except Interrupted:
            st["status"] = "interrupted"
            raise
        except Exception as exc:  # noqa: BLE001 - one stage's failure must not cost the others
            st["status"], st["summary"] = "error", f"{type(exc).__name__}: {str(exc)[-400:]}"
        finally:
            st["seconds"] = round(time.monotonic() - t0, 1)
            rep.say(f"stage {s.name}: {st['status']}: {st.get('summary', '')}")
            rep.write()
            rep.archive_logs()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/gpu-check.sh", description=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET,
                    help="seconds for the whole check (default %(default).0f)")
    ap.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else WORK / "out",
                    help="report folder (default: $OUT when set, else build/gpu-check/out)")
    ap.add_argument("--bundle", type=Path, default=gpu_bundle.DEFAULT_DIR,
                    help="the offline bundle (default .gpu-bundle; scripts/gpu-bundle.sh makes it)")
    ap.add_argument("--stages", default=",".join(s.name for s in STAGES),
                    help="comma-separated stages to run, in their order (default: all; 'none': the set-up only)")
    ap.add_argument("--libs", choices=("auto", "system", "bundle", "carried"), default="auto",
                    help="client libraries: build with the system's msgpack-c/OpenSSL, with the bundle's, or the "
                         "bundle's prebuilt ones; auto tries them in that order")
    ap.add_argument("--rehearse", action="store_true", help="the chain stands in for the GPU (no GPU needed)")
    a = ap.parse_args(argv)
    wanted = [n for n in a.stages.split(",") if n and n != "none"]
    unknown = set(wanted) - {s.name for s in STAGES}
    if unknown:
        ap.error(f"unknown stages {sorted(unknown)}; known: {', '.join(s.name for s in STAGES)}")

    if not a.rehearse:
        why = no_gpu_reason()
        if why:
            print(f"gpu-check: no usable GPU: {why}; nothing to check")
            return 0
    last = WORK / "last-run"          # a previous run of this checkout killed before it stopped its children
    if last.is_file():
        orphans = reap(last.read_text().strip())
        if orphans:
            print(f"gpu-check: ended {len(orphans)} process(es) a killed earlier run left behind: {orphans}")
    work = WORK / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rep = Report(a.out.resolve(), work, a.budget)
    rep.data["rehearsal"] = a.rehearse
    pythonpath = os.pathsep.join([str(ROOT), str(ROOT / "daemon"), str(TOOLS)]
                                 + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
    env.pop("PYVGPU_HOSTS", None)
    chk = Check(a.out, a.budget, a.rehearse, a.bundle.resolve(), rep, env=env)
    rep.data["run_id"] = chk.run_id
    last.write_text(chk.run_id + "\n")

    def on_signal(signum: int, _frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    rc = 2
    try:
        rep.say(f"gpu-check: budget {a.budget:.0f} s, report in {rep.out}" + (" (rehearsal)" if a.rehearse else ""))
        machine_facts(chk)
        rep.write()
        if not setup(chk, a):
            rep.data["status"] = "no usable GPU" if rep.data.get("no_gpu") else "set-up failed"
            if rep.data.get("no_gpu"):
                rep.say(f"gpu-check: no usable GPU: {rep.data['no_gpu']}; nothing to check")
            rc = 0 if rep.data.get("no_gpu") else 1
            return rc
        if {"figures", "differential"} & set(wanted):
            chk.prebuild()
        run_stages(chk, [s for s in STAGES if s.name in wanted])
        rep.data["status"] = "done"
        hello = next((s for s in rep.data["stages"] if s["name"] == "hello"), None)
        rc = 1 if hello is not None and hello["status"] != "pass" else 0
        return rc
    except Interrupted as exc:
        rep.data["status"] = f"interrupted ({exc})"
        rep.say(f"gpu-check: interrupted by {exc}; the report holds what finished")
        rc = 1
        return rc
    except Exception as exc:  # noqa: BLE001 - a bug of the check: the report and the log say where
        first = (str(exc).strip().splitlines() or [""])[0]
        rep.data["status"] = f"internal error: {type(exc).__name__}: {first}"
        (work / "internal-error.txt").write_text(traceback.format_exc())
        rep.say(f"gpu-check: internal error: {type(exc).__name__}: {str(exc).strip()[-1500:]}")
        rc = 2
        return rc
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        chk.stop_all()
        rep.write()
        rep.archive_logs()
        for s in rep.data["stages"]:      # the console's last lines (what a device call's output tail shows)
            rep.say(f"  {s['name']:<12} {s['status']:<11} {s.get('seconds', 0):>6} s  {s.get('summary', '')[:200]}")
        line = ", ".join(f"{s['name']} {s['status']}" for s in rep.data["stages"]) or rep.data["status"]
        rep.say(f"gpu-check: {rep.data['status']} in {rep.data['elapsed_s']:.0f} s: {line}; report {rep.out}/report.md")
        rep.close()


if __name__ == "__main__":
    sys.exit(main())
