"""libvcudart in a shared pool: the memory request and weight it reads from the environment (`pyvgpu run --memory
/--weight` set them) and sends in its hello, its pid and host name in daemon status, and device selection in the
host map (`host:port/ORDINAL`, a daemon named twice is one connection, `auto` entries skipped). libvcudart is called
directly through cffi, in fresh processes."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, VA_WINDOW_BYTES

E = ERROR_CODES
MiB = 1 << 20


CDEF = """
typedef int cudaError_t;
cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaSetDevice(int);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaMemGetInfo(size_t *, size_t *);
"""
SCRIPT = r"""
import json, sys, cffi
ffi = cffi.FFI(); ffi.cdef(sys.argv[2]); lib = ffi.dlopen(sys.argv[1])
out = {}
n = ffi.new("int *"); out["count_err"] = lib.cudaGetDeviceCount(n); out["count"] = n[0]
out["info"] = []
for i in range(n[0]):
    lib.cudaSetDevice(i)
    f = ffi.new("size_t *"); t = ffi.new("size_t *")
    lib.cudaMemGetInfo(f, t)
    out["info"].append([f[0], t[0]])
lib.cudaSetDevice(0)
p = ffi.new("void **")
out["fit"] = lib.cudaMalloc(p, int(sys.argv[3]))
out["ptr"] = int(ffi.cast("uintptr_t", p[0]))
out["over"] = lib.cudaMalloc(p, int(sys.argv[3]))
print(json.dumps(out))
"""


def run_c(vcudart, tmp_path, hosts: str, alloc: int, **env) -> tuple[dict, str]:
    full = {**{k: v for k, v in os.environ.items() if k not in ("PYVGPU_HOSTS", "LD_PRELOAD")},
            "XDG_CONFIG_HOME": str(tmp_path), "PYVGPU_HOSTS": hosts, **env}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(vcudart), CDEF, str(alloc)], capture_output=True,
                          text=True, env=full, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_libvcudart_sends_memory_and_weight_from_the_environment(vcudart, tmp_path, daemon_factory):
    d = daemon_factory("--emu-memory", "256M", "--session-memory", "128M")
    with Client.connect("127.0.0.1", d.port) as watcher:
        out, err = run_c(vcudart, tmp_path, d.address, 20 * MiB, PYVGPU_MEMORY="32M", PYVGPU_WEIGHT="2.5")
        assert out["info"] == [[32 * MiB, 32 * MiB]]
        assert out["fit"] == 0 and out["over"] == E["cudaErrorMemoryAllocation"]
        out, err = run_c(vcudart, tmp_path, d.address, 100 * MiB, PYVGPU_MEMORY="lots")
        assert "ignoring PYVGPU_MEMORY='lots'" in err
        assert out["info"] == [[128 * MiB, 128 * MiB]] and out["fit"] == 0 and out["over"] == 2
        assert watcher.call("MEM_GET_INFO", 0)[0] == 0
    log = d.log_text()
    assert "weight" not in log or "capped" not in log


def test_libvcudart_reports_pid_host_and_weight(vcudart, tmp_path, daemon_factory):
    """While a program runs, daemon status names its pid and host and shows its weight and memory request."""
    d = daemon_factory("--emu-memory", "256M")
    script = r"""
import cffi, sys, time
ffi = cffi.FFI(); ffi.cdef("int cudaMalloc(void **, size_t);"); lib = ffi.dlopen(sys.argv[1])
p = ffi.new("void **"); print(lib.cudaMalloc(p, 4096), flush=True); time.sleep(30)
"""
    env = {**os.environ, "PYVGPU_HOSTS": d.address, "PYVGPU_MEMORY": "64M", "PYVGPU_WEIGHT": "3",
           "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", script, str(vcudart)], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stdout.readline().strip() == "0"
        with Client.connect("127.0.0.1", d.port) as c:
            s = next(s for s in c.status()["sessions"] if not s["self"])
        assert (s["pid"], s["hostname"], s["weight"], s["memory_request"]) == \
            (proc.pid, socket.gethostname(), 3.0, 64 * MiB)
        assert s["devices"][0]["memory_limit"] == 64 * MiB
    finally:
        proc.kill()
        proc.wait()


def test_libvcudart_device_selection_and_auto_entries(vcudart, tmp_path, daemon_factory):
    """PYVGPU_HOSTS=b/1,a,b/0,auto: GPU0 = b's device 1, then a's devices, then b's device 0; b is connected once,
    its pointer windows after a's; `auto` is skipped with a note (placement is `pyvgpu run`'s)."""
    a = daemon_factory("--emu-devices", "2", "--emu-memory", "256M", "--session-memory", "0=10M",
                       "--session-memory", "1=11M")
    b = daemon_factory("--emu-devices", "2", "--emu-memory", "256M", "--session-memory", "0=20M",
                       "--session-memory", "1=21M")
    hosts = f"{b.address}/1,{a.address},{b.address}/0,auto"
    out, err = run_c(vcudart, tmp_path, hosts, 1 * MiB)
    assert out["count"] == 4
    assert [t for _, t in out["info"]] == [21 * MiB, 10 * MiB, 11 * MiB, 20 * MiB]
    assert "resolved by `pyvgpu run`" in err
    assert b.log_text().count("connected from") == 1
    assert f"va_base={hex(1 * VA_WINDOW_BYTES)}" in b.log_text()     # b first: windows 1-2
    assert f"va_base={hex(3 * VA_WINDOW_BYTES)}" in a.log_text()     # a after b's two devices
    # GPU0 is b's device 1: its pointers are in b's second window
    assert out["ptr"] >> 40 == 2
    out, err = run_c(vcudart, tmp_path, f"{a.address}/7", 1)
    assert out["count_err"] == 100 and "has no device 7" in err
