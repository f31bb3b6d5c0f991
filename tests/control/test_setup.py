"""Packaging and first-run: the README's two commands, .ci/run, the set-up scripts, the wheel, examples/hello."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from harness import NVCC, ROOT, build_cuda

SCRIPTS = ROOT / "scripts"


def test_readme_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first_block = re.search(r"```(?:sh|bash)?\n(.*?)```", text, re.S)
    assert first_block is not None
    # the first code block comes before any section heading
    assert text.index(first_block.group(0)) < text.index("\n## ")
    commands = [ln.split("#")[0].strip() for ln in first_block.group(1).splitlines() if ln.split("#")[0].strip()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for cmd in commands:
        assert (ROOT / cmd.split()[1]).is_file()
    for placeholder in ("## Emulated GPU", "## The paper's experiment", "## Security", "docs/architecture.md"):
        assert placeholder in text


def test_ci_runs_the_readme_test_command_only():
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) == 1
    assert lines[0].endswith("exec bash scripts/test.sh")


def test_test_script_propagates_pytest_status(tmp_path):
    """scripts/test.sh runs pytest over tests/, then the whole suite again with PYVGPU_DAEMON_COMPILED=0 but for the
    replay of the captured frames (it starts daemons of both paths itself: the first pass ran it, and the test it
    deselects exists); its exit status is the first failing pass's ("no tests selected" in the second pass is no
    failure). Its commands after the set-up are run here with a stand-in python that exits as told."""
    text = (SCRIPTS / "test.sh").read_text()
    assert "set -euo pipefail" in text
    tail = text[text.index('say "running the test suite'):]
    fake = tmp_path / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYVGPU_DAEMON_COMPILED"}
    for first, second, want in ((0, 0, 0), (1, 0, 1), (0, 1, 1), (0, 5, 0), (2, 1, 2)):
        fake.write_text(f'#!/bin/sh\nif [ -n "$PYVGPU_DAEMON_COMPILED" ]; then echo "$PYVGPU_DAEMON_COMPILED $*" '
                        f'> {tmp_path}/second; exit {second}; fi\necho "$*" > {tmp_path}/first; exit {first}\n')
        fake.chmod(0o755)
        proc = subprocess.run(["bash", "-c", f'set -euo pipefail; say() {{ :; }}; PY={fake}\n{tail}', "test.sh",
                               "-x"], capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == want, (first, second, proc.stderr)
        assert (tmp_path / "first").read_text().split() == ["-m", "pytest", "-q", "tests", "--durations=25", "-x"]
        once = "tests/daemon/test_framepath.py::test_captured_programs_same_on_both_paths"
        assert (tmp_path / "second").read_text().split() == ["0", "-m", "pytest", "-q", "tests", "--durations=25",
                                                             "--deselect", once, "-x"]
    path, name = once.split("::")
    assert f"\ndef {name}(" in (ROOT / path).read_text()


@pytest.mark.parametrize("name", ["common.sh", "setup.sh", "demo.sh", "test.sh"])
def test_scripts_parse(name):
    proc = subprocess.run(["bash", "-n", str(SCRIPTS / name)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if name != "common.sh":
        assert os.access(SCRIPTS / name, os.X_OK)


def _common(snippet: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f'. "{SCRIPTS / "common.sh"}"; {snippet}'], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=60)


def test_choose_python_honours_PYTHON():
    proc = _common('choose_python; echo "PY=$PY"', {"PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"PY={sys.executable}"


def test_choose_python_rejects_unusable_interpreter(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    proc = _common("choose_python", {"PYTHON": str(fake)})
    assert proc.returncode != 0 and "cannot install packages" in proc.stderr


def test_apt_ensure_is_a_no_op_when_everything_is_present():
    if not shutil.which("dpkg-query"):
        pytest.skip("not a Debian/Ubuntu system")
    present = [p for p in ("bash", "coreutils") if subprocess.run(
        ["dpkg-query", "-W", p], capture_output=True).returncode == 0]
    if not present:
        pytest.skip("no dpkg-known packages")
    proc = _common("as_root() { echo CALLED-ROOT; }; apt_ensure " + " ".join(present))
    assert proc.returncode == 0, proc.stderr
    assert "CALLED-ROOT" not in proc.stdout and "present" in proc.stdout


def test_apt_ensure_installs_only_the_missing(tmp_path):
    if not shutil.which("dpkg-query"):
        pytest.skip("not a Debian/Ubuntu system")
    proc = _common('as_root() { echo "ROOT: $*"; }; apt_ensure bash pyvgpu-no-such-package-xyz')
    assert proc.returncode == 0, proc.stderr
    install = [ln for ln in proc.stdout.splitlines() if "apt-get install" in ln]
    assert len(install) == 1 and install[0].endswith(" pyvgpu-no-such-package-xyz")


def test_pyproject_packaging_contract():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["build-system"]["build-backend"] == "scikit_build_core.build"
    assert data["tool"]["scikit-build"]["wheel"]["packages"] == ["pyvgpu", "daemon/pyvgpu_daemon"]
    assert data["tool"]["scikit-build"]["wheel"]["install-dir"] == "pyvgpu"
    assert data["project"]["scripts"]["pyvgpu"] == "pyvgpu.cli:main"
    for dep in ("msgpack", "uvloop", "numpy"):
        assert any(d.startswith(dep) for d in data["project"]["dependencies"])


def _source_copy(dst: Path) -> Path:
    """The files a fresh clone would have (tracked + untracked, not ignored), without build outputs."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    return dst


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_wheel_contains_library_daemon_and_command(tmp_path):
    pytest.importorskip("scikit_build_core")
    if not (ROOT / "csrc" / "CMakeLists.txt").exists():
        pytest.skip("csrc/CMakeLists.txt not there yet")
    src = _source_copy(tmp_path / "src")
    out = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                           "--disable-pip-version-check", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("pyvgpu-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        lib = zf.read("pyvgpu/lib/libvcudart.so")
        driver = zf.read("pyvgpu/lib/libvcuda.so.1")
        # the names programs and the loader look for, beside the libraries (`pyvgpu lib --dir`): copies of it
        aliases = [zf.read(f"pyvgpu/lib/{n}") for n in ("libcuda.so.1", "libcuda.so")]
    for copy in aliases:
        assert copy[:4] == b"\x7fELF" and b"libcuda.so.1" in copy and b"cuGetExportTable" in copy
    assert {"pyvgpu/cli.py", "pyvgpu/hostmap.py", "pyvgpu/protocol.py", "pyvgpu_daemon/__main__.py",
            "pyvgpu/cublas_spec.py", "pyvgpu/lib/libvcublas.so", "pyvgpu/lib/libcublas.so.13",
            "pyvgpu/lib/libcublas.so", "pyvgpu/cublaslt_spec.py", "pyvgpu/lib/libvcublasLt.so",
            "pyvgpu/lib/libcublasLt.so.13", "pyvgpu/lib/libcublasLt.so", "pyvgpu/lib/libvnvJitLink.so"} <= names
    assert {"pyvgpu/lib/libpvcore.so", "pyvgpu/lib/libcudart.so.13"} <= names
    assert "pyvgpu = pyvgpu.cli:main" in entry_points
    assert lib[:4] == b"\x7fELF" and b"libcudart.so.13" in lib
    assert driver[:4] == b"\x7fELF" and b"libcuda.so.1" in driver


@pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc not installed")
def test_hello_example_builds_and_links_shared_cudart():
    exe = build_cuda(ROOT / "examples" / "hello" / "vector_add.cu")
    deps = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert "libcudart.so.13" in deps          # -cudart shared: the interposer can replace it


@pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc not installed")
def test_hello_example_through_pyvgpu_run(daemon, vcudart, tmp_path):
    """The demo's core step: examples/hello on an emulated GPU, through `pyvgpu run`."""
    exe = build_cuda(ROOT / "examples" / "hello" / "vector_add.cu")
    cli = Path(sys.executable).parent / "pyvgpu"
    cmd = [str(cli)] if cli.exists() else [sys.executable, "-m", "pyvgpu.cli"]
    proc = subprocess.run([*cmd, "run", "--hosts", daemon.address, "--", str(exe), "5000"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr + daemon.log_text()[-3000:]
    assert "1 GPU(s) visible" in proc.stdout
    assert "c[4999] = 12498.5" in proc.stdout and "c[1] = 3.5" in proc.stdout           # 0.5*4999 + 2*4999 + 1
    assert "PASSED: all 5000 elements match" in proc.stdout
