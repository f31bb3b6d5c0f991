"""Remoting benchmark: pyvgpu (libvcudart → emulated-GPU daemon) against raw TCP on the same loopback, side by side.

    python bench/remoting_bench.py [--quick] [--out results.json]

Every figure is a ratio of two measurements taken in the same run, interleaved (for each round: A then B, next
round B then A), so a noisy shared machine shifts both sides alike. Medians over all samples of all rounds.

* bandwidth: `bench/cuda/bandwidth.cu` (nvcc -cudart shared, std::chrono) times cudaMemcpy H2D (followed by
  cudaDeviceSynchronize: pyvgpu sends host-to-device data fire-and-forget) and D2H, pinned (cudaMallocHost) and
  pageable host memory, through libvcudart against `python -m pyvgpu_daemon --backend emu`. The baseline is
  `bench/cuda/rawtcp.c` (C, not Python): one request + one reply moving the same bytes on a TCP_NODELAY socket,
  received straight into the destination buffer. Ratio = pyvgpu GB/s / raw GB/s.
* latency: cudaMemGetInfo and cudaStreamQuery round trips (p50, p99) vs a 32-byte raw TCP ping-pong.
* fire-and-forget: empty-kernel launches, cudaMemsetAsync(4 B), cudaEventRecord per second (enqueue rate) and the
  final cudaDeviceSynchronize (the daemon draining the queue) vs raw TCP: the same number of 48-byte frames with no
  reply, then one ping.
* aggregate (optional, --aggregate): two daemons, two host threads (one per GPU) copying at once, vs two raw TCP
  clients on two servers at once.
* TLS (optional, --tls): the bandwidth copies through a daemon with TLS (a self-signed certificate, pinned by the
  client) against the same copies through a plain daemon, interleaved; both daemons `--compress off`, so the figure
  is the transport's. Ratio = TLS GB/s / plain GB/s. Also the CPU time per byte copied of each daemon (from
  /proc/PID/stat) and of the client processes (getrusage of children), every byte the runs moved counted (warm-up
  and the initial copy included): on a shared machine the CPU a byte costs is steadier than the wall-clock rate.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from harness import (LOOPBACK, NVCC, Daemon, cached_build, free_port, interposer_env,  # noqa: E402
                     start_daemon, stop_process, wait_listening)

SRC = Path(__file__).resolve().parent / "cuda"
BUILD = ROOT / "build" / "bench-remoting"
CC = shutil.which("cc") or shutil.which("gcc") or "cc"

KiB, MiB = 1 << 10, 1 << 20
FULL_SIZES = (64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB)
QUICK_SIZES = (64 * KiB, 1 * MiB)
FF_FRAME = 48     # bytes of one raw fire-and-forget frame (a LAUNCH / MEMSET request is about this size)
PING = 32         # bytes each way of the raw ping-pong


def iters_for(size: int, quick: bool) -> int:
    """Copies per process run: about 50–200 ms of copying per run on this machine."""
    n = 64 if size <= 64 * KiB else 16 if size <= MiB else 4 if size <= 16 * MiB else 2
    return max(1, n // 4) if quick else n


def build() -> tuple[Path, Path]:
    cuda = cached_build(BUILD, "bandwidth", [SRC / "bandwidth.cu"],
                        lambda o: [NVCC, "-cudart", "shared", "-O3", "-o", str(o), str(SRC / "bandwidth.cu")])
    raw = cached_build(BUILD, "rawtcp", [SRC / "rawtcp.c"], lambda o: [CC, "-O2", "-o", str(o), str(SRC / "rawtcp.c")])
    return cuda, raw


class Servers:
    """The emulated-GPU daemons and raw TCP servers of one run (stopped on exit)."""

    def __init__(self, raw_bin: Path, count: int, workdir: Path, tls: bool = False):
        self.daemons: list[Daemon] = []
        self.raw_procs: list[subprocess.Popen] = []
        self.raws: list[int] = []
        self.tls: tuple[Daemon, Daemon, str] | None = None     # (plain, TLS, the TLS daemon's fingerprint)
        try:
            for _ in range(count):
                self.daemons.append(start_daemon(workdir))
                self.raws.append(self._start_raw(raw_bin, workdir))
            if tls:
                from pyvgpu.tls import make_self_signed
                fp = make_self_signed(workdir / "tls.crt", workdir / "tls.key", [LOOPBACK])
                plain = start_daemon(workdir, "--compress", "off")
                self.daemons.append(plain)
                secure = start_daemon(workdir, "--compress", "off", "--tls-cert", str(workdir / "tls.crt"),
                                      "--tls-key", str(workdir / "tls.key"))
                self.daemons.append(secure)
                self.tls = (plain, secure, fp)
        except BaseException:
            self.close()
            raise

    def _start_raw(self, raw_bin: Path, workdir: Path) -> int:
        port = free_port()
        log = workdir / f"rawtcp-{port}.log"
        with open(log, "wb") as fh:
            p = subprocess.Popen([str(raw_bin), "server", str(port)], stdout=fh, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.raw_procs.append(p)
        wait_listening(p, port, log, what="rawtcp server")
        return port

    def close(self) -> None:
        for d in self.daemons:
            d.stop()
        for p in self.raw_procs:
            stop_process(p, group=True)   # its own group: the server and its per-connection children


def run_lines(cmd: list[str], env: dict | None = None, timeout: float = 600) -> dict[str, list[int]]:
    """Run a benchmark program; {first word of each line: the integers after it}."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    out: dict[str, list[int]] = {}
    for line in proc.stdout.splitlines():
        words = line.split()
        if words:
            out.setdefault(words[0], []).extend(int(w) for w in words[1:])
    return out


def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


class Bench:
    def __init__(self, cuda: Path, raw: Path, servers: Servers):
        self.cuda, self.raw, self.servers = cuda, raw, servers
        import pyvgpu
        self.lib = os.environ.get("PYVGPU_BENCH_LIB") or str(pyvgpu.lib_path())   # another build to compare

    def env(self, daemons: list[Daemon]) -> dict:
        return {**os.environ, **interposer_env(daemons, self.lib)}

    def pv(self, *args) -> dict[str, list[int]]:
        return run_lines([str(self.cuda), *map(str, args)], env=self.env(self.servers.daemons[:1]))

    def rt(self, *args, port: int | None = None) -> dict[str, list[int]]:
        return run_lines([str(self.raw), "client", str(port or self.servers.raws[0]), *map(str, args)])


def interleave(rounds: int, a, b) -> None:
    """ABAB…: A then B on even rounds, B then A on odd ones."""
    for r in range(rounds):
        for f in ((a, b) if r % 2 == 0 else (b, a)):
            f()


def bench_bandwidth(bn: Bench, sizes, rounds: int, quick: bool, log) -> list[dict]:
    rows = []
    for size in sizes:
        n = iters_for(size, quick)
        for direction in ("h2d", "d2h"):
            raw: list[int] = []
            pv = {"pinned": [], "pageable": []}
            for r in range(rounds):
                # per round: pinned, pageable and raw in a rotating order
                order = [("pinned",), ("pageable",), ("raw",)]
                order = order[r % 3:] + order[:r % 3]
                for (what,) in order:
                    if what == "raw":
                        raw += bn.rt(direction, size, n)["bw"]
                    else:
                        pv[what] += bn.pv("bw", direction, what, size, n)["bw"]
            raw_gbs = size / statistics.median(raw)
            for mem in ("pinned", "pageable"):
                gbs = size / statistics.median(pv[mem])
                row = {"direction": direction, "memory": mem, "bytes": size, "samples": len(pv[mem]),
                       "pyvgpu_median_us": statistics.median(pv[mem]) / 1e3, "pyvgpu_GBps": gbs,
                       "raw_median_us": statistics.median(raw) / 1e3, "raw_GBps": raw_gbs, "raw_samples": len(raw),
                       "ratio": gbs / raw_gbs}
                rows.append(row)
                log(f"  {direction} {mem:8s} {size >> 10:>7} KiB  pyvgpu {gbs:6.3f} GB/s  raw {raw_gbs:6.3f} GB/s"
                    f"  ratio {row['ratio']:.3f}")
    return rows


def bench_latency(bn: Bench, iters: int, rounds: int, log) -> list[dict]:
    pv = {"meminfo": [], "streamquery": []}
    raw: list[int] = []

    def a():
        out = bn.pv("lat", iters)
        for k in pv:
            pv[k] += out[k]

    def b():
        raw.extend(bn.rt("ping", PING, iters)["bw"])

    interleave(rounds, a, b)
    rows = []
    rp50, rp99 = pct(raw, 50) / 1e3, pct(raw, 99) / 1e3
    for name, call in (("meminfo", "cudaMemGetInfo"), ("streamquery", "cudaStreamQuery")):
        p50, p99 = pct(pv[name], 50) / 1e3, pct(pv[name], 99) / 1e3
        rows.append({"call": call, "samples": len(pv[name]), "pyvgpu_p50_us": p50, "pyvgpu_p99_us": p99,
                     "raw_p50_us": rp50, "raw_p99_us": rp99, "raw_samples": len(raw),
                     "ratio_p50": p50 / rp50, "ratio_p99": p99 / rp99})
        log(f"  {call:16s} p50 {p50:7.1f} us p99 {p99:8.1f} us   raw ping p50 {rp50:6.1f} p99 {rp99:7.1f}"
            f"  ratio p50 {p50 / rp50:.2f} p99 {p99 / rp99:.2f}")
    return rows


def bench_fire_and_forget(bn: Bench, iters: int, rounds: int, log) -> list[dict]:
    pv: dict[str, list[tuple[int, int]]] = {"kernel": [], "memset4": [], "event": []}
    raw: list[tuple[int, int]] = []

    def a():
        out = bn.pv("launch", iters)
        for k in pv:
            pv[k].append(tuple(out[k]))

    def b():
        raw.append(tuple(bn.rt("ff", FF_FRAME, iters)["ff"]))

    interleave(rounds, a, b)
    raw_enq = statistics.median(e for e, _ in raw)
    raw_sync = statistics.median(s for _, s in raw)
    rows = []
    for kind, call in (("kernel", "empty kernel <<<1,1>>>"), ("memset4", "cudaMemsetAsync 4 B"),
                       ("event", "cudaEventRecord")):
        enq = statistics.median(e for e, _ in pv[kind])
        sync = statistics.median(s for _, s in pv[kind])
        rate, raw_rate = iters / (enq / 1e9), iters / (raw_enq / 1e9)
        total_rate = iters / ((enq + sync) / 1e9)
        raw_total = iters / ((raw_enq + raw_sync) / 1e9)
        rows.append({"op": call, "per_run": iters, "runs": len(pv[kind]),
                     "pyvgpu_enqueue_per_s": rate, "pyvgpu_sync_ms": sync / 1e6,
                     "pyvgpu_completed_per_s": total_rate,
                     "raw_send_per_s": raw_rate, "raw_sync_ms": raw_sync / 1e6, "raw_completed_per_s": raw_total,
                     "ratio_enqueue": rate / raw_rate, "ratio_completed": total_rate / raw_total})
        log(f"  {call:24s} enqueue {rate:9.0f}/s  sync {sync / 1e6:8.2f} ms  completed {total_rate:8.0f}/s"
            f"   raw send {raw_rate:9.0f}/s  sync {raw_sync / 1e6:6.2f} ms  completed {raw_total:9.0f}/s")
    return rows


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_tls(bn: Bench, sizes, rounds: int, quick: bool, log) -> list[dict]:
    """The bandwidth copies through the TLS daemon against the plain one (both --compress off), interleaved; with
    the CPU time per byte of each daemon and of the client processes."""
    assert bn.servers.tls is not None
    plain, secure, fp = bn.servers.tls
    rows = []
    for size in sizes:
        n = iters_for(size, quick)
        for direction in ("h2d", "d2h"):
            for mem in ("pinned", "pageable"):
                got: dict[str, list[int]] = {"plain": [], "tls": []}
                cpu = {k: {"daemon": 0.0, "client": 0.0, "bytes": 0} for k in got}

                def side(key: str, d: Daemon, extra: dict) -> None:
                    assert d.proc is not None
                    d0, c0 = cpu_seconds(d.proc.pid), children_cpu_seconds()
                    got[key] += run_lines([str(bn.cuda), "bw", direction, mem, str(size), str(n)],
                                          env={**bn.env([d]), **extra})["bw"]
                    cpu[key]["daemon"] += cpu_seconds(d.proc.pid) - d0
                    cpu[key]["client"] += children_cpu_seconds() - c0
                    cpu[key]["bytes"] += (n + 2) * size      # timed copies, the warm-up and the initial H2D

                interleave(rounds, lambda: side("plain", plain, {}),
                           lambda: side("tls", secure, {"PYVGPU_TLS_FINGERPRINT": fp}))
                plain_gbs = size / statistics.median(got["plain"])
                tls_gbs = size / statistics.median(got["tls"])
                per_byte = {f"{k}_{who}_cpu_ns_per_B": cpu[k][who] / cpu[k]["bytes"] * 1e9
                            for k in cpu for who in ("daemon", "client")}
                rows.append({"direction": direction, "memory": mem, "bytes": size, "samples": len(got["tls"]),
                             "plain_GBps": plain_gbs, "tls_GBps": tls_gbs, "ratio": tls_gbs / plain_gbs,
                             **per_byte})
                log(f"  {direction} {mem:8s} {size >> 10:>7} KiB  TLS {tls_gbs:6.3f} GB/s  plain {plain_gbs:6.3f} GB/s"
                    f"  ratio {tls_gbs / plain_gbs:.3f}  CPU ns/B daemon {per_byte['tls_daemon_cpu_ns_per_B']:.2f}"
                    f" (plain {per_byte['plain_daemon_cpu_ns_per_B']:.2f}) client"
                    f" {per_byte['tls_client_cpu_ns_per_B']:.2f} (plain {per_byte['plain_client_cpu_ns_per_B']:.2f})")
    return rows


def bench_aggregate(bn: Bench, size: int, iters: int, rounds: int, log) -> list[dict]:
    """Two daemons / two raw servers at once: per direction, pyvgpu from one process with two threads (one per
    GPU, `bandwidth bw2`), raw from two concurrent client processes. Aggregate GB/s = 2 × bytes / wall."""
    rows = []
    for direction in ("h2d", "d2h"):
        pv_w: list[float] = []
        raw_w: list[float] = []

        def a():
            out = run_lines([str(bn.cuda), "bw2", direction, "pinned", str(size), str(iters)],
                            env=bn.env(bn.servers.daemons[:2]))
            pv_w.append(out["bw2"][0])

        def b():
            res: list[list[int]] = [[], []]
            ths = [threading.Thread(target=lambda i=i: res[i].extend(bn.rt(direction, size, iters,
                                                                          port=bn.servers.raws[i])["bw"]))
                   for i in range(2)]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            # each client's own copy time (process start-up excluded); the two ran concurrently
            raw_w.append(max(sum(res[0]), sum(res[1])))

        interleave(rounds, a, b)
        gbs = 2 * size * iters / statistics.median(pv_w)
        raw_gbs = 2 * size * iters / statistics.median(raw_w)
        rows.append({"direction": direction, "bytes": size, "per_thread_copies": iters, "runs": len(pv_w),
                     "pyvgpu_GBps": gbs, "raw_GBps": raw_gbs, "ratio": gbs / raw_gbs})
        log(f"  2 daemons {direction} {size >> 20} MiB  pyvgpu {gbs:6.3f} GB/s  raw {raw_gbs:6.3f} GB/s"
            f"  ratio {gbs / raw_gbs:.3f}")
    return rows


def machine() -> dict:
    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "python": platform.python_version(),
            "loadavg": [round(x, 2) for x in load]}


def table(res: dict) -> str:
    out: list[str] = []
    if res["bandwidth"]:
        out += ["Bandwidth (median per copy; ratio = pyvgpu GB/s / raw TCP GB/s)", "",
                "| dir | host memory | size | pyvgpu GB/s | raw TCP GB/s | ratio |", "|---|---|---:|---:|---:|---:|"]
    for r in res["bandwidth"]:
        sz = f"{r['bytes'] >> 20} MiB" if r["bytes"] >= MiB else f"{r['bytes'] >> 10} KiB"
        out.append(f"| {r['direction'].upper()} | {r['memory']} | {sz} | {r['pyvgpu_GBps']:.3f} | "
                   f"{r['raw_GBps']:.3f} | {r['ratio']:.2f} |")
    if res["latency"]:
        out += ["", f"Small synchronous calls vs a {PING}-byte raw TCP ping-pong (µs)", "",
                "| call | pyvgpu p50 | pyvgpu p99 | raw p50 | raw p99 | ratio p50 | ratio p99 |",
                "|---|---:|---:|---:|---:|---:|---:|"]
    for r in res["latency"]:
        out.append(f"| {r['call']} | {r['pyvgpu_p50_us']:.1f} | {r['pyvgpu_p99_us']:.1f} | {r['raw_p50_us']:.1f} | "
                   f"{r['raw_p99_us']:.1f} | {r['ratio_p50']:.2f} | {r['ratio_p99']:.2f} |")
    ff = res["fire_and_forget"]
    if ff:
        n = ff[0]["per_run"]
        out += ["", f"Fire-and-forget, {n} ops then one cudaDeviceSynchronize (raw: {n} {FF_FRAME}-byte frames, "
                    "then one ping); medians over runs", "",
                "| op | pyvgpu enqueue /s | pyvgpu final sync ms | pyvgpu completed /s | raw send /s | "
                "raw final ping ms | raw completed /s | ratio enqueue | ratio completed |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in ff:
            out.append(f"| {r['op']} | {r['pyvgpu_enqueue_per_s']:,.0f} | {r['pyvgpu_sync_ms']:.1f} | "
                       f"{r['pyvgpu_completed_per_s']:,.0f} | {r['raw_send_per_s']:,.0f} | {r['raw_sync_ms']:.2f} | "
                       f"{r['raw_completed_per_s']:,.0f} | {r['ratio_enqueue']:.2f} | {r['ratio_completed']:.3f} |")
    if res.get("aggregate"):
        out += ["", "Two daemons from two threads (pinned, aggregate GB/s)", "",
                "| dir | size | pyvgpu GB/s | raw TCP GB/s | ratio |", "|---|---:|---:|---:|---:|"]
        for r in res["aggregate"]:
            out.append(f"| {r['direction'].upper()} | {r['bytes'] >> 20} MiB | {r['pyvgpu_GBps']:.3f} | "
                       f"{r['raw_GBps']:.3f} | {r['ratio']:.2f} |")
    if res.get("tls"):
        out += ["", "TLS against plain TCP, same copies (daemons --compress off; ratio = TLS GB/s / plain GB/s; CPU "
                "ns per byte copied, TLS (plain))", "",
                "| dir | host memory | size | TLS GB/s | plain GB/s | ratio | daemon CPU ns/B | client CPU ns/B |",
                "|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in res["tls"]:
            sz = f"{r['bytes'] >> 20} MiB" if r["bytes"] >= MiB else f"{r['bytes'] >> 10} KiB"
            out.append(f"| {r['direction'].upper()} | {r['memory']} | {sz} | {r['tls_GBps']:.3f} | "
                       f"{r['plain_GBps']:.3f} | {r['ratio']:.2f} | {r['tls_daemon_cpu_ns_per_B']:.2f} "
                       f"({r['plain_daemon_cpu_ns_per_B']:.2f}) | {r['tls_client_cpu_ns_per_B']:.2f} "
                       f"({r['plain_client_cpu_ns_per_B']:.2f}) |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="64 KiB and 1 MiB only, fewer rounds and iterations")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], help="copy sizes in bytes, comma list")
    ap.add_argument("--rounds", type=int, help="interleaved rounds per measurement (default 6, quick 2)")
    ap.add_argument("--lat-iters", type=int, help="calls per latency run (default 2000, quick 200)")
    ap.add_argument("--ff-iters", type=int, help="ops per fire-and-forget run (default 2000, quick 200)")
    ap.add_argument("--aggregate", action="store_true", help="also two daemons from two threads (16 MiB copies)")
    ap.add_argument("--tls", action="store_true", help="also the bandwidth copies over TLS against plain TCP")
    ap.add_argument("--only", choices=("bandwidth", "latency", "ff", "tls"), action="append",
                    help="run only these parts (repeatable; --only tls implies --tls)")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    a = ap.parse_args(argv)
    quick = a.quick
    sizes = a.sizes or (QUICK_SIZES if quick else FULL_SIZES)
    rounds = a.rounds or (2 if quick else 6)
    lat_iters = a.lat_iters or (200 if quick else 2000)
    ff_iters = a.ff_iters or (200 if quick else 2000)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cuda, raw = build()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pyvgpu-bench-") as tmp:
        only = set(a.only or ("bandwidth", "latency", "ff"))
        tls = a.tls or "tls" in only
        if tls:
            only.add("tls")
        servers = Servers(raw, 2 if a.aggregate else 1, Path(tmp), tls=tls)
        try:
            bn = Bench(cuda, raw, servers)
            res: dict = {"config": {"quick": quick, "sizes": list(sizes), "rounds": rounds, "lat_iters": lat_iters,
                                    "ff_iters": ff_iters, "argv": sys.argv[1:] if argv is None else argv,
                                    "baseline": "C (bench/cuda/rawtcp.c), loopback"},
                         "machine": {**machine(), "loadavg_start": machine()["loadavg"]},
                         "bandwidth": [], "latency": [], "fire_and_forget": []}
            if "bandwidth" in only:
                log("bandwidth")
                res["bandwidth"] = bench_bandwidth(bn, sizes, rounds, quick, log)
            if "latency" in only:
                log("latency")
                res["latency"] = bench_latency(bn, lat_iters, rounds, log)
            if "ff" in only:
                log("fire-and-forget")
                res["fire_and_forget"] = bench_fire_and_forget(bn, ff_iters, rounds, log)
            if tls:
                log("TLS against plain")
                res["tls"] = bench_tls(bn, sizes, rounds, quick, log)
            if a.aggregate:
                log("aggregate")
                res["aggregate"] = bench_aggregate(bn, 16 * MiB, 2 if quick else 8, rounds, log)
            res["machine"]["loadavg_end"] = machine()["loadavg"]
            res["seconds"] = round(time.monotonic() - t0, 1)
        finally:
            servers.close()
    return finish(table(res), res, res["machine"]["loadavg_start"], a.out)


def finish(text: str, res: dict, load_start: object, out: Path | None) -> int:
    """Print a benchmark's tables and the machine's load over the run; results as JSON to `out` when given."""
    print(text)
    print(f"\n{res['seconds']} s; load average {load_start} → {res['machine']['loadavg_end']}")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
