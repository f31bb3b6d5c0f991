#!/usr/bin/env python3
"""Device-to-host copies through the cuda backend with and without its pinned staging (backends/cuda_staging.py),
side by side in one run.

    python bench/d2h_bench.py [--backend cuda|chain] [--size BYTES] [--iters N] [--rounds R] [--out results.json]

Two `--backend cuda` daemons on the same device: one as shipped, one with the staging pool emptied
(StagingPool.BUFFERS = 0: replies copied into pageable memory and sent from there). `bench/cuda/bandwidth.cu bw d2h`
(libvcudart, pinned and pageable host memory) times each cudaMemcpy D2H; rounds alternate the two daemons (ABAB, then
BABA), medians over all copies. On a machine without a GPU the backend runs on the chain (pyvgpu's libcuda.so.1 over
an emulated daemon): that checks the path, not the GPU's figure, since the chain's own copies dominate there.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (LOOPBACK, Daemon, chain_env, free_port, interposer_env, start_daemon,  # noqa: E402
                     wait_listening)
from remoting_bench import build  # noqa: E402

# The daemon's own entry point after emptying the staging pool (the baseline).
NO_STAGING = ("import runpy, sys; from pyvgpu_daemon.backends.cuda_staging import StagingPool; "
              "StagingPool.BUFFERS = 0; runpy.run_module('pyvgpu_daemon', run_name='__main__', alter_sys=True)")


def start_cuda(workdir: Path, staging: bool, env: dict[str, str]) -> Daemon:
    port = free_port()
    log = workdir / f"daemon-{'staging' if staging else 'pageable'}-{port}.log"
    head = [sys.executable, "-m", "pyvgpu_daemon"] if staging else [sys.executable, "-c", NO_STAGING]
    with open(log, "wb") as fh:
        proc = subprocess.Popen([*head, "--backend", "cuda", "--host", LOOPBACK, "--port", str(port)],
                                stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env})
    wait_listening(proc, port, log, timeout=60)
    return Daemon(port, proc, log, backend="cuda")


def gpu_present() -> bool:
    from pyvgpu_daemon.backends.cuda import probe   # noqa: PLC0415
    return probe()[0] > 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("cuda", "chain"), default=None,
                    help="cuda: the machine's GPU (default when there is one); chain: pyvgpu's driver over an "
                         "emulated daemon")
    ap.add_argument("--size", type=int, default=256 << 20, help="bytes per copy (default 256 MiB)")
    ap.add_argument("--iters", type=int, default=3, help="timed copies per program run (default 3)")
    ap.add_argument("--rounds", type=int, default=4, help="program runs per daemon and host memory kind (default 4)")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    a = ap.parse_args()
    backend = a.backend or ("cuda" if gpu_present() else "chain")
    program, _ = build()
    work = Path(tempfile.mkdtemp(prefix="d2h-bench-"))
    under: list[Daemon] = []
    daemons: dict[str, Daemon] = {}
    try:
        env: dict[str, str] = {"LD_PRELOAD": ""}
        if backend == "chain":
            under.append(start_daemon(work, "--emu-memory", str(4 * a.size + (256 << 20))))
            env.update(chain_env(under[0]))
        daemons = {"staging": start_cuda(work, True, env), "pageable": start_cuda(work, False, env)}
        ns: dict[tuple[str, str], list[int]] = {}
        for r in range(a.rounds):
            for host in ("pinned", "pageable"):
                order = ("staging", "pageable") if r % 2 == 0 else ("pageable", "staging")
                for which in order:
                    proc = subprocess.run([str(program), "bw", "d2h", host, str(a.size), str(a.iters)],
                                          capture_output=True, text=True, timeout=600,
                                          env={**os.environ, **interposer_env([daemons[which]])})
                    if proc.returncode != 0:
                        raise RuntimeError(f"{which} {host}: exit {proc.returncode}: {proc.stderr[-500:]}")
                    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("bw "))
                    ns.setdefault((which, host), []).extend(int(w) for w in line.split()[1:])
        rows = []
        for host in ("pinned", "pageable"):
            gbs = {w: a.size / statistics.median(ns[(w, host)]) for w in ("staging", "pageable")}
            rows.append({"host": host, "size": a.size, "staging_GBps": round(gbs["staging"], 3),
                         "pageable_GBps": round(gbs["pageable"], 3),
                         "ratio": round(gbs["staging"] / gbs["pageable"], 3), "copies": len(ns[("staging", host)])})
        print(f"D2H through the cuda backend ({backend}), {a.size >> 20} MiB copies, medians of "
              f"{rows[0]['copies']} copies each")
        print("| client host memory | staged (pinned) GB/s | pageable GB/s | ratio |")
        print("|---|---:|---:|---:|")
        for row in rows:
            print(f"| {row['host']} | {row['staging_GBps']} | {row['pageable_GBps']} | {row['ratio']} |")
        if a.out:
            a.out.write_text(json.dumps({"backend": backend, "rows": rows}, indent=1))
        return 0
    finally:
        for d in (*daemons.values(), *under):
            d.stop()


if __name__ == "__main__":
    sys.exit(main())
