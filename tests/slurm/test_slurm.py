"""Pooled GPUs as a Slurm resource, against real slurmctld/slurmd processes (cluster.py) and emulated pyvgpu daemons:
jobs ask with `-L vgpu:N` (or `-L vgpu_share:K`) and nothing else, and run a CUDA program as it is on the GPUs they
leased (pyvgpu/slurm.py's hooks set PYVGPU_HOSTS, PYVGPU_LEASES and LD_LIBRARY_PATH). Two jobs get distinct GPUs and a
third waits in Slurm's queue; a job asking for two gets two; shares get their quotas; a cancelled job's lease is given
back at once; a job whose node dies loses its lease when it expires (the last test: it kills the node's slurmd)."""
from __future__ import annotations

import re
import subprocess
import sys
import time

from conftest import LEASE_TTL, MiB
from pyvgpu.client import Client


def all_leases(pool) -> list[dict]:
    out = []
    for d in pool:
        with Client.connect("127.0.0.1", d.port) as c:
            out += [dict(x, daemon=d.address) for x in c.status()["leases"]]
    return out


def job_leases(pool, jid: str) -> list[dict]:
    return [x for x in all_leases(pool) if x["job"].endswith(f":{jid}")]


def started(slurm, jid: str, timeout: float = 90) -> dict:
    """Once the job's program has done its first work on its GPUs: what it printed (hosts, memory totals)."""
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        out = slurm.output(jid)
        if re.search(r"^start ", out, re.M):
            return {"hosts": re.search(r"hosts=(\S*)", out).group(1),
                    "totals": [int(t) for t in re.findall(r"^gpu \d+ total=(\d+)", out, re.M)], "out": out}
        if "FAIL" in out:
            break
        time.sleep(0.2)
    raise AssertionError(f"job {jid} did not start its program: {out!r}\n{slurm.job(jid)}\n{slurm.logs()}")


def finished(slurm, jid: str) -> str:
    info = slurm.wait_state(jid, "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", timeout=90)
    out = slurm.output(jid)
    assert info["JobState"] == "COMPLETED" and "PASSED" in out, f"{info}\n{out}\n{slurm.logs()}"
    return out


def no_leases_of(pool, jid: str, timeout: float = 10) -> float:
    t0 = time.monotonic()
    while job_leases(pool, jid) and time.monotonic() - t0 < timeout:
        time.sleep(0.1)
    assert not job_leases(pool, jid), job_leases(pool, jid)
    return time.monotonic() - t0


def test_two_jobs_get_distinct_gpus_and_a_third_waits_in_the_queue(slurm, pool, lease_check):
    script = slurm.job_script(lease_check)
    a = slurm.submit(script, "-L", "vgpu:1")
    b = slurm.submit(script, "-L", "vgpu:1")
    ra, rb = started(slurm, a), started(slurm, b)
    whole = {f"{pool[0].address}/0", f"{pool[1].address}/0"}
    assert {ra["hosts"], rb["hosts"]} == whole, (ra["hosts"], rb["hosts"])       # distinct, one each
    held = {x["job"].rsplit(":", 1)[1]: x for x in all_leases(pool)}
    assert set(held) == {a, b} and held[a]["holder"] == f"slurm job {a} (root)" and held[a]["exclusive"]
    assert held[a]["sessions"] == 1 and held[a]["ttl"] == 30.0                  # the program uses it
    c = slurm.submit(script, "-L", "vgpu:1")
    info = slurm.wait_state(c, "PENDING")
    deadline = time.monotonic() + 20
    while info.get("Reason") != "Licenses" and time.monotonic() < deadline:
        time.sleep(0.3)
        info = slurm.job(c)
    assert info["JobState"] == "PENDING" and info["Reason"] == "Licenses", info
    # the pool is Slurm's now: a lease outside Slurm waits, or (--no-wait) says who holds the GPUs
    r = subprocess.run([sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", f"{pool[0].address},{pool[1].address}",
                        "-n", "1", "--no-wait", "--", "true"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no lease: 1 GPU(s) asked, 0 of the pool's 2 GPU(s) free" in r.stderr and \
        f"leased to slurm job {a} (root)" in r.stderr and f"leased to slurm job {b} (root)" in r.stderr, r.stderr
    slurm.release(a)
    finished(slurm, a)
    rc = started(slurm, c)
    assert rc["hosts"] == ra["hosts"]                  # the GPU the first job gave back
    assert slurm.job(c)["JobState"] == "RUNNING" and slurm.job(b)["JobState"] == "RUNNING"
    assert no_leases_of(pool, a) < 5
    for j in (b, c):
        slurm.release(j)
        finished(slurm, j)
    for j in (b, c):
        no_leases_of(pool, j)
    assert all_leases(pool) == []


def test_a_job_asking_for_two_gets_both(slurm, pool, lease_check):
    j = slurm.submit(slurm.job_script(lease_check), "-L", "vgpu:2")
    r = started(slurm, j)
    assert sorted(r["hosts"].split(",")) == sorted([f"{pool[0].address}/0", f"{pool[1].address}/0"])
    assert "gpus 2 " in r["out"]
    slurm.release(j)
    finished(slurm, j)
    no_leases_of(pool, j)


def test_shares_of_one_gpu_get_their_quotas(slurm, pool, lease_check):
    """-L vgpu_share:K with Shares=4: K quarters of the shared GPU; both jobs run on it at once, each with its part
    of the memory as the total cudaMemGetInfo shows."""
    script = slurm.job_script(lease_check)
    half = slurm.submit(script, "-L", "vgpu_share:2")
    quarter = slurm.submit(script, "-L", "vgpu_share:1")
    rh, rq = started(slurm, half), started(slurm, quarter)
    assert rh["hosts"] == rq["hosts"] == f"{pool[2].address}/0"
    assert rh["totals"] == [512 * MiB] and rq["totals"] == [256 * MiB]
    shares = sorted((x["fraction"], x["weight"]) for x in all_leases(pool) if not x["exclusive"])
    assert shares == [(0.25, 0.25), (0.5, 0.5)]
    for j in (half, quarter):
        slurm.release(j)
        finished(slurm, j)
        no_leases_of(pool, j)


def test_a_cancelled_job_gives_its_lease_back(slurm, pool, lease_check):
    j = slurm.submit(slurm.job_script(lease_check), "-L", "vgpu:1")
    started(slurm, j)
    assert len(job_leases(pool, j)) == 1
    slurm.cmd("scancel", j)
    took = no_leases_of(pool, j)
    assert took <= LEASE_TTL, took                     # EpilogSlurmctld gives it back, well within its ttl
    assert slurm.wait_state(j, "CANCELLED")["JobState"] == "CANCELLED"
    print(f"lease of a cancelled job given back {took:.2f} s after scancel")


def test_a_job_whose_node_dies_loses_its_lease_on_expiry(slurm, pool, lease_check):
    """The node's slurmd, the job's slurmstepd and tasks and pyvgpu's keeper die at once: nobody renews the lease and
    it expires within LeaseTTL, while Slurm (SlurmdTimeout 300 s) still thinks the job runs. Then the node comes
    back and Slurm ends the job."""
    j = slurm.submit(slurm.job_script(lease_check), "-L", "vgpu:1", "--no-requeue")
    started(slurm, j)
    lease = job_leases(pool, j)
    assert len(lease) == 1 and lease[0]["ttl"] == 30.0
    keeper = slurm.state_dir / f"job-{j}.keeper"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and lease[0]["expires_in"] > LEASE_TTL:    # the keeper took it down to 3 s
        time.sleep(0.2)
        lease = job_leases(pool, j)
    assert keeper.exists() and lease[0]["expires_in"] <= LEASE_TTL, lease
    killed = slurm.kill_node(j)
    assert len(killed) >= 3                            # keeper, slurmstepd and the task(s), slurmd
    took = no_leases_of(pool, j, timeout=LEASE_TTL + 5)
    assert took <= LEASE_TTL + 1.0, took
    assert slurm.job(j)["JobState"] == "RUNNING"       # Slurm has not noticed: the lease expired on its own
    daemon = next(d for d in pool if d.address == lease[0]["daemon"])
    assert f"lease {lease[0]['tag']} (slurm job {j} (root)) held GPU 0 exclusively: expired" in daemon.log_text()
    print(f"lease of a job on a dead node expired {took:.2f} s after the node died (LeaseTTL {LEASE_TTL:g} s)")
    # the node comes back and the operator ends the job (Slurm would, after SlurmdTimeout): the cluster works again
    slurm.start_slurmd()
    slurm.cmd("scancel", j)
    slurm.wait_state(j, "CANCELLED", "FAILED", "NODE_FAIL", timeout=60)
    slurm.wait_until(lambda: slurm.node_state() == "idle", 60, "the node to come back")
