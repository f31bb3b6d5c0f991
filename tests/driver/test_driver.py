"""libvcuda.so.1, the driver drop-in (docs/driver.md), on emulated GPUs: programs built by plain nvcc (NVIDIA's
static runtime inside them) pass the same checks as their -cudart shared builds through libvcudart; NVIDIA's own
libcudart.so.13 runs on it; driver-API programs load modules from PTX files and fatbins, launch with kernelParams and
with extra, and drive contexts from several threads over two hosts; cuGetProcAddress answers what NVIDIA's runtime
asks for; the exports are CUDA 13.0's."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import NVCC, ROOT, Daemon, on_backends

DRIVER_DIR = ROOT / "csrc" / "driver"
REQUESTS = ROOT / "tools" / "driver_probe" / "requested-13.0.txt"


def toolkit_dir() -> Path:
    """The CUDA toolkit nvcc belongs to (nvcc may be a wrapper script): its TOP, as nvcc reports it."""
    out = subprocess.run([NVCC, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull], capture_output=True,
                         text=True).stderr
    top = re.search(r"^#\$ TOP=(\S+)", out, re.M)
    return Path(top.group(1)).resolve() if top else Path(NVCC).resolve().parent.parent


CUDA_HOME = toolkit_dir()


def run_driver(program: Path, daemons: list[Daemon], *args: str, lib_dir: Path, first: tuple[str, ...] = (),
               timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a program whose libcuda.so.1 is libvcuda (LD_LIBRARY_PATH; directories in `first` come before it)."""
    full = {**os.environ, "LD_LIBRARY_PATH": ":".join([*first, str(lib_dir)]),
            "PYVGPU_HOSTS": ",".join(d.address for d in daemons), **(env or {})}
    full.pop("LD_PRELOAD", None)
    proc = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=timeout, env=full)
    if proc.returncode != 0:
        logs = "\n".join(d.log_text()[-3000:] for d in daemons)
        raise AssertionError(f"{program.name} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}\ndaemon logs:\n{logs}")
    return proc


def verdict(out: str) -> str:
    """The program's closing "OK <checks>" or "PASS <name>" line."""
    lines = [ln for ln in out.splitlines() if ln.startswith(("OK", "PASS"))]
    assert lines, out
    return lines[-1]


# (program, arguments, daemons): the project's test programs, as their -cudart shared tests run them; a daemon is
# the arguments it starts with (TWO_GPUS: two emulated GPUs of one daemon)
ONE, TWO_GPUS = ((),), (("--emu-devices", "2"),)
PROGRAMS = [
    ("api_memory.cu", ("4194304",), ONE),
    ("api_kernels.cu", (), ONE),
    ("api_device.cu", (), ((), ())),
    ("api_funcattr.cu", (), ONE),
    ("api_threads.cu", (), ONE),
    ("emu_basic.cu", (), ONE),
    ("emu_shared.cu", (), ONE),
    ("emu_assert.cu", (), ONE),
    # the runtime features: NVIDIA's runtime reaches them through libvcuda's graphs, capture, pools, managed and
    # mapped memory, arrays, textures, surfaces and peer access
    ("api_graph.cu", (), ONE),
    ("api_pool.cu", (), TWO_GPUS),
    ("api_managed.cu", (), ONE),
    ("api_managed.cu", ("multi",), TWO_GPUS),
    ("api_managed.cu", ("multi",), ((), ())),
    ("api_texture.cu", (), ONE),
    ("api_peer.cu", (), TWO_GPUS),
    ("api_peer.cu", (), ((), ())),
]


FEATURES = {"api_graph.cu", "api_pool.cu", "api_managed.cu", "api_texture.cu", "api_peer.cu"}


def program_id(p: tuple) -> str:
    return "-".join([p[0][:-3], *p[1], f"{len(p[2])}daemons" if len(p[2]) > 1 else "", "2gpus" if p[2] == TWO_GPUS
                     else "", p[3]]).strip("-").replace("--", "-")


CASES = on_backends(PROGRAMS)


@pytest.mark.parametrize("program,args,daemon_args,backend", CASES, ids=[program_id(p) for p in CASES])
def test_static_runtime_builds_pass_the_same_checks(program, args, daemon_args, backend, cuda_build, daemon_factory,
                                                    run, lib_dir):
    daemons = [daemon_factory(*a) for a in daemon_args]
    static = run_driver(cuda_build(program, runtime="static"), daemons, *args, lib_dir=lib_dir, timeout=600)
    shared = run(cuda_build(program), daemons, *args, timeout=600)
    assert verdict(static.stdout) == verdict(shared.stdout)
    if program in FEATURES:                                    # every call they make is one libvcuda implements
        assert "is not supported by libvcuda" not in static.stderr, static.stderr
    if program == "emu_assert.cu":
        assert "sync: cudaErrorAssert" in static.stdout
    if program == "api_kernels.cu":   # device printf through NVIDIA's runtime (a real GPU's: on its daemon's stdout)
        assert "hello from the device 42" in (static.stdout if backend == "emu" else daemons[0].log_text())
    if program == "api_peer.cu" and len(daemons) == 2:        # the bytes went daemon to daemon
        assert "fetched" in daemons[1].log_text() and "through this process" not in static.stderr


def test_example_static_build_through_pyvgpu_run_on_two_hosts(daemon_factory, tmp_path):
    """`nvcc -o app vector_add.cu` then `pyvgpu run -- ./app` (the new user's first try), GPUs of two daemons."""
    a, b = daemon_factory(), daemon_factory()
    app = tmp_path / "app"
    subprocess.run([NVCC, "-o", str(app), str(ROOT / "examples" / "hello" / "vector_add.cu")], check=True,
                   capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", f"{a.address},{b.address}", "--",
                           str(app), "50000"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hello: 2 GPU(s) visible" in proc.stdout
    assert "hello: PASSED: all 50000 elements match the CPU" in proc.stdout


def test_nvidia_shared_runtime_on_libvcuda(daemon, tmp_path, lib_dir):
    """A -cudart shared program with NVIDIA's own libcudart.so.13 (found first) and libvcuda, no libvcudart."""
    app = tmp_path / "app"
    subprocess.run([NVCC, "-cudart", "shared", "-o", str(app), str(ROOT / "examples" / "hello" / "vector_add.cu")],
                   check=True, capture_output=True)
    toolkit = CUDA_HOME / "lib64"
    proc = run_driver(app, [daemon], "20000", lib_dir=lib_dir, first=(str(toolkit),), env={"LD_DEBUG": "files"})
    assert "hello: PASSED: all 20000 elements match the CPU" in proc.stdout
    inits = re.findall(r"calling init: (\S+)", proc.stderr)
    assert any(p.endswith("libcudart.so.13") and Path(p).resolve().parent == toolkit.resolve() for p in inits), inits
    # libvcuda, under its own name or the loader's (a symlink in a build tree, a copy in the installed package)
    assert any(Path(p).name in ("libvcuda.so.1", "libcuda.so.1") and Path(p).resolve().parent == lib_dir.resolve()
               for p in inits), inits


@pytest.fixture(scope="session")
def kernels(cuda_build) -> tuple[Path, Path]:
    """drv_kernels.cu as a PTX file and as a fatbin."""
    return cuda_build("drv_kernels.cu", "-ptx", runtime="none"), cuda_build("drv_kernels.cu", "-fatbin",
                                                                           runtime="none")


def drv_program(cuda_build, name: str, lib_dir: Path) -> Path:
    return cuda_build(name, f"-L{lib_dir}", "-lcuda", "-lpthread", "-ldl", "-lm", runtime="none")


@pytest.mark.chain
def test_driver_api_vector_add_from_ptx_file_and_fatbin(cuda_build, daemon, kernels, lib_dir, tmp_path):
    ptx, fatbin = kernels
    assert b".entry vadd" in ptx.read_bytes() and fatbin.read_bytes()[:4] == b"\x50\xed\x55\xba"
    stats = tmp_path / "stats.txt"
    proc = run_driver(drv_program(cuda_build, "drv_vector_add.c", lib_dir), [daemon], str(ptx), str(fatbin),
                      lib_dir=lib_dir, env={"PYVGPU_STATS": str(stats)})
    assert verdict(proc.stdout) == "OK 27"
    # its 6 cuMemcpyHtoD calls are synchronous: each tells the daemon to wait for its copy (fire-and-forget)
    landed = re.search(r"^HTOD_LANDED\s+(\d+)\s+\d+\s+(\d+)\s", stats.read_text(), re.M)
    assert landed and landed.groups() == ("6", "0"), stats.read_text()


@pytest.mark.chain
def test_driver_api_tiled_matmul(cuda_build, daemon, kernels, lib_dir):
    proc = run_driver(drv_program(cuda_build, "drv_matmul.c", lib_dir), [daemon], str(kernels[1]), "40",
                      lib_dir=lib_dir)
    assert verdict(proc.stdout).startswith("OK ")


@pytest.mark.chain
def test_driver_api_contexts_from_threads_on_two_hosts(cuda_build, daemon_factory, kernels, lib_dir):
    a, b = daemon_factory(), daemon_factory("--emu-devices", "2")
    proc = run_driver(drv_program(cuda_build, "drv_contexts.c", lib_dir), [a, b], str(kernels[0]), "6",
                      lib_dir=lib_dir)
    assert verdict(proc.stdout) == "OK 3 devices 6 threads"
    for d in (a, b):   # every host ran kernels
        assert "module" in d.log_text() and "loaded" in d.log_text()


def test_driver_api_contexts_churned_from_threads(cuda_build, daemon_factory, kernels, lib_dir):
    """Stress: 8 threads on the 2 GPUs of one daemon each create a context, allocate, copy, check and free, and
    destroy it, 30 times. One thread's allocation gets the address another thread of the device has just freed; the
    free used to forget its table entry only after the daemon's answer, so the new allocation's entry was entered
    beside the stale one, the free then removed one of the two (its pointer unknown: CUDA_ERROR_INVALID_VALUE), or
    the end of the freeing thread's context freed the other thread's live memory (an illegal address). The free now
    forgets the entry first (csrc/core/memory.c)."""
    d = daemon_factory("--emu-devices", "2")
    proc = run_driver(drv_program(cuda_build, "drv_contexts.c", lib_dir), [d], str(kernels[0]), "8", "stress", "30",
                      lib_dir=lib_dir, timeout=600)
    assert verdict(proc.stdout) == "OK 2 devices 8 threads", proc.stdout + proc.stderr
    assert "handed out" not in proc.stderr                   # no address was ever given two owners


@pytest.mark.chain
def test_driver_api_runtime_features(cuda_build, daemon, kernels, lib_dir):
    """Graphs (capture, explicit, update), managed/mapped/registered memory, pools, arrays, textures, surfaces."""
    proc = run_driver(drv_program(cuda_build, "drv_features.c", lib_dir), [daemon], str(kernels[0]), lib_dir=lib_dir)
    assert verdict(proc.stdout) == "OK 50"
    assert "is not supported by libvcuda" not in proc.stderr


@pytest.mark.chain
@pytest.mark.parametrize("layout", ["one daemon", "two daemons"])
def test_driver_api_peers(cuda_build, daemon_factory, kernels, lib_dir, layout):
    """Peer access between two GPUs of one daemon (kernels read the peer's memory); between daemons it is refused
    and cuMemcpyPeer goes daemon to daemon."""
    daemons = [daemon_factory("--emu-devices", "2")] if layout == "one daemon" else [daemon_factory(), daemon_factory()]
    proc = run_driver(drv_program(cuda_build, "drv_features.c", lib_dir), daemons, str(kernels[0]), "peer",
                      lib_dir=lib_dir)
    assert verdict(proc.stdout) == ("OK 4" if layout == "one daemon" else "OK 2")
    assert ("peer access yes" if layout == "one daemon" else "peer access no") in proc.stdout
    if layout == "two daemons":
        assert "fetched 16384 B from peer daemon" in daemons[0].log_text()


@pytest.mark.chain
@pytest.mark.parametrize("runtime", ["shared", "static"], ids=["libvcudart", "nvidia-runtime"])
def test_driver_api_as_cuda_13_programs_use_it(cuda_build, daemon, kernels, lib_dir, runtime):
    """tests/cuda/drv_ctx13.c: a program that starts with the runtime API (libvcudart, or NVIDIA's static runtime)
    then uses the driver without calling cuInit; a context from a zero-initialised CUctxCreateParams (CIG and
    execution affinity refused with CUDA's codes); that context popped and made current on six other threads
    (cuCtxSetCurrent or cuCtxPushCurrent), each launching work that must all have run; cuFuncIsLoaded, cuFuncLoad,
    cuFuncGetParamInfo, cuFuncGetParamCount (13.2, through cuGetProcAddress) and cuKernelGetParamInfo."""
    prog = cuda_build("drv_ctx13.c", f"-L{lib_dir}", "-lcuda", "-lpthread", runtime=runtime)
    proc = run_driver(prog, [daemon], str(kernels[0]), "6", lib_dir=lib_dir)
    assert verdict(proc.stdout) == "OK 15"
    assert "is not supported by libvcuda" not in proc.stderr


@pytest.mark.chain
def test_driver_api_virtual_memory_management(cuda_build, daemon, kernels, lib_dir):
    """The virtual-memory-management sample class: a context from a zeroed CUctxCreateParams, granularity, reserve,
    create, map, set access, kernels and copies on the mapping, one allocation at two addresses, handles, and
    CUDA's errors (tests/cuda/drv_vmm.c); on a chain the cuda backend runs it on its driver's VMM calls."""
    proc = run_driver(drv_program(cuda_build, "drv_vmm.c", lib_dir), [daemon], str(kernels[0]), lib_dir=lib_dir)
    assert verdict(proc.stdout) == "OK 27"
    assert "is not supported by libvcuda" not in proc.stderr


@pytest.mark.chain
def test_driver_api_tensor_maps(cuda_build, daemon, lib_dir):
    """cuTensorMapEncodeTiled/Im2col and cuTensorMapReplaceAddress as frameworks call them, and the documented
    CUDA_ERROR_INVALID_VALUE refusals (tests/cuda/drv_tensormap.c): the emulated GPU encodes its own descriptor after
    the documented checks; on a chain the cuda backend hands every call to its driver (libvcuda there), whose answer,
    map bytes and refusals, comes back unchanged."""
    proc = run_driver(drv_program(cuda_build, "drv_tensormap.c", lib_dir), [daemon], lib_dir=lib_dir)
    assert verdict(proc.stdout) == "OK 34"
    assert "is not supported by libvcuda" not in proc.stderr
    log = daemon.log_text()
    if daemon.backend == "emu" or daemon.under:          # the emulated GPU's checks say why (a GPU's driver does not)
        assert re.search(r"TENSOR_MAP_ENCODE failed: cudaErrorInvalidValue: .*globalAddress 0x[0-9a-f]+ is not "
                         r"16-byte aligned", log), log[-3000:]


def test_device_memory_around_host_memory(cuda_build, daemon, kernels, lib_dir, backend):
    """Device memory at addresses that also hold the program's pinned host memory (what a GPU host's driver did
    outside the window on an H100, where JAX's memsets then answered CUDA_ERROR_INVALID_VALUE): memsets, copies and a
    kernel on the device memory below and above the host memory work byte for byte (tests/cuda/drv_addr_overlap.c),
    and libvcuda says once that the two share addresses. The emulated GPU and the chain place the range at the
    program's hint; a real driver may place it elsewhere (CUDA documents the address as a hint: NVIDIA's driver 580
    on an H200 put the backend's 64 MiB at a host heap address of the client at 0x7f..., GPU run 5, perhaps because
    the daemon's own process maps that address), and then there is nothing of this test's to check on that GPU
    (test_a_hint_of_a_small_range_on_a_driver_that_ignores_it keeps the backend's way covered on the chain)."""
    proc = run_driver(drv_program(cuda_build, "drv_addr_overlap.c", lib_dir), [daemon], str(kernels[0]),
                      lib_dir=lib_dir)
    placed = re.search(r"^SKIP (the device range went to .*)$", proc.stdout, re.M)
    if placed and backend == "cuda":
        pytest.skip(f"the GPU's driver did not honour the program's hint: {placed.group(1)}")
    assert verdict(proc.stdout) == "OK 6", proc.stdout
    assert proc.stderr.count("share addresses") == 1, proc.stderr


@pytest.mark.emu_only("starts its own chain")
def test_a_hint_of_a_small_range_on_a_driver_that_ignores_it(cuda_build, daemon_factory, kernels, lib_dir):
    """The same program on a cuda backend whose driver ignores the hints of ranges under 64 MiB, as NVIDIA's driver
    580 on an H100 did (GPU run 4: this program's 8 MiB range went to 0x7f...; PYVGPU_FAKE_VA_HINTS=below on the
    chain): the backend reserves 64 MiB at the program's hint, so the program still gets the address it asked for."""
    d = daemon_factory(backend="chain", env={"PYVGPU_FAKE_VA_HINTS": f"below:{64 << 20:#x}"})
    proc = run_driver(drv_program(cuda_build, "drv_addr_overlap.c", lib_dir), [d], str(kernels[0]), lib_dir=lib_dir)
    assert verdict(proc.stdout) == "OK 6", proc.stdout


@pytest.mark.emu_only("runs the GPU check's probe through libvcuda on an emulated GPU")
def test_the_va_hints_probe_through_libvcuda(daemon_factory, lib_dir, tmp_path):
    """tools/gpu_probes/gpu_probe_va_hints.py, which asks a GPU host's driver where it puts hinted ranges, runs to the
    end through libvcuda over an emulated GPU (which honours every hint: each finding says so, the backend's way lies
    at the window's first place), so its GPU run is not lost to a slip in the probe."""
    d = daemon_factory(backend="emu")
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir), "PYVGPU_HOSTS": d.address,
           "PYVGPU_GPU_CHECK_OUT": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_probes" / "gpu_probe_va_hints.py")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith("finding: ")]
    assert len(found) == 9 and "400 honoured" in found[0], proc.stdout
    assert all("placed at" not in ln and "error" not in ln for ln in found), proc.stdout
    assert "backend's window places [0, 0, 0]" in proc.stdout.splitlines()[-1], proc.stdout


@pytest.mark.chain
def test_memsets_of_page_locked_host_memory(cuda_build, daemon, lib_dir):
    """cuMemsetD32Async of 2 elements on cuMemHostAlloc memory (XLA's autotuner zeroing its 8-byte result: on an H100
    libvcuda refused it, GPU run 3, and JAX's jnp.dot failed), a 1-byte and a 2D 16-bit memset of that memory, in
    stream order after a copy into the same bytes; past the allocation and on registered memory's host pointer
    CUDA_ERROR_INVALID_VALUE (tests/cuda/drv_memset_pinned.c)."""
    proc = run_driver(drv_program(cuda_build, "drv_memset_pinned.c", lib_dir), [daemon], lib_dir=lib_dir)
    assert verdict(proc.stdout) == "OK 7", proc.stdout + proc.stderr


@pytest.mark.chain
def test_driver_api_context_semantics(cuda_build, daemon_factory, kernels, lib_dir):
    """cuCtxDestroy frees what the context made and nothing else (its daemon memory comes back), a primary reset
    beside a created context frees only the primary's, a CUfunction belongs to its context's device."""
    daemon = daemon_factory("--emu-devices", "2")
    proc = run_driver(drv_program(cuda_build, "drv_ctx_semantics.c", lib_dir), [daemon], str(kernels[0]),
                      lib_dir=lib_dir)
    assert verdict(proc.stdout) == "OK 20"


@pytest.mark.chain
def test_runtime_and_driver_in_one_program(cuda_build, daemon_factory, run, lib_dir):
    """libvcudart and libvcuda agree on the thread's context: cudaSetDevice makes the primary context current, a
    runtime allocation in a created context goes with it."""
    daemon = daemon_factory("--emu-devices", "2")
    proc = run(cuda_build("drv_mixed.cu", f"-L{lib_dir}", "-lcuda"), [daemon])
    assert verdict(proc.stdout) == "OK 9"


def test_program_loading_another_driver_by_path_is_explained(tmp_path):
    """A program that dlopens a libcuda by its path bypasses libvcuda: `pyvgpu run` says so before it starts (the path
    is in the binary) and libvcuda once more when the other driver was loaded, one line each."""
    other = tmp_path / "private" / "libcuda.so.1"
    other.parent.mkdir()
    (tmp_path / "stub.c").write_text("int cuInit(unsigned f) { (void)f; return 100; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(other), str(tmp_path / "stub.c")],
                   check=True)
    (tmp_path / "app.c").write_text(f"""#include <dlfcn.h>
#include <stdio.h>
int main(void) {{
    void *h = dlopen("{other}", RTLD_NOW);
    int (*init)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuInit") : 0;
    printf("cuInit -> %d\\n", init ? init(0) : -1);
    return 0;
}}
""")
    app = tmp_path / "app"
    subprocess.run(["cc", "-o", str(app), str(tmp_path / "app.c"), "-ldl"], check=True)
    proc = subprocess.run([sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", "127.0.0.1:9", "--", str(app)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "cuInit -> 100" in proc.stdout                 # the other driver answered, not pyvgpu's
    assert f"names the CUDA driver by path ({other})" in proc.stderr
    assert f"loaded another CUDA driver, {other}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 2, proc.stderr


def test_programs_naming_the_driver_by_name_get_no_warning(cuda_build, lib_dir):
    from pyvgpu.cli import driver_paths
    assert driver_paths(str(cuda_build("api_kernels.cu", runtime="static")), lib_dir) == []   # NVIDIA's runtime
    assert driver_paths(str(lib_dir / "libvcuda.so.1"), lib_dir) == []


def test_proc_address_answers_every_name_and_stubs_refuse(cuda_build, lib_dir):
    """No daemon: resolution is local. Every request of NVIDIA's 13.0 runtime gets the symbol it got from the probe;
    every export's name resolves; an unsupported function returns CUDA_ERROR_NOT_SUPPORTED and logs once."""
    proc = run_driver(drv_program(cuda_build, "drv_procaddr.c", lib_dir), [], str(DRIVER_DIR / "driver_exports.txt"),
                      str(REQUESTS), lib_dir=lib_dir)
    nexports = len((DRIVER_DIR / "driver_exports.txt").read_text().split())
    nrequests = sum(1 for ln in REQUESTS.read_text().splitlines() if not ln.startswith('"') and "NOT_FOUND" not in ln)
    assert verdict(proc.stdout) == f"OK {nexports + nrequests + 6}"
    assert proc.stderr.count("cuMipmappedArrayCreate is not supported by libvcuda") == 1


def test_exports_are_the_driver_headers(lib_dir):
    lib = lib_dir / "libvcuda.so.1"
    dyn = subprocess.run(["readelf", "-d", "-V", str(lib)], check=True, capture_output=True, text=True).stdout
    assert "Library soname: [libcuda.so.1]" in dyn and "Library runpath: [$ORIGIN]" in dyn
    assert "Version definition" not in dyn                     # unversioned, like the toolkit's link stub
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], check=True, capture_output=True, text=True).stdout
    exported = {ln.split()[2] for ln in nm.splitlines() if len(ln.split()) == 3}
    assert exported == set((DRIVER_DIR / "driver_exports.txt").read_text().split())
    for name in ("libcuda.so.1", "libcuda.so"):
        assert (lib_dir / name).resolve() == lib.resolve() or (lib_dir / name).read_bytes() == lib.read_bytes()


def test_generated_driver_files_up_to_date(tmp_path):
    """csrc/driver's generated files (and pyvgpu/driver_abis.py) match the CUDA 13.0 headers when they are present."""
    if not (CUDA_HOME / "include" / "cudaTypedefs.h").exists():
        return
    subprocess.run([sys.executable, str(ROOT / "tools" / "gen_driver_exports.py"), "--cuda", str(CUDA_HOME),
                    "--out", str(tmp_path), "--py-out", str(tmp_path)], check=True, capture_output=True)
    for name in ("driver_exports.txt", "exports_gen.c", "libcuda.map", "curesult_gen.h"):
        assert (tmp_path / name).read_text() == (DRIVER_DIR / name).read_text(), name
    assert (tmp_path / "driver_abis.py").read_text() == (ROOT / "pyvgpu" / "driver_abis.py").read_text()
