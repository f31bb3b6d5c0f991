"""`pyvgpu run -n` with leases (pyvgpu/leasing.py, the daemon's leases.py): the done-when of issue 20 (20 concurrent
runs on a pool of 4 exclusive GPUs: at most 4 at a time, none sharing a GPU, the rest waiting, all finishing), two runs
started at the same moment getting two GPUs, --no-wait failing at once with the reason, a program without its lease
refused on a leased GPU (the C client's hello carries PYVGPU_LEASES), leases shown by `pyvgpu devices` and `daemon
status`, a killed run's lease expiring, signals and exit status passed through, shares."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyvgpu.client import Client

MiB = 1 << 20


def run_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pyvgpu.cli", "run", *args]


def pyvgpu(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyvgpu.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def lease_check():
    from harness import CUDA_SRC, build_cuda
    return build_cuda(CUDA_SRC / "lease_check.cu")


def parse(out: str) -> dict:
    got = {"hosts": re.search(r"hosts=(\S*)", out).group(1)}
    for key in ("start", "end"):
        m = re.search(rf"^{key} (\S+)$", out, re.M)
        got[key] = float(m.group(1)) if m else None
    got["totals"] = [int(t) for t in re.findall(r"^gpu \d+ total=(\d+)", out, re.M)]
    return got


def leases(d) -> list[dict]:
    with Client.connect("127.0.0.1", d.port) as c:
        return c.status()["leases"]


def test_twenty_runs_share_four_exclusive_gpus_one_at_a_time(daemon_factory, lease_check):
    """The done-when: 20 `pyvgpu run -n 1` at once on 4 exclusive GPUs (2 daemons x 2): every run gets one GPU to
    itself, at most 4 run at a time, the others wait in line, and all 20 finish (each program checks its sums); a run
    that asks not to wait fails at once and says what holds the GPUs. The daemons' logs show every GPU's leases one
    after the other."""
    a = daemon_factory("--emu-devices", "2")
    b = daemon_factory("--emu-devices", "2")
    pool = f"{a.address},{b.address}"
    t0 = time.monotonic()
    procs = [subprocess.Popen(run_cmd("--hosts", pool, "-n", "1", "--lease-ttl", "10", "--", str(lease_check),
                                      "--hold-ms", "700"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(20)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(leases(a)) + len(leases(b)) < 4:
        time.sleep(0.1)
    t1 = time.monotonic()
    refused = subprocess.run(run_cmd("--hosts", pool, "-n", "1", "--no-wait", "--", str(lease_check)),
                             capture_output=True, text=True, timeout=60)
    refused_s = time.monotonic() - t1
    results = [(p.communicate(timeout=600), p.returncode) for p in procs]
    wall = time.monotonic() - t0
    for (out, err), code in results:
        assert code == 0 and "PASSED" in out, f"exit {code}\n{out}\n{err}"
    runs = [parse(out) for (out, _), _ in results]
    # each run saw one GPU, named by host:port/ordinal, of the pool
    gpus = {f"{d.address}/{i}" for d in (a, b) for i in range(2)}
    assert all(r["hosts"] in gpus for r in runs), [r["hosts"] for r in runs]
    # on each GPU the runs came one after the other; at no moment did more than 4 run
    for gpu in gpus:
        spans = sorted((r["start"], r["end"]) for r in runs if r["hosts"] == gpu)
        assert spans and all(prev[1] <= nxt[0] for prev, nxt in zip(spans, spans[1:])), (gpu, spans)
    edges = sorted([(r["start"], 1) for r in runs] + [(r["end"], -1) for r in runs], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert peak <= 4
    assert sum("waiting for a lease" in err for (_, err), _ in results) >= 12, "16 of them waited in line"
    # --no-wait: at once, with the reason
    assert refused.returncode == 1 and "no lease: 1 GPU(s) asked, 0 of the pool's 4 GPU(s) free" in refused.stderr \
        and "without --no-wait it waits" in refused.stderr, refused.stderr
    assert refused_s < 10, refused_s
    # the daemons saw each GPU leased and given back in turn: 20 grants, no two leases of one GPU at once
    grants = 0
    for d in (a, b):
        held: dict[int, str] = {}
        for line in d.log_text().splitlines():
            m = re.search(r"lease (\w+) \(.*\) (holds|held) GPU (\d) exclusively", line)
            if not m:
                continue
            tag, what, dev = m.group(1), m.group(2), int(m.group(3))
            if what == "holds":
                assert dev not in held, f"GPU {dev} leased to {tag} while {held.get(dev)} held it"
                held[dev] = tag
                grants += 1
            else:
                assert held.pop(dev) == tag and "released by its holder" in line
        assert not held
    assert grants == 20
    assert leases(a) == [] and leases(b) == []
    print(f"20 runs of ~0.7 s on 4 GPUs: {wall:.1f} s wall; --no-wait refused in {refused_s:.2f} s")


def test_two_runs_started_at_the_same_moment_get_two_gpus(daemon_factory):
    d = daemon_factory("--emu-devices", "2")
    for _ in range(3):
        procs = [subprocess.Popen(run_cmd("--hosts", d.address, "-n", "1", "--no-wait", "--", "sh", "-c",
                                          "echo $PYVGPU_HOSTS; sleep 1"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        assert sorted(o.strip() for o, _ in outs) == [f"{d.address}/0", f"{d.address}/1"]


def test_a_program_needs_its_lease(daemon_factory, lease_check, tmp_path):
    """While `pyvgpu run -n 1` holds the GPU, the same program run without the lease is refused with
    cudaErrorDevicesUnavailable and libvcudart says why; `pyvgpu devices` and `daemon status` show the lease."""
    d = daemon_factory()
    go = tmp_path / "go"
    holder = subprocess.Popen(run_cmd("--hosts", d.address, "-n", "1", "--", str(lease_check), "--until-file",
                                      str(go)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not leases(d):
            time.sleep(0.1)
        held = leases(d)
        assert len(held) == 1 and held[0]["holder"].startswith("pyvgpu run (pid ")
        env = {**os.environ, "PYVGPU_HOSTS": d.address, "LD_LIBRARY_PATH": str(Path(lib_dir()))}
        env.pop("PYVGPU_LEASES", None)
        bare = subprocess.run([str(lease_check)], capture_output=True, text=True, timeout=60, env=env)
        assert bare.returncode == 1 and "cudaErrorDevicesUnavailable" in bare.stdout, bare.stdout + bare.stderr
        assert f"refused a call: lease {held[0]['tag']} (pyvgpu run (pid" in bare.stderr, bare.stderr
        devs = pyvgpu("devices", "--hosts", d.address)
        assert devs.returncode == 0 and "LEASE" in devs.stdout.splitlines()[0]
        assert "excl pyvgpu run (pid" in devs.stdout.splitlines()[1], devs.stdout
        status = pyvgpu("daemon", "status", "--port", str(d.port))
        assert "leases: 1" in status.stdout and f"lease {held[0]['tag']}: dev 0, exclusive" in status.stdout \
            and "leased: excl pyvgpu run" in status.stdout, status.stdout
    finally:
        go.touch()
        out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0 and "PASSED" in out, out + err
    assert leases(d) == []


def lib_dir() -> str:
    import pyvgpu
    return str(pyvgpu.lib_path(pyvgpu.DRIVER_LIB_NAME).parent)


def test_a_killed_run_loses_its_lease_when_it_expires(daemon_factory):
    d = daemon_factory()
    proc = subprocess.Popen(run_cmd("--hosts", d.address, "-n", "1", "--lease-ttl", "2", "--", "sh", "-c",
                                    "echo $$; exec sleep 60"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    child = int(proc.stdout.readline())
    assert len(leases(d)) == 1
    proc.kill()                                   # the holder vanishes without giving the lease back
    proc.wait()
    os.kill(child, signal.SIGKILL)
    t0 = time.monotonic()
    while leases(d) and time.monotonic() - t0 < 10:
        time.sleep(0.1)
    assert leases(d) == [] and time.monotonic() - t0 <= 2.5 + 1.0
    assert "expired: not renewed within 2 s" in d.log_text()


def test_signals_and_exit_status_pass_through(daemon_factory):
    d = daemon_factory()
    r = pyvgpu("run", "--hosts", d.address, "-n", "1", "--", "sh", "-c", "exit 3")
    assert r.returncode == 3
    proc = subprocess.Popen(run_cmd("--hosts", d.address, "-n", "1", "--", "sh", "-c",
                                    "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.1; done"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)              # to `pyvgpu run` only: it forwards it to the program
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 7 and "got TERM" in out
    assert leases(d) == []                        # given back at once
    missing = pyvgpu("run", "--hosts", d.address, "-n", "1", "--", "/nonexistent/program")
    assert missing.returncode == 127 and "command not found" in missing.stderr and leases(d) == []


def test_a_share_gets_its_part_of_the_gpu(daemon_factory, lease_check):
    d = daemon_factory("--emu-memory", "1G")
    r = pyvgpu("run", "--hosts", d.address, "-n", "1", "--share", "0.5", "--", str(lease_check))
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr
    assert parse(r.stdout)["totals"] == [512 * MiB]
    r = pyvgpu("run", "--hosts", d.address, "-n", "1", "--share", "0.5", "--memory", "100M", "--", str(lease_check))
    assert parse(r.stdout)["totals"] == [100 * MiB], r.stdout + r.stderr
    bad = pyvgpu("run", "--hosts", d.address, "-n", "1", "--share", "2", "--", "true")
    assert bad.returncode == 2 and "--share must be from" in bad.stderr
