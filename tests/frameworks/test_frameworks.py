"""The frameworks on emulated GPUs, run as a user runs them (`pyvgpu run --census`): CuPy, numba-cuda and PyTorch
against NumPy / the CPU (the scripts beside this file), and the call census of each run: no entry point answered
"not supported", no table or link input missing. The frameworks come from the test tier's set-up
(scripts/setup-frameworks.sh); a Python without them fails here, it does not skip."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pyvgpu
from pyvgpu import frameworks

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def census_of(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "census":
            out.setdefault(parts[1], []).append(" ".join(parts[2:]))
    return out


def run_script(tmp_path: Path, daemons, script: str, *args: str, env: dict | None = None, timeout: float = 900):
    census = tmp_path / f"census-{script}.txt"
    e = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
         "CUPY_CACHE_DIR": str(tmp_path / "cupy-cache"), **(env or {})}
    cmd = [sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", ",".join(d.address for d in daemons),
           "--census", str(census), "--", sys.executable, str(HERE / script), *args]
    proc = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    lines = proc.stdout.splitlines()
    results = {ln.split(":")[0].split(" ", 1)[1]: ln.split(" ", 1)[0] for ln in lines
               if ln.startswith(("ok ", "WRONG ", "refused "))}
    return proc, results, census_of(census)


def assert_clean_census(census: dict[str, list[str]], proc) -> None:
    assert census.get("summary"), f"no census written:\n{proc.stderr[-3000:]}"
    assert not census.get("unsupported"), census["unsupported"]
    assert not census.get("missing"), census["missing"]
    assert census.get("reached"), "the census saw no entry point reached"


def test_cupy_emulated(tmp_path, daemon_factory):
    """CuPy's own kernels (NVRTC, PTX because `pyvgpu run` sets CUPY_COMPILE_WITH_PTX against emulated GPUs) on two
    daemons, CUB off. Sort runs CuPy's prebuilt Thrust kernels (PTX for compute_120 only)."""
    d0, d1 = daemon_factory(), daemon_factory()
    proc, res, census = run_script(tmp_path, [d0, d1], "fw_cupy.py", "--two-gpus", "--allow-refusal",
                                   env={"CUPY_ACCELERATORS": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    for name in ("copy h2d/d2h", "elementwise", "elementwise int", "sum", "max/min", "mean axis", "argmax",
                 "cumsum", "fancy indexing", "boolean mask", "raw kernel", "streams and events", "matmul",
                 "two GPUs"):
        assert res.get(name) == "ok", (name, proc.stdout)
    assert res.get("sort") == "ok", proc.stdout
    assert_clean_census(census, proc)
    libs = {ln.split()[0]: ln.split()[-1] for ln in census["library"]}
    assert libs.get("libcudart.so.13") == libs.get("libcuda.so.1") == "pyvgpu", census["library"]


def test_cupy_emulated_default_accelerators(tmp_path, daemon):
    """CuPy's defaults (CUB on): sum, max/min, argmax, cumsum and mean run CuPy's prebuilt CUB kernels, sort its
    Thrust kernels (PTX for compute_120 only: 21 and 26 MB, hundreds of kernels, each translated at its first launch,
    emu/ptx/index.py); every check is right (a refusal would be an error at the next synchronization: CuPy discards
    CUB's own error)."""
    proc, res, _ = run_script(tmp_path, [daemon], "fw_cupy.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert res and set(res.values()) == {"ok"}, res
    loaded = [int(n) for n in re.findall(r"module \d+ loaded: (\d+) kernels", daemon.log_text())]
    assert max(loaded) >= 300, loaded             # CUB's module was loaded (383 kernels in cupy-cuda13x 14.2)


@pytest.mark.parametrize("linker", ["nvjitlink", "driver"])
def test_numba_emulated(tmp_path, daemon, linker):
    """numba-cuda as installed (nvJitLink beside it: LTO-IR linked by NVIDIA's nvJitLink into PTX through pyvgpu's
    PTX-only libnvJitLink, which `pyvgpu run` preloads against emulated GPUs), and numba's path without nvJitLink
    (its PTX linked through libvcuda's cuLink*)."""
    proc, res, census = run_script(tmp_path, [daemon], "fw_numba.py",
                                   *(["--no-nvjitlink"] if linker == "driver" else []))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert res == {"saxpy": "ok", "shared-memory block sums": "ok", "atomic histogram": "ok"}, proc.stdout
    assert_clean_census(census, proc)
    ours = str(pyvgpu.lib_dir() / pyvgpu.PTX_LINKER_LIB_NAME)
    assert any(ln.startswith("libnvJitLink.so.13 ") and ours in ln for ln in census["library"]), census["library"]


def test_cusolver_emulated(tmp_path, daemon):
    """NVIDIA's cuSOLVER (CuPy's linalg) over libvcuda, its cuBLAS handle libvcublas's: cusolverDnCreate sets the
    handle's environment and atomics modes, then Cholesky and SVD run on the emulated GPU and match NumPy."""
    proc, res, census = run_script(tmp_path, [daemon], "fw_cusolver.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert res == {"cholesky f32": "ok", "cholesky f64": "ok", "singular values": "ok"}, proc.stdout
    assert_clean_census(census, proc)
    libs = {ln.split()[0]: ln.split()[-1] for ln in census["library"]}
    assert libs.get("libcusolver.so.12") == "nvidia" and libs.get("libcublas.so.13") == "pyvgpu", census["library"]


def test_cufft_emulated(tmp_path, daemon):
    """NVIDIA's cuFFT (CuPy's fft) over libvcuda: a plan asks for export table 6e163fbe and its slot 7 (a module's
    functions through a callback, as NVIDIA's driver answered on an H100: docs/driver.md); its kernels ship PTX, so
    C2C (1D, 2D, a prime length), R2C and C2R run on the emulated GPU and match NumPy."""
    proc, res, census = run_script(tmp_path, [daemon], "fw_cufft.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert res == {"fft c2c 1d": "ok", "ifft c2c 1d": "ok", "fft2 c2c 2d": "ok", "rfft r2c 1d": "ok",
                   "irfft c2r 1d": "ok", "fft c2c prime": "ok"}, proc.stdout
    assert_clean_census(census, proc)
    libs = {ln.split()[0]: ln.split()[-1] for ln in census["library"]}
    assert libs.get("libcufft.so.12") == "nvidia", census["library"]


def test_torch_emulated(tmp_path, daemon):
    """PyTorch's host side and its cuBLAS matmuls; a torch kernel is refused with one line naming libtorch_cuda."""
    proc, res, census = run_script(tmp_path, [daemon], "fw_torch.py", "--kernel-refused")
    for name in ("is_available", "device properties", "caching allocator", "pinned copies", "streams and events",
                 "mm", "addmm", "bmm", "torch kernel refused"):
        assert res.get(name) == "ok", (name, proc.stdout, proc.stderr[-3000:])
    assert "libtorch_cuda.so ships its kernels as SASS only" in proc.stderr
    assert "the emulated GPU runs PTX" in proc.stderr
    lt = pyvgpu.lib_dir() / "libvcublasLt.so"
    # nn.Linear goes through cuBLASLt: right once pyvgpu forwards it, an error (never a wrong number) before.
    assert res.get("nn.Linear forward") == ("ok" if lt.exists() else "WRONG"), proc.stdout
    if lt.exists():
        assert proc.returncode == 0, proc.stdout
    assert not census.get("unsupported"), census["unsupported"]
    assert not census.get("missing"), census["missing"]


def blocked_round_trips(tmp_path: Path, daemon, framework: str, steps: int) -> int:
    stats = tmp_path / f"stats-{framework}-{steps}.txt"
    env = {**os.environ, "CUPY_ACCELERATORS": "", "CUPY_CACHE_DIR": str(tmp_path / "cupy-cache")}
    cmd = [sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", daemon.address, "--stats", str(stats), "--",
           sys.executable, str(HERE / "fw_step.py"), framework, str(steps)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = next(ln.split() for ln in stats.read_text().splitlines() if ln.startswith("all "))
    return int(row[3])


@pytest.mark.parametrize("framework", ["cupy", "torch"])
def test_one_blocking_round_trip_per_step(tmp_path, daemon, framework):
    """A step whose result the host reads costs one blocking round trip (the read): launches and cuBLAS calls are
    fire-and-forget, and the stream synchronization the frameworks make after the read is answered locally."""
    # 3 and 13 steps: CuPy's memory pool grows once in its first steps (one blocking MALLOC), not in a steady loop
    few, more = (blocked_round_trips(tmp_path, daemon, framework, n) for n in (3, 13))
    assert more - few == 10, (few, more)


def test_preload_list_is_every_forwarded_library_runtime_first():
    libdir = pyvgpu.lib_dir()
    out = subprocess.run([sys.executable, "-m", "pyvgpu.cli", "lib", "--preload"], capture_output=True, text=True,
                         check=True).stdout.split()
    files = sorted(str(p) for p in libdir.glob("libv*.so*") if p.is_file() and not p.is_symlink())
    assert out[:2] == [str(libdir / pyvgpu.LIB_NAME), str(libdir / pyvgpu.DRIVER_LIB_NAME)]
    # the PTX-only nvJitLink is preloaded against emulated GPUs alone (test_run_preloads_ptx_linker_...)
    linker = str(libdir / pyvgpu.PTX_LINKER_LIB_NAME)
    assert linker in files and linker not in out, (linker, out)
    assert sorted(out) == [f for f in files if f != linker] and len(out) >= 4, out


def test_run_sets_cupy_ptx_switch_against_emulated_gpus_only_when_unset(daemon):
    def verbose(extra_env: dict) -> str:
        env = {**os.environ, **extra_env}
        env.pop("CUPY_COMPILE_WITH_PTX", None) if "CUPY_COMPILE_WITH_PTX" not in extra_env else None
        return subprocess.run([sys.executable, "-m", "pyvgpu.cli", "run", "-v", "--hosts", daemon.address, "--",
                               "true"], env=env, capture_output=True, text=True, check=True).stderr
    assert "CUPY_COMPILE_WITH_PTX=1" in verbose({})
    assert "CUPY_COMPILE_WITH_PTX=0" in verbose({"CUPY_COMPILE_WITH_PTX": "0"})
    # numba-cuda's switch: the PTX-only nvJitLink preloaded, NVIDIA's named for its -lto links
    out = verbose({})
    preload = out.split("LD_PRELOAD=", 1)[1].split(" LD_LIBRARY_PATH=", 1)[0].split()
    assert preload[-1] == str(pyvgpu.lib_dir() / pyvgpu.PTX_LINKER_LIB_NAME), preload
    assert f"{frameworks.ENV_NVIDIA_NVJITLINK}=" in out and "libnvJitLink.so.13" in out, out


def test_ptx_linker_only_against_emulated_gpus(tmp_path):
    linker = tmp_path / pyvgpu.PTX_LINKER_LIB_NAME
    linker.write_bytes(b"")
    assert frameworks.with_ptx_linker("/a.so /b.so", linker, False) == "/a.so /b.so"
    assert frameworks.with_ptx_linker("/a.so /b.so", linker, True) == f"/a.so /b.so {linker}"
    assert frameworks.with_ptx_linker(f"/a.so {linker}", linker, True) == f"/a.so {linker}"
    assert frameworks.with_ptx_linker("/a.so", tmp_path / "absent.so", True) == "/a.so"
