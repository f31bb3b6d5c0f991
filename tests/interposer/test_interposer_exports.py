"""libvcudart is a drop-in for libcudart.so.13: SONAME, the version node every symbol carries, every export of
CUDA 13.0's libcudart (csrc/cudart/cudart_exports.txt, and the real library when the toolkit is installed) and nothing
else; an nvcc-built program runs against it through LD_LIBRARY_PATH as well as LD_PRELOAD."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import ROOT

REAL = Path("/usr/local/cuda-13.0/lib64/libcudart.so.13")


def committed_exports() -> list[str]:
    return [n for n in (ROOT / "csrc" / "cudart" / "cudart_exports.txt").read_text().split() if n]


def dyn_symbols(lib: Path) -> list[tuple[str, str, str]]:
    """(name, version, ndx) of the dynamic symbols defined by lib."""
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(lib)], check=True, capture_output=True,
                         text=True).stdout
    syms = []
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].endswith(":") and f[6] != "UND" and f[3] in ("FUNC", "OBJECT", "NOTYPE"):
            name, _, ver = f[7].partition("@")
            syms.append((name, ver.lstrip("@"), f[3]))
    return syms


def test_soname_and_version_node(vcudart):
    dyn = subprocess.run(["readelf", "-d", str(vcudart)], check=True, capture_output=True, text=True).stdout
    assert re.search(r"SONAME\)\s+Library soname: \[libcudart\.so\.13\]", dyn)
    ver = subprocess.run(["readelf", "-V", "-W", str(vcudart)], check=True, capture_output=True, text=True).stdout
    assert re.search(r"Version definition section.*\n(.*\n)*.*Name: libcudart\.so\.13", ver)


def test_every_export_present_and_versioned(vcudart):
    names = committed_exports()
    assert len(names) == len(set(names)) and len(names) > 400
    syms = dyn_symbols(vcudart)
    funcs = {n: v for n, v, t in syms if t == "FUNC"}
    missing = [n for n in names if n not in funcs]
    assert not missing, f"{len(missing)} exports missing: {missing[:10]}"
    unversioned = [n for n in names if funcs[n] != "libcudart.so.13"]
    assert not unversioned, unversioned[:10]
    extra = sorted(set(funcs) - set(names))
    assert not extra, f"internal symbols leak out of libvcudart: {extra[:10]}"


def test_export_list_matches_cuda_13_libcudart():
    if not REAL.exists():
        # without the toolkit the committed list is the reference; it must at least hold the launch ABI
        assert {"__cudaRegisterFatBinary", "__cudaLaunchKernel", "cudaMalloc"} <= set(committed_exports())
        return
    real = sorted({n for n, _, t in dyn_symbols(REAL) if t == "FUNC"})
    assert real == sorted(committed_exports())


def test_generated_stubs_up_to_date():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_cudart_stubs as gen
    finally:
        sys.path.pop(0)
    cuda = Path("/usr/local/cuda-13.0")
    c_text, map_text = gen.generate(committed_exports(), gen.read_prototypes(cuda)) if (cuda / "include").exists() \
        else (None, None)
    if c_text is not None:
        assert (ROOT / "csrc" / "cudart" / "unsupported_gen.c").read_text() == c_text
        assert (ROOT / "csrc" / "cudart" / "libcudart.map").read_text() == map_text
    stubs = (ROOT / "csrc" / "cudart" / "unsupported_gen.c").read_text()
    # return types that are not error codes keep their ABI (struct by value, pointers, void)
    assert re.search(r"struct pv_channel_desc cudaCreateChannelDesc\(void\)", stubs)
    assert re.search(r"void \*cudaGetErrorName\(void\)", stubs)
    assert re.search(r"void \*\*?__cudaRegisterFatBinary\(void\)|void \*__cudaRegisterFatBinary\(void\)", stubs)


def test_ld_library_path_drop_in(cuda_build, tmp_path, vcudart):
    """No LD_PRELOAD: the library directory holds libcudart.so.13 (libvcudart under its SONAME, beside the client
    core it needs) and satisfies the program's DT_NEEDED."""
    assert (vcudart.parent / "libcudart.so.13").is_file()
    prog = cuda_build("api_device.cu")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(LD_LIBRARY_PATH=str(vcudart.parent), PYVGPU_HOSTS="127.0.0.1:1")
    proc = subprocess.run([str(prog)], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert "cudaErrorDevicesUnavailable" in proc.stdout
    assert "pyvgpu: cannot connect to daemon 127.0.0.1:1" in proc.stderr


@pytest.mark.parametrize("name", ["cudaMalloc", "__cudaPushCallConfiguration", "cudaGetDeviceCount"])
def test_implemented_entry_points_are_strong(vcudart, name):
    out = subprocess.run(["nm", "-D", "--defined-only", str(vcudart)], check=True, capture_output=True,
                         text=True).stdout
    kinds = {line.split()[2].split("@")[0]: line.split()[1] for line in out.splitlines() if len(line.split()) == 3}
    assert kinds[name] == "T"
    assert kinds["cudaCtxResetPersistingL2Cache"] == "W"   # an unsupported export falls back to its generated stub


def test_runtime_dependencies_are_minimal(vcudart):
    """A client needs only libc and OpenSSL (libcrypto for the token proof, libssl for TLS) beside the client core
    (found by RUNPATH $ORIGIN): msgpack-c is linked in (and hidden), CUDA is never needed."""
    allowed = {"libc.so.6", "ld-linux-x86-64.so.2", "libcrypto.so.3", "libssl.so.3", "libmsgpackc.so.2", "libm.so.6",
               "libpthread.so.0"}
    core = vcudart.parent / "libpvcore.so"
    for lib, extra in ((vcudart, {"libpvcore.so"}), (core, set())):
        dyn = subprocess.run(["readelf", "-d", str(lib)], check=True, capture_output=True, text=True).stdout
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn))
        assert not any("cuda" in n for n in needed), needed
        assert needed <= allowed | extra, needed
        if extra:
            assert "Library runpath: [$ORIGIN]" in dyn


def test_generated_layouts_up_to_date(tmp_path):
    """csrc/core/layouts_gen.h (struct offsets, valid device attributes) matches the CUDA 13.0 headers when present."""
    text = (ROOT / "csrc" / "core" / "layouts_gen.h").read_text()
    assert "#define PV_cudaDeviceProp_SIZE 1008" in text
    if not (Path("/usr/local/cuda-13.0") / "include" / "cuda_runtime_api.h").exists():
        return
    out = tmp_path / "layouts_gen.h"
    subprocess.run([sys.executable, str(ROOT / "tools" / "gen_cudart_layouts.py"), f"--out={out}"], check=True)
    assert out.read_text() == text
