"""Interference-aware placement (pyvgpu/placement.py): the model's decisions on synthetic loads, then
`pyvgpu run -n N --explain` against emulated GPUs under real loads (idle beats busy; between two busy GPUs the one
whose residents interfere least wins; a GPU without enough free memory is never chosen), and `pyvgpu devices` /
`pyvgpu top` showing those loads."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from pyvgpu import placement
from pyvgpu.client import Client
from pyvgpu.hostmap import Host
from pyvgpu.placement import Candidate

GiB, MiB = 1 << 30, 1 << 20


def cand(name: str, busy: float = 0.0, active: int = 0, slowdown: float | None = None, free: int = 4 * GiB,
         order: int = 0, limit: int = 4 * GiB) -> Candidate:
    return Candidate(Host(name, 7700), 0, order, "emu", 4 * GiB, free, limit, busy, active, active, slowdown)


def chosen_names(cands, n=1, memory=0):
    chosen, _ = placement.rank(cands, n, memory)
    return [c.candidate.host.host for c in chosen]


def test_idle_beats_busy():
    busy = cand("busy", busy=0.9, active=1)
    idle = cand("idle", order=1)
    assert chosen_names([busy, idle]) == ["idle"]
    assert placement.predict(idle) == (1.0, 0.0)
    own, others = placement.predict(busy)
    assert own == pytest.approx(1.9) and others == pytest.approx(0.9)
    # an idle GPU with residents that do nothing right now is as good as an empty one
    assert placement.predict(cand("quiet", busy=0.0, active=0)) == (1.0, 0.0)


def test_between_busy_gpus_less_interference_wins():
    heavy = cand("heavy", busy=0.95, active=2, slowdown=2.6)     # residents slow each other 2.6x
    light = cand("light", busy=0.95, active=2, slowdown=1.2, order=1)
    assert chosen_names([heavy, light]) == ["light"]
    assert chosen_names([heavy, light], n=2) == ["light", "heavy"]
    # more busy residents predict more slowdown, for the program and for them
    assert placement.predict(cand("x", busy=1.0, active=3))[0] > placement.predict(cand("y", busy=1.0, active=1))[0]


def test_memory_filter_is_absolute():
    idle_small = cand("idle-full", free=512 * MiB)
    busy_roomy = cand("busy", busy=1.0, active=4, slowdown=4.0, order=1)
    limited = cand("limited", limit=256 * MiB, order=2)           # free, but the per-session limit is too low
    assert chosen_names([idle_small, busy_roomy, limited], n=1, memory=1 * GiB) == ["busy"]
    chosen, every = placement.rank([idle_small, busy_roomy, limited], n=3, memory=1 * GiB)
    assert len(chosen) == 1
    lines = [placement.explain(ch, 1 * GiB) for ch in every]
    assert "not eligible (free memory below the 1.0 GiB asked)" in lines[0]
    assert "chosen as GPU0" in lines[1] and "measured sharing slowdown 4.00x" in lines[1]
    assert "not eligible (the per-session limit below the 1.0 GiB asked)" in lines[2]


def test_ties_go_to_free_memory_then_pool_order():
    a, b, c = cand("a", free=2 * GiB), cand("b", free=3 * GiB, order=1), cand("c", free=3 * GiB, order=2)
    assert chosen_names([a, b, c], n=3) == ["b", "c", "a"]


def test_candidates_from_status():
    status = {"devices": [{"name": "g0", "total_mem": 4 * GiB}, {"name": "g1", "total_mem": 8 * GiB}],
              "device_usage": [{"device": 0, "memory_free": 1 * GiB, "busy_ratio": 0.5, "active_sessions": 1,
                                "sessions": 2, "slowdown": 1.5, "session_memory_limit": 2 * GiB},
                               {"device": 1, "memory": 0}]}
    cs = placement.candidates_from_status(Host("h", 1), status, start=3)
    assert [(c.ordinal, c.order, c.free, c.session_limit, c.busy, c.slowdown) for c in cs] == \
        [(0, 3, 1 * GiB, 2 * GiB, 0.5, 1.5), (1, 4, 8 * GiB, 8 * GiB, 0.0, None)]
    only = placement.candidates_from_status(Host("h", 1, 1), status, only=1)
    assert [c.label for c in only] == ["h:1/1"]


# ---------------------------------------------------------------------------------------------- end to end
class Load:
    """Background device work on one emulated GPU: `heavy` sessions flooding 16 MiB memsets, `light` sessions
    doing a tiny memset every 5 ms, and optionally memory held by an idle session."""

    def __init__(self, port: int, dev: int, heavy: int = 0, light: int = 0, hold: int = 0) -> None:
        self.stop = threading.Event()
        self.clients: list[Client] = []
        self.threads: list[threading.Thread] = []
        for kind, count in (("heavy", heavy), ("light", light)):
            for _ in range(count):
                c = Client.connect("127.0.0.1", port, timeout=60)
                self.clients.append(c)
                self.threads.append(threading.Thread(target=getattr(self, kind), args=(c, dev), daemon=True))
        if hold:
            c = Client.connect("127.0.0.1", port, timeout=60)
            self.clients.append(c)
            assert c.call("MALLOC", dev, hold)[0] == 0

    def heavy(self, c: Client, dev: int) -> None:
        p = c.call("MALLOC", dev, 16 * MiB)[1]
        while not self.stop.is_set():
            for _ in range(8):
                c.call("MEMSET", dev, p, 1, 16 * MiB, 0, reply=False)
            c.call("DEVICE_SYNC", dev)

    def light(self, c: Client, dev: int) -> None:
        p = c.call("MALLOC", dev, 4096)[1]
        while not self.stop.is_set():
            c.call("MEMSET", dev, p, 1, 4096, 0, reply=False)
            c.call("DEVICE_SYNC", dev)
            time.sleep(0.005)

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
        for c in self.clients:
            c.close()


def pyvgpu(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyvgpu.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_run_places_by_load_interference_and_memory(daemon_factory, tmp_path):
    """Four emulated GPUs: 0 busy with two heavy residents (they slow each other), 1 busy with one heavy and one
    light resident, 2 idle, 3 idle but nearly full. `pyvgpu run -n N --share 0.25 --memory 128M` (shares: the
    residents hold no lease, so no GPU but 2 could be leased whole) chooses 2, then 1, then 0; 3 never; and the
    program sees the choice in PYVGPU_HOSTS (and its memory request in PYVGPU_MEMORY)."""
    d = daemon_factory("--emu-devices", "4", "--emu-memory", "256M")
    loads = [Load(d.port, 0, heavy=2).start(), Load(d.port, 1, heavy=1, light=1).start(),
             Load(d.port, 3, hold=200 * MiB)]
    try:
        time.sleep(2.5)
        show = "echo HOSTS=$PYVGPU_HOSTS MEMORY=$PYVGPU_MEMORY WEIGHT=$PYVGPU_WEIGHT"
        env = {"XDG_CONFIG_HOME": str(tmp_path)}
        r1 = pyvgpu("run", "--hosts", d.address, "-n", "1", "--share", "0.25", "--memory", "128M", "--weight", "2",
                    "--explain", "--", "sh", "-c", show, env=env)
        r3 = pyvgpu("run", "--hosts", d.address, "-n", "3", "--share", "0.25", "--memory", "128M", "--explain", "--",
                    "sh", "-c", show, env=env)
        r4 = pyvgpu("run", "--hosts", d.address, "-n", "4", "--share", "0.25", "--memory", "128M", "--no-wait", "--",
                    "true", env=env)
        devs = pyvgpu("devices", "--hosts", d.address, env=env)
        top = pyvgpu("top", "--hosts", d.address, "--iterations", "2", "--interval", "0.5", env=env)
    finally:
        for load in loads:
            load.close()
    assert r1.returncode == 0, r1.stderr
    assert r1.stdout.strip() == f"HOSTS={d.address}/2 MEMORY={128 * MiB} WEIGHT=2.0"
    explain = [ln for ln in r1.stderr.splitlines() if "placement: " in ln]
    assert len(explain) == 4, r1.stderr
    assert "chosen as GPU0" in explain[2] and "not eligible (free memory" in explain[3]
    assert r3.returncode == 0, r3.stderr
    assert r3.stdout.strip().startswith(f"HOSTS={d.address}/2,{d.address}/1,{d.address}/0 "), r3.stderr
    busy = [float(ln.split("busy ")[1].split(",")[0]) for ln in r3.stderr.splitlines() if "placement:" in ln]
    # A heavy resident keeps its GPU busy only while its client thread gets a core: on a loaded 2-core machine
    # GPU1's share read 0.45-0.62, so the bound says "clearly busy", not a fixed duty cycle.
    assert busy[0] > 0.3 and busy[1] > 0.3 and busy[2] < 0.2, r3.stderr
    slow = [ln.split("measured sharing slowdown ")[1].split(",")[0] for ln in r3.stderr.splitlines()
            if "placement:" in ln]
    # Two heavy residents slow each other at least as much as a heavy and a light one. On a loaded machine the light
    # resident's client thread also waits for a core, so the two readings come out close (4.10 against 4.13, 3.50
    # against 3.58 at load 11-12): they are compared within 10 %, and the choice order asserted above is what matters.
    assert float(slow[0].rstrip("x")) >= 0.9 * float(slow[1].rstrip("x")), r3.stderr
    assert r4.returncode == 1 and "4 share(s) of 0.25 GPU with 128.0 MiB free asked, 3 of the pool's 4 GPU(s) free" \
        in r4.stderr and f"{d.address}/3 (too little memory)" in r4.stderr, r4.stderr
    # pyvgpu devices shows the same loads
    assert devs.returncode == 0, devs.stderr
    rows = {ln.split()[0]: ln for ln in devs.stdout.splitlines()[1:]}
    assert "200.0 MiB" in rows["GPU3"] and "0.00" in rows["GPU2"]
    assert float(rows["GPU0"].split()[9]) > 0.5            # BUSY column of GPU0
    # pyvgpu top: two frames with the devices, sessions and their rates
    assert top.returncode == 0, top.stderr
    frames = top.stdout.split("pyvgpu top - ")
    assert len(frames) == 3 and "(rates from the next refresh)" in frames[1]
    second = frames[2]
    assert "MEMSET" in second and "DEVICE%" in second and "SLOWDOWN" in second
    pcts = [int(tok[:-1]) for ln in second.splitlines() if f"{d.address}/0" in ln
            for tok in ln.split() if tok.endswith("%")]
    assert len(pcts) == 2 and all(20 <= p <= 80 for p in pcts), second   # the two heavy residents share GPU 0


def test_auto_entry_in_the_host_map(daemon_factory, tmp_path):
    a = daemon_factory("--emu-devices", "2")
    cfg = tmp_path / "cfg"
    (cfg / "pyvgpu").mkdir(parents=True)
    (cfg / "pyvgpu" / "hosts").write_text(f"{a.address}/1\nauto\n")
    r = pyvgpu("run", "--", "sh", "-c", "echo $PYVGPU_HOSTS", env={"XDG_CONFIG_HOME": str(cfg)})
    assert r.returncode == 0 and r.stdout.strip() == f"{a.address}/1", r.stderr    # the pool is the other entries
    (cfg / "pyvgpu" / "hosts").write_text("auto:2\n")
    r = pyvgpu("run", "--", "true", env={"XDG_CONFIG_HOME": str(cfg)})
    assert r.returncode == 1 and "placement needs a pool" in r.stderr
    r = pyvgpu("run", "--hosts", a.address, "-n", "0", "--", "true")
    assert r.returncode == 2 and "-n must be at least 1" in r.stderr
