"""The real-GPU backend, on a real GPU when there is one and otherwise on the chain: cuda-python on pyvgpu's own
libcuda.so.1 over an emulated daemon (tests/harness.py, start_chain), the one real implementation of the driver API
a machine without a GPU has.

Checked here: `auto` falls back to the emulated device cleanly without a GPU; the backend through its protocol (its
context per session, copies, allocations in the session's address window, module globals from the fatbin's cubins,
the packed parameter buffer handed to cuLaunchKernel, a sticky fault until DEVICE_RESET); its host waits inside the
scheduler's wait scope (the backend driven in a process of its own); older drivers (PYVGPU_FAKE_DRIVER_VERSION) and a
driver whose own ranges sit in the window. The e2e and driver suites run every CUDA test program on chains too. (The
fake driver that remains, tests/daemon/fake_driver.py, only carries the fake cuBLAS libraries.)
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from harness import ROOT, chain_env, real_driver_fatbin, window_candidate
from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, VA_WINDOW_BYTES
from pyvgpu_daemon.backends import make_backend
from pyvgpu_daemon.backends.cuda import probe
from pyvgpu_daemon.backends.cuda_vmm import window_candidates
from pyvgpu_daemon.backends.cuda_image import elf_global_names, fatbin_entries, image_globals, image_kernels

GPU_COUNT, NO_GPU_REASON = probe()
REAL = "cuda" if GPU_COUNT else "chain"      # the backend's driver: a GPU's, else pyvgpu's over an emulated GPU
NVCC = shutil.which("nvcc")

KERNEL_SRC = r"""
__device__ int counter;
__constant__ float coeffs[4];
extern "C" __global__ void add_one(int *p, int n, char pad, long long bias) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1 + counter + (int)bias;
}
"""


# ---------------------------------------------------------------------------------------------- no GPU here
def test_probe_never_raises_and_auto_falls_back():
    count, why = probe()
    assert isinstance(count, int)
    backend = make_backend("auto", emu_devices=2, emu_memory=1 << 20)
    if count == 0:
        assert why and backend.name == "emu" and len(backend.devices()) == 2
    else:
        assert backend.name == "cuda"


@pytest.mark.skipif(GPU_COUNT > 0, reason="a GPU is present: --backend cuda works")
def test_backend_cuda_without_gpu_is_a_clear_error(daemon_factory):
    with pytest.raises(RuntimeError) as e:
        daemon_factory(backend="cuda")
    assert "no usable CUDA GPU" in str(e.value) and "Traceback" not in str(e.value)


@pytest.fixture(scope="module")
def fatbin(tmp_path_factory) -> bytes:
    if NVCC is None:
        pytest.skip("nvcc not installed")
    d = tmp_path_factory.mktemp("fatbin")
    (d / "k.cu").write_text(KERNEL_SRC)
    subprocess.run([NVCC, "-fatbin", "-arch=sm_75", "-Xfatbin=-compress-all", "-o", str(d / "k.fatbin"),
                    str(d / "k.cu")], check=True, capture_output=True)
    return (d / "k.fatbin").read_bytes()


def test_globals_listed_from_compressed_fatbin(fatbin):
    elves = fatbin_entries(fatbin)[0]
    assert elves and all(e[:4] == b"\x7fELF" for e in elves)
    names = {n for e in elves for n in elf_global_names(e)}
    assert {"counter", "coeffs"} <= names
    assert fatbin_entries(b"\x50\xed\x55\xbagarbage") == ([], []) and elf_global_names(b"\x7fELF\x02garbage") == []


def test_kernels_and_layouts_read_from_cubins_and_ptx(fatbin, tmp_path):
    """What an old driver's backend reads from the image: every kernel's parameter layout, from the cubin's .nv.info
    and from PTX alike (cuFuncGetParamInfo's answer: offsets by the ABI's alignment), and the globals of PTX."""
    want = {"add_one": [(0, 8), (8, 4), (12, 1), (16, 8)]}
    assert image_kernels(fatbin) == want
    (tmp_path / "k.cu").write_text(KERNEL_SRC)
    subprocess.run([NVCC, "-ptx", "-arch=sm_75", "-o", str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")], check=True,
                   capture_output=True)
    ptx = (tmp_path / "k.ptx").read_bytes()
    assert image_kernels(ptx) == want
    assert set(image_globals(ptx)) == {"counter", "coeffs"}
    assert image_kernels(b"not an image") == {}


# ---------------------------------------------------------------------------------------------- older drivers
# Through the chain, with libvcuda made an older driver (PYVGPU_FAKE_DRIVER_VERSION): 13.0 is the GPU hosts' driver
# (580), without cuFuncGetParamCount (13.2); 12.3 lacks what CUDA 12.4-12.8 added (enumeration, parameter info,
# cuFuncLoad, cuCtxCreate_v4, cuEventElapsedTime_v2), so kernels, layouts and globals come from the image (its cubin,
# or its PTX in a PTX-only build) and older ABIs are called through their pointers.
OLD_DRIVERS = [(13000, (), ["cuFuncGetParamCount"]),
               (12030, (), ["cuCtxCreate", "cuModuleEnumerateFunctions", "cuFuncGetParamInfo", "cuEventElapsedTime"]),
               (12030, ("-gencode", "arch=compute_75,code=compute_75"), ["cuFuncGetParamInfo"])]


@pytest.mark.parametrize("version,flags,fallbacks", OLD_DRIVERS, ids=["13.0", "12.3", "12.3-ptx-only"])
def test_older_drivers_through_the_chain(version, flags, fallbacks, daemon_factory, cuda_build, run):
    d = daemon_factory(backend="chain", env={"PYVGPU_FAKE_DRIVER_VERSION": str(version)})
    for program in ("api_kernels.cu", "api_device.cu"):
        proc = run(cuda_build(program, *flags), [d], timeout=300)
        assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    log = d.log_text()
    started = re.search(r"CUDA driver CUDA \d+\.\d+ \((\d+)\)(.*)", log)
    assert started and int(started.group(1)) == version, log
    assert all(f"without {name}" in started.group(2) or f", {name}" in started.group(2) for name in fallbacks), log
    assert "hides it" not in log                       # the backend called nothing the older driver lacks
    assert "module 1 loaded: 6 kernels, 3 variables" in log


def backend_process_env(daemon_factory) -> dict[str, str]:
    """The environment of a process that drives the backend's context itself: this checkout first on the path (then
    the bundle's site), and on the chain pyvgpu's driver over a fresh emulated daemon."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "daemon")] + ([os.environ["PYTHONPATH"]]
                                                       if os.environ.get("PYTHONPATH") else []))}
    if REAL == "chain":
        env.update(chain_env(daemon_factory()))
    return env


# ---------------------------------------------------------------------------------------------- through the protocol
def test_memory_round_trip_in_the_session_window(daemon_factory):
    """Copies of every size class, allocations (small ones sub-allocated, large ones mapped alone) all inside the
    session's window, frees of bad pointers refused, the memory given back at the end."""
    d = daemon_factory(backend=REAL)
    with Client.connect("127.0.0.1", d.port) as c:
        assert c.info["backend"] == "cuda"
        assert c.devices[0]["total_mem"] > 0 and c.devices[0]["attrs"][10] == 32
        assert c.devices[0]["vmm_granularity"] >= 1 << 16
        window = VA_WINDOW_BYTES                     # the Python client's va_base: device 0's window
        rng = np.random.default_rng(1)
        ptrs = []
        for size in (1, 300, 4096, 1 << 20, (5 << 20) + 3, 64 << 20):
            data = rng.bytes(size)
            err, p, _ = c.call("MALLOC", 0, size)
            assert err == 0
            assert window_candidate(p, size, window) is not None, hex(p)
            assert c.call("MEMCPY_HTOD", 0, p, 0, payload=data)[0] == 0
            assert c.call("MEMCPY_DTOH", 0, p, size, 0)[2] == data
            ptrs.append((p, size))
        starts = sorted(ptrs)
        assert all(a + n <= b for (a, n), (b, _) in zip(starts, starts[1:]))      # no two overlap
        p = ptrs[3][0]
        assert c.call("FREE", 0, p + 1)[0] == ERROR_CODES["cudaErrorInvalidValue"]
        for p, _ in ptrs:
            assert c.call("FREE", 0, p)[0] == 0
        assert c.call("FREE", 0, ptrs[0][0])[0] == ERROR_CODES["cudaErrorInvalidValue"]


def test_sessions_of_one_daemon_share_its_window(daemon_factory):
    """Sessions of one daemon live in one process, whose address space is one: their allocations on the same window
    come from one free list, so no session asks the driver for an address another session's range covers (a real
    driver then places the range outside the window: GPU run 2 on an H100). Interleaved allocations of two sessions
    at once, then of a third after the first left, all lie in the window, never overlap, and the daemon never says it
    placed a range outside the window."""
    d = daemon_factory(backend=REAL)
    window = VA_WINDOW_BYTES
    sizes = (100, 1 << 20, (3 << 20) + 5, 4096, 32 << 20)
    with Client.connect("127.0.0.1", d.port) as a, Client.connect("127.0.0.1", d.port) as b:
        ranges = []
        for size in sizes:
            for c in (a, b):
                err, p, _ = c.call("MALLOC", 0, size)
                assert err == 0
                ranges.append((p, size))
    later = []
    with Client.connect("127.0.0.1", d.port) as c3:
        for size in sizes:
            err, p, _ = c3.call("MALLOC", 0, size)
            assert err == 0
            later.append((p, size))
    places = {window_candidate(p, size, window) for p, size in ranges + later}
    assert len(places) == 1 and None not in places, places          # one place for the window, whatever session
    starts = sorted(ranges)
    assert all(x + n <= y for (x, n), (y, _) in zip(starts, starts[1:]))          # no two overlap
    assert "not in the window" not in d.log_text()


SLAB_CHURN = r"""
import json
from pyvgpu_daemon.backends.cuda import CudaBackend

ctx = CudaBackend().open_context(0, 1 << 40, 1)
real = ctx.mem.drv
live = {}                                  # ranges reserved with the driver and not freed: start -> size
events = []


class Counting:
    # the loaded driver itself (pyvgpu's over an emulated GPU, or a GPU's), its reservations counted
    def __getattr__(self, name):
        return getattr(real, name)

    def cuMemAddressReserve(self, size, align, addr, flags):
        err, ptr = real.cuMemAddressReserve(size, align, addr, flags)
        if err == real.CUresult.CUDA_SUCCESS:
            live[int(ptr)] = size
            events.append("reserve")
        return err, ptr

    def cuMemAddressFree(self, ptr, size):
        live.pop(int(ptr), None)
        events.append("free")
        return real.cuMemAddressFree(ptr, size)


ctx.mem.drv = Counting()
out = {}
for size in (300, (3 << 20) + 5, 100 << 20, 300):  # an arena's, a mapping of its own, over a slab, then small again
    ctx.free(ctx.malloc(size))                      # the first time may reserve (and give a smaller slab back)
    before = len(events)
    for _ in range(10):
        ctx.free(ctx.malloc(size))
    out[size] = events[before:]
out["kept"] = len(live)
ctx.close()
out["left"] = len(live)
print("RESULT " + json.dumps(out))
"""


def test_a_session_that_allocates_and_frees_in_a_loop_keeps_one_empty_slab(daemon_factory):
    """A session that allocates and frees again and again does not reserve and free a slab each time: it keeps one
    empty slab of the window (its largest) until it ends (GPU run 6: a small program reserved three 1 GiB slabs in
    300 ms, as a real driver does not give a just-freed hint again at once). The backend's context driven in a
    process of its own, its driver's reservations counted (pyvgpu's driver over an emulated GPU, or a GPU's): none in
    ten cycles of each size once the first has run, one range left while the session lives, none once it ended."""
    env = backend_process_env(daemon_factory)
    proc = subprocess.run([sys.executable, "-c", SLAB_CHURN], capture_output=True, text=True, timeout=120, env=env)
    found = re.search(r"^RESULT (.*)$", proc.stdout, re.M)
    assert found, proc.stdout + proc.stderr
    got = json.loads(found.group(1))
    assert [got[str(size)] for size in (300, (3 << 20) + 5, 100 << 20)] == [[]] * 3, got
    assert (got["kept"], got["left"]) == (1, 0), got


def test_module_load_launch_fault_and_reset(daemon_factory, tmp_path):
    if NVCC is None:
        pytest.skip("nvcc not installed")
    src = tmp_path / "k.cu"
    src.write_text(KERNEL_SRC)
    subprocess.run([NVCC, "-fatbin", "-arch=sm_75", "-o", str(tmp_path / "k.fatbin"), str(src)], check=True)
    image = (tmp_path / "k.fatbin").read_bytes()
    d = daemon_factory(backend=REAL)
    with Client.connect("127.0.0.1", d.port) as c:
        assert c.call("MODULE_LOAD", 0, 2, payload=b"not an image")[0] != 0
        err, info, _ = c.call("MODULE_LOAD", 0, 1, payload=image)
        assert err == 0, err
        k = info["kernels"]["add_one"]
        assert [tuple(x) for x in k["params"]] == [(0, 8), (8, 4), (12, 1), (16, 8)]
        addr, size = info["vars"]["counter"]
        assert size == 4
        n = 1000
        _, p, _ = c.call("MALLOC", 0, 4 * n)
        c.call("MEMCPY_HTOD", 0, p, 0, payload=np.arange(n, dtype=np.int32).tobytes())
        c.call("MEMCPY_HTOD", 0, addr, 0, payload=np.int32(5).tobytes())
        params = struct.pack("<Qi", p, n) + b"\0" * 4 + struct.pack("<q", 10)
        assert c.call("LAUNCH", 0, k["id"], [4, 1, 1], [256, 1, 1], 0, 0, payload=params)[0] == 0
        err, _, out = c.call("MEMCPY_DTOH", 0, p, 4 * n, 0)
        assert err == 0 and (np.frombuffer(out, np.int32) == np.arange(n) + 16).all()
        # a kernel fault and DEVICE_RESET after it, as the driver answers them: test_daemon_cuda_faults.py


# ---------------------------------------------------------------------------------------------- the context itself
HOST_WAITS = """
from contextlib import contextmanager
from pyvgpu_daemon.backends.cuda import CudaBackend

ctx = CudaBackend().open_context(0, 1 << 40, 1)
waits = []

@contextmanager
def scope():
    waits.append("in")
    yield
    waits.append("out")

ctx.wait_scope = scope
p = ctx.malloc(64)
ctx.memcpy_htod(p, b"x" * 64, None)
assert waits == [], waits                        # enqueueing work does not wait
ctx.synchronize()
ctx.stream_sync(None)
ev = ctx.event_create(0)
ctx.event_record(ev, None)
ctx.event_sync(ev)
assert ctx.memcpy_dtoh(p, 64, None) == b"x" * 64
assert waits == ["in", "out"] * 4, waits
ctx.close()
print("WAITS OK")
"""


def test_host_waits_give_the_device_turn_away(daemon_factory, tmp_path):
    """Every blocking driver wait (stream/event/context synchronize, and the sync inside a D2H copy) runs inside the
    context's wait_scope, which the scheduler sets so other sessions may use the device meanwhile: the backend's
    context driven directly, in a process whose cuda-python loaded pyvgpu's driver (or a GPU's)."""
    env = backend_process_env(daemon_factory)
    proc = subprocess.run([sys.executable, "-c", HOST_WAITS], capture_output=True, text=True, timeout=120, env=env)
    assert "WAITS OK" in proc.stdout, proc.stdout + proc.stderr


LOOP_ANSWERS = r"""
import json, sys, threading, time
import numpy as np
from pyvgpu.protocol import OP_BY_NAME
from pyvgpu_daemon.backends.cuda import CudaBackend

backend = CudaBackend()
a = backend.open_context(0, 1 << 40, 1)                 # two sessions' contexts, this thread their worker
b = backend.open_context(0, 4 << 40, 2)
drv = a.drv
mod = a.module_load(open(sys.argv[1], "rb").read())
p = a.malloc(64)
sa = a.stream_create(0, 0)
eb = b.event_create(0)
b.event_record(eb, None)
out = {"answers_on_loop": [a.answers_on_loop, b.answers_on_loop]}
specs = {n: OP_BY_NAME[n] for n in ("STREAM_SYNC", "DEVICE_SYNC", "MEM_GET_INFO", "EVENT_QUERY", "MEMSET", "LAUNCH")}

def current():
    return int(drv.cuCtxGetCurrent()[1])

def loop(tag, busy):
    # what the event loop's thread does for both sessions: decide, then answer with each one's context current
    out[tag] = {
        "stream sync": a.loop_may_answer(specs["STREAM_SYNC"], lambda: [sa]),
        "device sync": a.loop_may_answer(specs["DEVICE_SYNC"], lambda: []),
        "meminfo": a.loop_may_answer(specs["MEM_GET_INFO"], lambda: []),
        "other's event query": b.loop_may_answer(specs["EVENT_QUERY"], lambda: [eb]),
        "memset": a.loop_may_answer(specs["MEMSET"], lambda: [p, 0, 4, None]),
    }
    if busy:
        return
    cur = []
    a.mem_info(); cur.append(current() == int(a.ctx))
    b.event_query(eb); cur.append(current() == int(b.ctx))
    a.stream_query(sa); cur.append(current() == int(a.ctx))
    a.stream_sync(sa); cur.append(current() == int(a.ctx))      # nothing to wait for: no wait scope on the loop
    out[tag]["current"] = cur

waits = []
from contextlib import contextmanager
@contextmanager
def scope():
    waits.append(1)
    yield
a.wait_scope = scope
if sys.argv[2] != "0":          # a GPU: a kernel still running makes its stream's and the context's waits the worker's
    k = mod.kernels["spin"]
    a.launch(mod, k, (1, 1, 1), (1, 1, 1), 0, np.int64(p).tobytes() + np.int64(int(sys.argv[2])).tobytes(), sa)
    th = threading.Thread(target=loop, args=("busy", True)); th.start(); th.join()
    a.stream_sync(sa)
th = threading.Thread(target=loop, args=("idle", False)); th.start(); th.join()
out["waits in scope"] = len(waits)
print("RESULT " + json.dumps(out))
"""
SPIN_SRC = r"""
extern "C" __global__ void spin(long long *p, long long n) {
    long long x = 0;
    for (long long i = 0; i < n; i++) x = x * 3 + i;
    p[0] = x;
}
"""


def test_queries_answered_on_the_loop_thread(daemon_factory, tmp_path):
    """The event loop answers a real GPU's queries that need no device work (CudaContext.loop_may_answer) with the
    asking session's context made current on its thread, whichever session it answered before; device work and a
    wait for a running kernel stay on the worker. On the chain the daemon keeps every op on the worker (pyvgpu's own
    driver answers a query only once the emulated GPU's kernels ran), so the decisions are checked with nothing
    running; on a GPU with a kernel running too."""
    if NVCC is None:
        pytest.skip("nvcc not installed")
    image = real_driver_fatbin(tmp_path, SPIN_SRC)
    env = backend_process_env(daemon_factory)
    spin = "0" if REAL == "chain" else str(1 << 28)         # ~0.5 s of one GPU thread
    proc = subprocess.run([sys.executable, "-c", LOOP_ANSWERS, str(image), spin], capture_output=True, text=True,
                          timeout=180, env=env)
    found = re.search(r"^RESULT (.*)$", proc.stdout, re.M)
    assert found, proc.stdout + proc.stderr
    got = json.loads(found.group(1))
    assert got["answers_on_loop"] == [REAL == "cuda"] * 2              # the chain's driver forwards its calls
    idle = {"stream sync": True, "device sync": True, "meminfo": True, "other's event query": True, "memset": False,
            "current": [True] * 4}
    assert got["idle"] == idle, got
    assert got["waits in scope"] == (1 if REAL == "cuda" else 0), got     # the worker's wait for the kernel only
    if REAL == "cuda":
        busy = {k: v for k, v in idle.items() if k != "current"}
        assert got["busy"] == {**busy, "stream sync": False, "device sync": False}, got


def test_a_driver_whose_own_ranges_sit_in_the_window(daemon_factory, cuda_build, run):
    """A driver whose own allocations sit where the backend asks for window addresses refuses those hints: the
    backend skips past them (growing steps) and still places the program's allocations in the window, without the
    warning it gives when it must take the driver's placement. (On the chain: its driver's own window left where the
    program's is.)"""
    first = window_candidates(VA_WINDOW_BYTES)[0]      # where the program's first window is tried first
    d = daemon_factory(backend="chain", env={"PYVGPU_VA_BASE": str(first)})
    proc = run(cuda_build("api_memory.cu"), [d], "1048576", timeout=300)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    log = d.log_text()
    assert "not in the window" not in log and "refused window addresses" not in log, log


def test_the_daemon_learns_which_window_place_its_driver_honours(daemon_factory):
    """A driver that ignores hints where the first place of every window lies (as NVIDIA's driver 580 ignored
    1 TiB: PYVGPU_FAKE_VA_HINTS on the chain): the backend refuses that place once and for all, learns that the
    next one is honoured (said once), and every session's allocations lie there, on both devices' windows, never
    where the driver alone would put them."""
    lo, hi = window_candidates(VA_WINDOW_BYTES)[0], window_candidates(3 * VA_WINDOW_BYTES)[0]
    d = daemon_factory("--emu-devices", "2", backend="chain",
                       env={"PYVGPU_FAKE_VA_HINTS": f"ignore:{lo:#x}-{hi:#x}"})
    for _ in range(2):                                  # a second session finds what the first learnt
        with Client.connect("127.0.0.1", d.port) as c:
            for dev in (0, 1):
                for size in (300, 3 << 20):
                    err, p, _ = c.call("MALLOC", dev, size)
                    assert err == 0
                    assert window_candidate(p, size, (dev + 1) * VA_WINDOW_BYTES) == 1, hex(p)
    log = d.log_text()
    assert log.count("refused window addresses 16 TiB") == 1, log
    assert log.count("honours window addresses 48 TiB") == 1, log
    assert "not in the window" not in log


def test_a_driver_that_places_small_ranges_where_it_likes(daemon_factory):
    """A driver that honours the hints of large ranges only (GPU run 4, H100, driver 580: 64 MiB ranges at every
    hint from 2 TiB up in a fresh process, the daemon's 2 MiB ones at none: PYVGPU_FAKE_VA_HINTS=below:64 MiB on the
    chain): the backend reserves slabs of 64 MiB or more at window addresses and maps allocations inside them, so
    every allocation of every size lies at the window's first place, without a refusal or a warning. A program's
    hinted range the driver does not give at its own size is reserved larger at the hint (the program gets the
    hint), and freed whole: the hint is free again."""
    d = daemon_factory(backend="chain", env={"PYVGPU_FAKE_VA_HINTS": f"below:{64 << 20:#x}"})
    window = VA_WINDOW_BYTES
    hint = window_candidates(5 * VA_WINDOW_BYTES)[0] + (6 << 20)      # outside every window this client uses
    with Client.connect("127.0.0.1", d.port) as a, Client.connect("127.0.0.1", d.port) as b:
        ranges = []
        for size in (1, 300, 1 << 20, (3 << 20) + 5, 64 << 20, (65 << 20) + 1):
            for c in (a, b):
                err, p, _ = c.call("MALLOC", 0, size)
                assert err == 0
                assert window_candidate(p, size, window) == 0, hex(p)
                ranges.append((p, size))
        starts = sorted(ranges)
        assert all(x + n <= y for (x, n), (y, _) in zip(starts, starts[1:]))          # no two overlap
        gran = a.devices[0]["vmm_granularity"]
        for _ in range(2):                               # the second time: the first range was freed whole
            err, va, _ = a.call("VMM_RESERVE", 0, gran, 0, hint)
            assert (err, va) == (0, hint), hex(va or 0)
            assert a.call("VMM_FREE", 0, va, gran)[0] == 0
        err, va, _ = a.call("VMM_RESERVE", 0, gran, 0, 0)
        assert err == 0 and window_candidate(va, gran, window) == 0, hex(va or 0)
        data = np.random.default_rng(2).bytes(3 << 20)
        assert a.call("MEMCPY_HTOD", 0, ranges[6][0], 0, payload=data)[0] == 0    # a 3 MiB one, mapped in a slab
        assert a.call("MEMCPY_DTOH", 0, ranges[6][0], len(data), 0)[2] == data
        for p, _ in ranges[::2]:
            assert a.call("FREE", 0, p)[0] == 0
    log = d.log_text()
    assert "refused window addresses" not in log and "not in the window" not in log, log


@pytest.mark.parametrize("knob", ["below:-1", "hole: 64", "ignore:0x1-0x100000000000000000000"])
def test_a_malformed_fake_hints_knob_is_ignored_and_said(daemon_factory, knob):
    """PYVGPU_FAKE_VA_HINTS with a byte count or bound C's strtoull alone would misread (a sign: "-1" as 2^64 - 1,
    so every hint ignored; blanks; an overflow clamped) is refused whole, with the line that lists its clauses: the
    chain's driver then honours every hint, and the allocations lie at the window's first place."""
    d = daemon_factory(backend="chain", env={"PYVGPU_FAKE_VA_HINTS": knob})
    with Client.connect("127.0.0.1", d.port) as c:
        for size in (300, 3 << 20):
            err, p, _ = c.call("MALLOC", 0, size)
            assert err == 0
            assert window_candidate(p, size, VA_WINDOW_BYTES) == 0, hex(p)
    log = d.log_text()
    assert f"PYVGPU_FAKE_VA_HINTS={knob} ignored (clauses" in log, log
    assert "not in the window" not in log and "refused window addresses" not in log, log


def test_a_driver_with_a_hole_among_its_own_ranges(daemon_factory):
    """A driver that puts a range that fits a hole among its own ranges there, whatever its hint (GPU run 5, H200,
    driver 580: during a JAX session every 64 MiB slab of 18 hints over three window places went to one address
    0x7f..., and the daemon gave the windows up for good; PYVGPU_FAKE_VA_HINTS=hole:64 MiB on the chain): the backend
    holds the misplaced range and asks again larger at the next 1 GiB boundary, so every allocation of three sessions
    (two at once, one after they left) lies at the window's first place, with one line for the retry, without a
    refusal or a warning."""
    d = daemon_factory(backend="chain", env={"PYVGPU_FAKE_VA_HINTS": f"hole:{64 << 20:#x}"})
    window = VA_WINDOW_BYTES
    sizes = (100, 1 << 20, (3 << 20) + 5, 4096, 32 << 20)
    ranges = []
    with Client.connect("127.0.0.1", d.port) as a, Client.connect("127.0.0.1", d.port) as b:
        for size in sizes:
            for c in (a, b):
                err, p, _ = c.call("MALLOC", 0, size)
                assert err == 0
                ranges.append((p, size))
        starts = sorted(ranges)
        assert all(x + n <= y for (x, n), (y, _) in zip(starts, starts[1:]))          # no two overlap
        data = np.random.default_rng(3).bytes(3 << 20)
        assert a.call("MEMCPY_HTOD", 0, ranges[4][0], 0, payload=data)[0] == 0      # a 3 MiB one, in a slab
        assert a.call("MEMCPY_DTOH", 0, ranges[4][0], len(data), 0)[2] == data
    hint = window_candidates(5 * VA_WINDOW_BYTES)[0] + (6 << 20)      # outside every window this client uses
    with Client.connect("127.0.0.1", d.port) as c3:
        for size in sizes:
            err, p, _ = c3.call("MALLOC", 0, size)
            assert err == 0
            ranges.append((p, size))
        gran = c3.devices[0]["vmm_granularity"]
        for _ in range(2):                               # a program's hint: the hole holds the first try (then freed)
            err, va, _ = c3.call("VMM_RESERVE", 0, gran, 0, hint)
            assert (err, va) == (0, hint), hex(va or 0)
            assert c3.call("VMM_FREE", 0, va, gran)[0] == 0
    assert [window_candidate(p, size, window) for p, size in ranges] == [0] * len(ranges), ranges
    log = d.log_text()
    assert "refused window addresses" not in log and "not in the window" not in log, log
    assert re.search(r"window range of 256 MiB at 0x[0-9a-f]+ on try 2 \(the driver had placed 64 MiB", log), log
