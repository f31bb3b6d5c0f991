"""The cuda backend's fast ops called into the driver from compiled code (backends/cuda_calls.py, libpvdrvcall.so)
against the same ops through cuda-python (PYVGPU_CUDA_CALLS=python), on a real driver: a GPU's when there is one,
else pyvgpu's libcuda.so.1 over an emulated daemon (the chain).

The backend's context is driven directly, in a process whose cuda-python loaded that driver, once per way of calling:
every fast op (launch, cooperative launch, the memsets of 1, 2 and 4-byte elements and 2D, event record, stream wait,
host-to-device, device-to-host and device-to-device copies, and runs of them in one call: DeviceContext.run_fast)
leaves the device memory a host model computes, byte for byte, and the driver's refusals become the same CudaError
(code and message) both ways; a run stops at its refused op, the ops before it done and none after it.
Whole programs run through chains with the compiled calls on (the default) in the e2e and driver suites; one program
runs here with them off as well.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from harness import ROOT, chain_env, real_driver_fatbin
from pyvgpu.protocol import ENV_CUDA_CALLS
from pyvgpu_daemon.backends.cuda import probe

GPU_COUNT, _ = probe()
NVCC = shutil.which("nvcc")
KERNEL_SRC = r"""
extern "C" __global__ void axpb(int *p, int n, char pad, long long b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 3 * p[i] + (int)b;
}
"""

DRIVE = r"""
import hashlib, json, sys, threading
import numpy as np
from pyvgpu_daemon.backends.base import FastOp
from pyvgpu_daemon.backends.cuda import CudaBackend
from pyvgpu_daemon.errors import CudaError

import logging

class Lines(logging.Handler):                            # the backend's start lines: why it calls the way it does
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())

said = Lines()
logging.getLogger("pyvgpu.daemon").addHandler(said)
logging.getLogger("pyvgpu.daemon").setLevel(logging.INFO)
backend = CudaBackend()
ctx = backend.open_context(0, 1 << 40, 1)
model = np.zeros(1 << 20, np.uint8)                     # what the device's buffer must hold
p = ctx.malloc(model.nbytes)
rng = np.random.default_rng(7)
out = {"compiled": ctx.calls is not None, "errors": {}, "log": [l for l in said.lines if "fast ops" in l]}

ctx.memset(p, 0, model.nbytes, None)
ctx.memset(p + 5, 0x1AB, 1000, None)                    # the value's low byte, as cudaMemset
model[5:1005] = 0xAB
ctx.memset2d(p + 2048, 64, 0x11, 33, 5, None)
for r in range(5):
    model[2048 + 64 * r: 2048 + 64 * r + 33] = 0x11
s = ctx.stream_create(0, 0)
for elem, value, at in ((1, 0x7F, 4096), (2, 0xBEEF, 8192), (4, 0xDEADBEEF, 12288)):
    ctx.memset_elems(p + at, 256, value, elem, 20, 3, s)
    for r in range(3):
        model[at + 256 * r: at + 256 * r + 20 * elem] = np.frombuffer(value.to_bytes(elem, "little") * 20, np.uint8)
data = rng.bytes(3001)
ctx.memcpy_htod(p + 16384, data, s)
model[16384:16384 + 3001] = np.frombuffer(data, np.uint8)
ev = ctx.event_create(0)
ctx.event_record(ev, s)
ctx.stream_wait_event(None, ev, 0)
ctx.memcpy_dtod(p + 32768, p + 16384, 3001, None)
model[32768:32768 + 3001] = model[16384:16384 + 3001]
big = rng.bytes(300 << 10)
ctx.memcpy_htod(p + (512 << 10), memoryview(big), None)
model[512 << 10:(512 << 10) + len(big)] = np.frombuffer(big, np.uint8)

mod = ctx.module_load(open(sys.argv[1], "rb").read())
k = mod.kernels["axpb"]
n = 1000
at = 65536
vals = np.arange(n, dtype=np.int32) - 500
ctx.memcpy_htod(p + at, vals.tobytes(), None)
params = np.int64(p + at).tobytes() + np.int32(n).tobytes() + b"\0" * 4 + np.int64(7).tobytes() + b"pad!"
ctx.launch(mod, k, (4, 1, 1), (256, 1, 1), 0, params, s)
ctx.launch_cooperative(mod, k, (2, 1, 1), (512, 1, 1), 0, params, s)
model[at:at + 4 * n] = np.frombuffer(((vals * 3 + 7) * 3 + 7).astype(np.int32).tobytes(), np.uint8)
ctx.event_record(ev, s)
ctx.event_sync(ev)

# a run of fast ops in one call (DeviceContext.run_fast), then a run whose second op the driver refuses
R = 131072
blob = rng.bytes(777)
at2 = R + 8192
vals2 = np.arange(256, dtype=np.int32) * 5 - 600
ctx.memcpy_htod(p + at2, vals2.tobytes(), None)
params2 = np.int64(p + at2).tobytes() + np.int32(256).tobytes() + b"\0" * 4 + np.int64(-3).tobytes()
ops = [FastOp("memset", (p + R, 0x5A, 100, s)), FastOp("memcpy_htod", (p + R + 200, blob, None)),
       FastOp("memcpy_dtod", (p + R + 1000, p + R + 200, 777, s)), FastOp("event_record", (ev, s)),
       FastOp("stream_wait_event", (None, ev, 0)), FastOp("launch", (mod, k, (1, 1, 1), (256, 1, 1), 0, params2, None)),
       FastOp("memset2d", (p + R + 4096, 64, 0x33, 10, 2, None)),     # not one the library runs: in order all the same
       FastOp("memset", (p + R + 2000, 0x77, 10, None))]
done, exc = ctx.run_fast(ops)
out["run"] = [done, len(ops), exc is None]
model[R:R + 100] = 0x5A
model[R + 200:R + 977] = np.frombuffer(blob, np.uint8)
model[R + 1000:R + 1777] = np.frombuffer(blob, np.uint8)
model[at2:at2 + 1024] = np.frombuffer((vals2 * 3 - 3).astype(np.int32).tobytes(), np.uint8)
model[R + 4096:R + 4106] = 0x33
model[R + 4160:R + 4170] = 0x33
model[R + 2000:R + 2010] = 0x77

# the fast ops from threads where no context, or another context of the process, is current: each compiled call runs
# with the session's context and puts the thread's back (the cuda-python way relies on the worker: the same ops run
# here, on it); the chain's driver refuses a launch without a context (CUDA_ERROR_INVALID_CONTEXT), as NVIDIA's does
T = 196608
thread_out = {}
ev2 = ctx.event_create(2)                               # cudaEventDisableTiming: no clock anchor of cuda-python's
vals3 = np.arange(256, dtype=np.int32) - 77
params3 = np.int64(p + T + 4096).tobytes() + np.int32(256).tobytes() + b"\0" * 4 + np.int64(5).tobytes()


def thread_ops(name):                                  # the ops that are compiled calls alone, and a run
    ctx.memcpy_htod(p + T + 4096, vals3.tobytes(), None)
    ctx.memcpy_htod(p + T + 512, b"thread!!" * 8, s)
    ctx.launch(mod, k, (1, 1, 1), (256, 1, 1), 0, params3, None)
    done, exc = ctx.run_fast([FastOp("memset", (p + T, 0x42, 64, s)),
                              FastOp("memset", (p + T + 2048, 0x24, 32, s)),
                              FastOp("event_record", (ev2, s)), FastOp("stream_wait_event", (None, ev2, 0)),
                              FastOp("memcpy_dtod", (p + T + 1024, p + T + 512, 64, s)),
                              FastOp("memcpy_htod", (p + T + 2100, b"run", None))])
    thread_out[name + " run"] = [done, exc is None]


def on_thread(name):
    try:
        other = backend.open_context(0, 1 << 40, 2) if name == "other" else None     # current on this thread
        thread_ops(name)
        thread_out[name + " left"] = int(ctx.drv.cuCtxGetCurrent()[1]) == (int(other.ctx) if other else 0)
        if other is not None:
            other.close()
    except Exception as exc:                            # the result says what failed
        thread_out[name + " error"] = repr(exc)


for name in ("bare", "other"):
    if out["compiled"]:
        worker = threading.Thread(target=on_thread, args=(name,))
        worker.start()
        worker.join()
    else:
        thread_ops(name)
        thread_out[name + " left"] = True
out["thread"] = thread_out
ctx.synchronize()
model[T:T + 64] = 0x42
model[T + 512:T + 576] = np.frombuffer(b"thread!!" * 8, np.uint8)
model[T + 1024:T + 1088] = np.frombuffer(b"thread!!" * 8, np.uint8)
model[T + 2048:T + 2080] = 0x24
model[T + 2100:T + 2103] = np.frombuffer(b"run", np.uint8)
model[T + 4096:T + 5120] = np.frombuffer((vals3 * 3 + 5).astype(np.int32).tobytes(), np.uint8)

small = ctx.memcpy_dtoh(p, 1 << 16, None)
reply = ctx.memcpy_dtoh_reply(p, model.nbytes, None)       # through pinned staging (a Lent view)
whole = bytes(getattr(reply, "view", reply))
getattr(reply, "release", lambda: None)()
out["small_ok"] = small == model[:1 << 16].tobytes()
out["whole_ok"] = whole == model.tobytes()
out["first_diff"] = next((i for i in range(model.nbytes) if whole[i] != model[i]), None) if not out["whole_ok"] else None

# the driver's refusals last (a real GPU might take one as a fault of the context)
bad = [FastOp("memset", (p + R + 3000, 1, 8, None)), FastOp("memset", (16, 2, 8, None)),
       FastOp("memset", (p + R + 3100, 3, 8, None))]
done, exc = ctx.run_fast(bad)
out["run_refused"] = [done, exc.code, exc.message] if exc is not None else [done]
ctx.synchronize()
out["run_refused_bytes"] = [ctx.memcpy_dtoh(p + R + 3000, 8, None) == b"\1" * 8,        # ran
                            ctx.memcpy_dtoh(p + R + 3100, 8, None) == b"\0" * 8]        # did not

def refused(name, fn):
    try:
        fn()
    except CudaError as exc:
        out["errors"][name] = [exc.code, exc.message]
    else:
        out["errors"][name] = None

refused("memset outside memory", lambda: ctx.memset(16, 1, 64, None))
refused("copy to outside memory", lambda: ctx.memcpy_htod(16, b"x" * 64, None))
refused("launch of too many threads", lambda: ctx.launch(mod, k, (1, 1, 1), (4096, 1, 1), 0, params, None))
ctx.close()
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    if NVCC is None:
        pytest.skip("nvcc not installed")
    return str(real_driver_fatbin(tmp_path_factory.mktemp("calls"), KERNEL_SRC))


def drive(daemon_factory, image: str, calls: str) -> dict:
    # The checkout first, then whatever the caller's path holds (a GPU host's check puts the bundle's cffi there).
    path = [str(ROOT), str(ROOT / "daemon")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), ENV_CUDA_CALLS: calls}
    if not GPU_COUNT:
        env.update(chain_env(daemon_factory()))
    proc = subprocess.run([sys.executable, "-c", DRIVE, image], capture_output=True, text=True, timeout=180, env=env)
    found = re.search(r"^RESULT (.*)$", proc.stdout, re.M)
    assert found, proc.stdout + proc.stderr
    return json.loads(found.group(1))


def test_fast_ops_compiled_and_through_cuda_python_alike(daemon_factory, image):
    compiled = drive(daemon_factory, image, "")
    python = drive(daemon_factory, image, "python")
    assert compiled["compiled"] and not python["compiled"], (compiled["log"], python["log"])
    assert compiled["thread"] == {"bare run": [6, True], "bare left": True, "other run": [6, True],
                                  "other left": True}, compiled["thread"]
    for got in (compiled, python):
        assert got["small_ok"] and got["whole_ok"], got
        assert got["run"] == [8, 8, True]
        assert got["run_refused"] == [1, 1, "cuMemsetD8Async: CUDA_ERROR_INVALID_VALUE"], got
        assert got["run_refused_bytes"] == [True, True], got
    assert all(compiled["errors"].values()), compiled["errors"]       # each refusal happened ...
    assert compiled["errors"] == python["errors"]                      # ... as the same CudaError


FAKE = r"""
import json
from fake_driver import FakeDriver
from pyvgpu_daemon.backends.cuda import CudaBackend
backend = CudaBackend(driver=FakeDriver())
ctx = backend.open_context(0, 1 << 40, 1)
p = ctx.malloc(64)
ctx.memcpy_htod(p, b"fake" * 16, None)
ctx.memset(p + 8, 0x2A, 4, None)
print("RESULT " + json.dumps({"compiled": ctx.calls is not None, "entry points": backend.api.lookup is not None,
                              "bytes": ctx.memcpy_dtoh(p, 64, None).hex()}))
"""


def test_a_driver_object_given_is_the_only_driver_called(daemon_factory):
    """A backend over a driver object it is given (the fake of test_daemon_cuda_blas.py's harness) takes no entry
    points from the process's libcuda.so.1: GPU run 3 found them taken from the H100's driver, whose compiled calls
    then got the fake's addresses without a context (every MEMCPY_HTOD: CUDA_ERROR_INVALID_CONTEXT). Here the process's
    libcuda.so.1 is the chain's (a GPU's on a GPU host); the fake's memory must hold what the ops wrote."""
    env = {**os.environ, ENV_CUDA_CALLS: ""}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "daemon"), str(ROOT / "tests" / "daemon"),
                                         *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    if not GPU_COUNT:
        env.update(chain_env(daemon_factory()))
    proc = subprocess.run([sys.executable, "-c", FAKE], capture_output=True, text=True, timeout=120, env=env)
    found = re.search(r"^RESULT (.*)$", proc.stdout, re.M)
    assert found, proc.stdout + proc.stderr
    got = json.loads(found.group(1))
    want = bytearray(b"fake" * 16)
    want[8:12] = b"\x2a" * 4
    assert got == {"compiled": False, "entry points": False, "bytes": want.hex()}, got


def test_a_program_with_compiled_calls_off(daemon_factory, cuda_build, run):
    """A whole program through a chain whose cuda daemon calls through cuda-python (the suites run it with the
    compiled calls on), and the daemon's start line says which way it calls."""
    if GPU_COUNT:
        pytest.skip("the chain is the test here (a GPU host runs the suites on its own driver)")
    off = daemon_factory(backend="chain", env={ENV_CUDA_CALLS: "python"})
    on = daemon_factory(backend="chain")
    for d in (off, on):
        proc = run(cuda_build("api_kernels.cu"), [d], timeout=300)
        assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr
    assert f"fast ops through cuda-python ({ENV_CUDA_CALLS}=python)" in off.log_text()
    assert "fast ops through compiled calls" in on.log_text()
