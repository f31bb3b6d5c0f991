"""libvcudart called directly through cffi, in fresh processes (the host map is read once per process): calls
answered locally, a clean error when no daemon is configured or reachable, unsupported entry points."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CDEF = """
typedef int cudaError_t;
const char *cudaGetErrorName(cudaError_t);
const char *cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaGetDevice(int *);
cudaError_t cudaSetDevice(int);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaRuntimeGetVersion(int *);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaCtxResetPersistingL2Cache(void);
cudaError_t cudaStreamSynchronize(void *);
"""

SCRIPT = r"""
import json, sys, time, cffi
ffi = cffi.FFI(); ffi.cdef(sys.argv[2]); lib = ffi.dlopen(sys.argv[1])
out = {}
out["name1"] = ffi.string(lib.cudaGetErrorName(1)).decode()
out["name801"] = ffi.string(lib.cudaGetErrorName(801)).decode()
out["str2"] = ffi.string(lib.cudaGetErrorString(2)).decode()
out["unknown"] = ffi.string(lib.cudaGetErrorName(123456)).decode()
v = ffi.new("int *"); out["ver_err"] = lib.cudaRuntimeGetVersion(v); out["ver"] = v[0]
p = ffi.new("void **")
out["host_err"] = lib.cudaMallocHost(p, 1000); out["host_align"] = int(ffi.cast("uintptr_t", p[0])) % 256
out["freehost"] = lib.cudaFreeHost(p[0]); out["freehost_again"] = lib.cudaFreeHost(p[0])
lib.cudaGetLastError()
out["graph"] = lib.cudaCtxResetPersistingL2Cache(); out["graph_last"] = lib.cudaPeekAtLastError()
lib.cudaGetLastError()
t = time.monotonic(); n = ffi.new("int *", 7)
out["count_err"] = lib.cudaGetDeviceCount(n); out["count"] = n[0]; out["count_s"] = time.monotonic() - t
out["malloc"] = lib.cudaMalloc(p, 16)
out["set"] = lib.cudaSetDevice(0)
out["last"] = lib.cudaGetLastError(); out["last_after"] = lib.cudaGetLastError()
print(json.dumps(out))
"""


def call(vcudart, tmp_path, **env):
    full = {**{k: v for k, v in os.environ.items() if k not in ("PYVGPU_HOSTS", "LD_PRELOAD")},
            "XDG_CONFIG_HOME": str(tmp_path), **env}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(vcudart), CDEF], capture_output=True, text=True,
                          env=full, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_local_answers_without_daemon(vcudart, tmp_path):
    out, err = call(vcudart, tmp_path)
    assert out["name1"] == "cudaErrorInvalidValue"
    assert out["name801"] == "cudaErrorNotSupported"
    assert "memory" in out["str2"]
    assert out["unknown"] == "unrecognized error code"
    assert (out["ver_err"], out["ver"]) == (0, 13000)
    assert (out["host_err"], out["host_align"], out["freehost"]) == (0, 0, 0)
    assert out["freehost_again"] == 1                     # cudaErrorInvalidValue: not a live host allocation
    assert out["graph"] == out["graph_last"] == 801       # unsupported: cudaErrorNotSupported, recorded
    assert "pyvgpu: cudaCtxResetPersistingL2Cache is not supported" in err


def test_no_hosts_configured(vcudart, tmp_path):
    out, err = call(vcudart, tmp_path)                    # empty XDG config dir, no PYVGPU_HOSTS
    assert (out["count_err"], out["count"]) == (100, 0)   # cudaErrorNoDevice
    assert out["malloc"] == 100 and out["set"] == 100
    assert (out["last"], out["last_after"]) == (100, 0)
    assert "no hosts configured" in err


def test_unreachable_host_fails_fast(vcudart, tmp_path):
    from harness import free_port

    port = free_port()
    out, err = call(vcudart, tmp_path, PYVGPU_HOSTS=f"127.0.0.1:{port}")
    assert (out["count_err"], out["count"]) == (46, 0)    # cudaErrorDevicesUnavailable
    assert out["count_s"] < 10
    assert out["malloc"] == 46
    assert f"cannot connect to daemon 127.0.0.1:{port}" in err


def test_hosts_file(vcudart, tmp_path, daemon):
    (tmp_path / "pyvgpu").mkdir()
    (tmp_path / "pyvgpu" / "hosts").write_text(f"# comment\n\n  {daemon.address}  # the local daemon\n")
    out, err = call(vcudart, tmp_path)
    assert (out["count_err"], out["count"]) == (0, 1), err
    assert out["malloc"] == 0 and out["set"] == 0


def test_host_entries_duplicates_and_malformed(vcudart, tmp_path, daemon):
    hosts = f" {daemon.address} ,{daemon.address},2001:db8::1:7700,[::1:{daemon.port},127.0.0.1:99999"
    out, err = call(vcudart, tmp_path, PYVGPU_HOSTS=hosts)
    assert (out["count_err"], out["count"]) == (0, 1), err     # one session, not two
    assert f"ignoring duplicate host 127.0.0.1:{daemon.port} in PYVGPU_HOSTS" in err
    assert "ignoring malformed PYVGPU_HOSTS entry '2001:db8::1:7700'" in err   # bare IPv6 is ambiguous
    assert "ignoring malformed PYVGPU_HOSTS entry '[::1:" in err
    assert "ignoring malformed PYVGPU_HOSTS entry '127.0.0.1:99999'" in err
