"""scripts/gpu-check.sh, the real-GPU check, rehearsed here as it must run on a lent GPU machine: without network (a
network namespace of its own), within its budget, with the chain standing in for the GPU (`--backend cuda` daemons
whose cuda-python loads pyvgpu's libcuda.so.1, pointed at an emulated GPU). Also: killed midway it leaves what it
finished; stale carried libraries are refused; the offline bundle carries what the GPU image lacks.

CI cost: one rehearsal (REHEARSAL_BUDGET s, plus the client libraries' first build) and a short killed run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

import pytest

from harness import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import gpu_bundle  # noqa: E402
import gpu_check  # noqa: E402

SCRIPT = ROOT / "scripts" / "gpu-check.sh"
REHEARSAL_BUDGET = 240      # every stage reached on 2 loaded cores (180 s left the later ones no time under load)
STAGES = ["hello", "frameworks", "backend", "programs", "differential", "figures"]


def no_gpu_env() -> dict:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def test_without_a_gpu_it_says_so_and_exits_0(tmp_path):
    """Where no GPU can be used (CUDA_VISIBLE_DEVICES='' hides any), it says why before building anything."""
    proc = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                          env=no_gpu_env(), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gpu-check: no usable GPU: CUDA_VISIBLE_DEVICES='' hides every GPU; nothing to check" in proc.stdout
    assert not (tmp_path / "report.md").exists()


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-check")
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT), "--rehearse", "--budget", str(REHEARSAL_BUDGET), "--out", str(out)],
                          capture_output=True, text=True, timeout=REHEARSAL_BUDGET + 120)
    return proc, out, time.monotonic() - t0


def test_rehearsal_runs_offline_within_its_budget(rehearsal):
    proc, out, wall = rehearsal
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["status"] == "done" and rep["rehearsal"] is True
    # Offline: a namespace with loopback alone, no route anywhere.
    assert rep["machine"]["network"].startswith("interfaces lo, 0 IPv4 route(s) (unshare"), rep["machine"]
    # Within the budget: the stages stop at their shares; the slack is the interpreter's start and the last report.
    assert rep["elapsed_s"] <= REHEARSAL_BUDGET + 5 and wall <= REHEARSAL_BUDGET + 30, (rep["elapsed_s"], wall)
    assert rep["gpu"]["count"] == 1 and "emulated" in rep["gpu"]["name"]
    assert [s["name"] for s in rep["stages"]] == STAGES
    for st in rep["stages"]:
        assert st["status"] not in ("pending", "running", "error"), st
        if "share_s" in st:
            assert st["seconds"] <= st["share_s"] + 15, st      # a stage ends at its share (+ stopping its children)


def test_rehearsal_hello_passes_through_the_cuda_backend(rehearsal):
    _, out, _ = rehearsal
    hello = json.loads((out / "report.json").read_text())["stages"][0]
    assert hello["status"] == "pass", hello
    items = {r["item"]: r for r in hello["rows"]}
    for way in ("native (the GPU itself, static runtime)", "pyvgpu run, -cudart shared (libvcudart)",
                "pyvgpu run, static runtime (libvcuda)"):
        assert items[way]["result"] == "pass" and "PASSED: all 65536 elements match" in items[way]["detail"]
    assert "cuda" in items["pyvgpu devices"]["detail"]     # the daemon the programs went through: --backend cuda


def test_rehearsal_runs_the_probes_and_the_programs(rehearsal):
    _, out, _ = rehearsal
    stages = {s["name"]: s for s in json.loads((out / "report.json").read_text())["stages"]}
    # The framework-free probe reaches the GPU all three ways (natively, over libvcuda alone, under `pyvgpu run`).
    driver = next(r for r in stages["frameworks"]["rows"] if r["item"].endswith("gpu_probe_driver.py"))
    assert driver["result"] == "pass" and driver["detail"].endswith("native 5/5; driver 5/5; pyvgpu run 5/5"), driver
    # The test programs ran through cuda daemons: pytest collected every e2e/driver test and results came back.
    prog = stages["programs"]
    assert prog["status"] in ("pass", "fail", "partial"), prog
    assert (prog["collected"] or 0) > 50 and prog["rows"], prog["summary"]
    assert all(r["item"].startswith(("tests/e2e/", "tests/driver/")) for r in prog["rows"])
    # The cuda backend's own tests found the GPU (the chain) and ran, rather than skipping.
    backend = stages["backend"]
    assert (backend["collected"] or 0) > 10 and any(r["result"] != "skipped" for r in backend["rows"]), backend
    # The differential checks compared the GPU (here the chain over an emulated GPU) with the emulator.
    diff = {Path(r["item"]).name: r for r in stages["differential"]["rows"]}
    assert diff["gpu_diff_kernels.py"]["detail"] == "kernels: 16 of 16 groups bit-identical", diff
    # Local against remote: the figures measured both ways have positive values.
    figs = stages["figures"].get("figures", {})
    both = {k: v for k, v in figs.items() if v[0] is not None and v[1] is not None}
    assert "sync call (cudaMemGetInfo) p50 us" in both, stages["figures"]
    assert all(a > 0 and b > 0 for k, (a, b) in both.items() if "error" not in k)


def test_rehearsal_report_files(rehearsal):
    _, out, _ = rehearsal
    names = sorted(p.name for p in out.iterdir())
    assert names == ["gpu-check.log", "logs.tar.gz", "report.json", "report.md"]   # the device returns <= 8 files
    md = (out / "report.md").read_text()
    assert "| hello | pass |" in md and "### figures" in md
    with tarfile.open(out / "logs.tar.gz") as tf:
        logs = tf.getnames()
    assert any(n.startswith("logs/daemon-cuda-") for n in logs) and "logs/programs-pytest.log" in logs


def _wait_for(path: Path, pred, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = json.loads(path.read_text())
            if pred(data):
                return data
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{path} never showed what was waited for: {path.read_text() if path.exists() else '-'}")


def test_killed_midway_it_leaves_what_it_finished(tmp_path, rehearsal):
    """SIGKILL (no chance to clean up) while the programs run: the report on disk is whole and holds the hello stage;
    the children it left (in sessions of their own) carry the run's mark, and the next run ends them."""
    out = tmp_path / "out"
    proc = subprocess.Popen(["bash", str(SCRIPT), "--rehearse", "--budget", "120", "--stages", "hello,programs",
                             "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        rep = _wait_for(out / "report.json", lambda d: any(s["name"] == "programs" and s["status"] == "running"
                                                           for s in d["stages"]), timeout=100)
        time.sleep(3)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    rep = json.loads((out / "report.json").read_text())
    stages = {s["name"]: s for s in rep["stages"]}
    assert rep["status"] == "running" and stages["programs"]["status"] == "running"
    assert stages["hello"]["status"] == "pass"
    assert "| hello | pass |" in (out / "report.md").read_text()
    assert "stage hello: pass" in (out / "gpu-check.log").read_text()
    assert (out / "logs.tar.gz").is_file()
    # What it left running (daemons, pytest) is found by the run's mark and ended by pid.
    orphans = gpu_check.reap(rep["run_id"])
    assert orphans, "a killed run leaves its daemons; the mark finds them"
    assert not gpu_check.reap(rep["run_id"])


def test_stale_carried_libraries_are_refused_in_one_line(tmp_path):
    """Libraries carried in the bundle run only when built from this checkout's sources."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "libs.tar.gz").write_bytes(b"")
    (bundle / gpu_bundle.MANIFEST).write_text(json.dumps({"source_digest": "0123456789abcdef", "made": "then"}))
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), "--rehearse", "--libs", "carried", "--bundle", str(bundle),
                           "--stages", "none", "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    here = gpu_bundle.source_digest()
    line = (f"carried: refused: the carried libraries were built from sources 0123456789abcdef (then) but this "
            f"checkout's are {here}; rerun scripts/gpu-bundle.sh")
    assert line in proc.stdout
    assert json.loads((out / "report.json").read_text())["status"] == "set-up failed"


def test_source_digest_follows_the_library_sources(tmp_path):
    for rel in ("CMakeLists.txt", "csrc/core/a.c", "pyvgpu/protocol.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    before = gpu_bundle.source_digest(tmp_path)
    (tmp_path / "daemon").mkdir()
    (tmp_path / "daemon" / "other.py").write_text("not a library source")
    assert gpu_bundle.source_digest(tmp_path) == before
    (tmp_path / "csrc" / "core" / "a.c").write_text("y")
    assert gpu_bundle.source_digest(tmp_path) != before


def test_the_bundle_carries_what_the_gpu_image_lacks():
    """Every requirement of the package and its cuda extra is in the GPU image, in the bundle's wheels, or left out
    for a stated reason: a new dependency fails this until the bundle carries it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project["optional-dependencies"]["cuda"]
    names = {r.split(">")[0].split("<")[0].split("=")[0].split("[")[0].split(";")[0].strip().lower().replace("_", "-")
             for r in reqs}
    image = {n.replace("_", "-") for n in gpu_bundle.IMAGE_HAS}
    carried = set(gpu_bundle.WHEELS)
    assert names - image - carried - set(gpu_bundle.NOT_CARRIED) == set()
    assert "pycparser" in carried          # cffi's own requirement, not in the image either
