"""pyvgpu at network round-trip times (issue 10, P5): the micro-benchmarks and the paper workload through a
latency- and bandwidth-shaping loopback proxy (bench/netshape.py), side by side with raw TCP through the same proxy.

    python bench/wan_bench.py [--quick] [--out results.json] [--rtts 0,0.2,1,10] [--rates 1G,10G]
                              [--baseline DIR] [--compress]

Links: `direct` (no proxy), then the proxy with +RTT ms for each of --rtts (no line rate), then each of --rates at
+0.2 ms. Every link is measured, not assumed: a raw TCP ping-pong (bench/cuda/rawtcp.c) through it gives its real
round-trip time (the proxy adds its own ~0.1 ms) and raw 16 MiB copies its real bandwidth. Through the same links:
  * micro-benchmarks (bench/cuda/bandwidth.cu): cudaMemGetInfo p50, 16 MiB pinned copies both ways,
    2000 fire-and-forget launches then one cudaDeviceSynchronize;
  * the paper workload (examples/dp_train, the paper's sizes by default) on 1 and 2 remote GPUs, with the client's
    statistics (PYVGPU_STATS): blocking round trips per step and GPU.
Step time is fitted against the measured RTT over the links without a line rate: the slope (ms of step time per ms
of RTT) is the number of blocking round trips the step waits for; `wall - device` (the time the GPUs did not
compute) gives the cleaner fit. --baseline DIR runs the same with another checkout's client library and daemon (e.g.
`git worktree add /tmp/base main` + its set-up) in the same rounds, for a before/after slope.
--compress adds the compression section: 16 MiB copies of float32 training data, zeros and float32 noise at 1 Gb/s
(+0.2 ms) with PYVGPU_COMPRESS=off against auto (and on loopback, where auto must stay off).

Rounds interleave the links (rotating order); figures are medians over rounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(BENCH)]

from harness import (NVCC, Daemon, cached_build, free_port, interposer_env, start_daemon,  # noqa: E402
                     stop_process)
import paper  # noqa: E402
import remoting_bench as rb  # noqa: E402

MiB = 1 << 20
COPY = 16 * MiB
BUILD = ROOT / "build" / "bench-wan"


@dataclass
class LinkSpec:
    name: str
    rtt_ms: float | None        # None: no proxy (direct)
    rate: str | None = None     # line rate per direction (netshape --rate), None: none

    @property
    def shaped(self) -> bool:
        return self.rtt_ms is not None


class Proxy:
    """bench/netshape.py in its own process (its CPU is not the benchmark's)."""

    def __init__(self, target_port: int, link: LinkSpec, workdir: Path):
        args = [sys.executable, str(BENCH / "netshape.py"), "--target", f"127.0.0.1:{target_port}",
                "--rtt-ms", str(link.rtt_ms or 0.0)]
        if link.rate:
            args += ["--rate", link.rate]
        self.log = workdir / f"netshape-{target_port}-{link.name}.log"
        self.fh = open(self.log, "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.fh, text=True, start_new_session=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "listening":
            self.stop()
            raise RuntimeError(f"netshape did not start: {line} (log {self.log})")
        self.port = int(line[1])

    def stop(self) -> None:
        stop_process(self.proc, group=True)
        self.fh.close()


class Side:
    """One client build + its daemons (ours, or --baseline's)."""

    def __init__(self, name: str, lib: Path, daemons: list[Daemon]):
        self.name, self.lib, self.daemons = name, lib, daemons


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x → (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def parse_stats(path: Path) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        w = line.split()
        if len(w) == 6 and w[1].isdigit():
            rows[w[0]] = {"calls": int(w[1]), "bytes": int(w[2]), "blocked": int(w[3]), "blocked_ms": float(w[4])}
    return rows


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path, log):
        self.a, self.workdir, self.log = args, workdir, log
        self.cuda, self.raw = rb.build()
        self.dp = paper.build_binary()
        self.data = paper.digits_dir()
        self.sides: list[Side] = []
        self.raw_server: subprocess.Popen | None = None
        self.raw_port = 0
        self.proxies: list[Proxy] = []

    # ------------------------------------------------------------------ set-up
    def start(self) -> None:
        import pyvgpu
        ours = [start_daemon(self.workdir, env=paper.python_env(), timeout=60) for _ in range(2)]
        self.sides.append(Side("pyvgpu", Path(pyvgpu.lib_path()), ours))
        if self.a.baseline:
            base = Path(self.a.baseline)
            lib = next((p for p in (base / "build" / "dev" / "lib" / "libvcudart.so",)
                        if p.exists()), None) or build_baseline(base)
            env = {"PYTHONPATH": os.pathsep.join([str(base), str(base / "daemon")])}
            daemons = [start_daemon(self.workdir, env=env, cwd=base, timeout=60) for _ in range(2)]
            self.sides.append(Side("baseline", lib, daemons))
        port = free_port()
        log = self.workdir / "rawtcp.log"
        with open(log, "wb") as fh:
            self.raw_server = subprocess.Popen([str(self.raw), "server", str(port)], stdout=fh,
                                               stderr=subprocess.STDOUT, start_new_session=True)
        rb.wait_listening(self.raw_server, port, log, what="rawtcp server")
        self.raw_port = port

    def stop(self) -> None:
        for p in self.proxies:
            p.stop()
        for s in self.sides:
            for d in s.daemons:
                d.stop()
        if self.raw_server is not None:
            stop_process(self.raw_server, group=True)

    def ports(self, link: LinkSpec, targets: list[int]) -> list[int]:
        """Ports to dial for `targets` over `link` (proxies started for this measurement, stopped after)."""
        if not link.shaped:
            return targets
        out = []
        for t in targets:
            p = Proxy(t, link, self.workdir)
            self.proxies.append(p)
            out.append(p.port)
        return out

    def drop_proxies(self) -> None:
        for p in self.proxies:
            p.stop()
        self.proxies.clear()

    # ------------------------------------------------------------------ measurements
    def measure_link(self, link: LinkSpec) -> dict:
        (port,) = self.ports(link, [self.raw_port])
        ping = rb.run_lines([str(self.raw), "client", str(port), "ping", "32", "200"])["bw"]
        d2h = rb.run_lines([str(self.raw), "client", str(port), "d2h", str(COPY), "3"])["bw"]
        h2d = rb.run_lines([str(self.raw), "client", str(port), "h2d", str(COPY), "3"])["bw"]
        self.drop_proxies()
        return {"rtt_ms": statistics.median(ping) / 1e6, "rtt_p99_ms": rb.pct(ping, 99) / 1e6,
                "raw_d2h_GBps": COPY / statistics.median(d2h), "raw_h2d_GBps": COPY / statistics.median(h2d)}

    def env(self, side: Side, ports: list[int], extra: dict | None = None) -> dict:
        env = {**os.environ, **interposer_env(side.daemons[:len(ports)], side.lib)}
        env["PYVGPU_HOSTS"] = ",".join(f"127.0.0.1:{p}" for p in ports)
        env.update(extra or {})
        return env

    def micro(self, side: Side, link: LinkSpec) -> dict:
        ports = self.ports(link, [side.daemons[0].port])
        env = self.env(side, ports)
        lat = rb.run_lines([str(self.cuda), "lat", "200"], env=env)
        n = 1000 if link.rtt_ms and link.rtt_ms >= 10 else 2000
        ff = rb.run_lines([str(self.cuda), "launch", str(n)], env=env)
        h2d = rb.run_lines([str(self.cuda), "bw", "h2d", "pinned", str(COPY), "2"], env=env)["bw"]
        d2h = rb.run_lines([str(self.cuda), "bw", "d2h", "pinned", str(COPY), "2"], env=env)["bw"]
        self.drop_proxies()
        kernel = ff["kernel"]
        return {"meminfo_p50_ms": rb.pct(lat["meminfo"], 50) / 1e6,
                "launches": n, "launch_enqueue_ms": kernel[0] / 1e6, "launch_sync_ms": kernel[1] / 1e6,
                "launches_per_s": n / ((kernel[0] + kernel[1]) / 1e9),
                "h2d_GBps": COPY / statistics.median(h2d), "d2h_GBps": COPY / statistics.median(d2h)}

    def paper_run(self, side: Side, link: LinkSpec, gpus: int) -> dict:
        ports = self.ports(link, [d.port for d in side.daemons[:gpus]])
        stats = self.workdir / f"stats-{side.name}-{link.name}-{gpus}-{time.monotonic_ns()}.txt"
        env = self.env(side, ports, {"PYVGPU_STATS": str(stats)})
        a = self.a
        args = ["--data", str(self.data), "--batch", str(a.batch), "--hidden", a.hidden, "--lr", "1.0", "--seed",
                "1", "--gpus", str(gpus), "--steps", str(a.steps), "--log-every", "1000"]
        res = paper.run_program(self.dp, args, f"{side.name} {link.name} {gpus} GPU", env=env, quiet=True,
                                timeout=1800)
        self.drop_proxies()
        if res["rc"] != 0 or not res["final"]:
            raise RuntimeError(f"dp_train failed on {link.name}: {res['stderr'][-1500:]}")
        f = res["final"]
        rows = parse_stats(stats)
        out = {"step_ms": f["ms_per_1000"] / 1000.0, "device_ms": f["busy_per_1000"] / 1000.0,
               "test_err": f["test_err"], "loss": f["loss"]}
        out["remoting_ms"] = out["step_ms"] - out["device_ms"]
        if rows:
            out["blocked_ms_total"] = rows["all"]["blocked_ms"]
        return out


    def steady_state(self, side: Side, gpus: int, base_steps: int = 2, extra: int = 4) -> dict:
        """Blocking round trips per step and GPU in the steady state: two runs on the direct link that differ only
        in their number of steps, counted by the client's statistics (PYVGPU_STATS, per op)."""
        counts = []
        for steps in (base_steps, base_steps + extra):
            stats = self.workdir / f"steady-{side.name}-{gpus}-{steps}.txt"
            env = self.env(side, [d.port for d in side.daemons[:gpus]], {"PYVGPU_STATS": str(stats)})
            a = self.a
            args = ["--data", str(self.data), "--batch", str(a.batch), "--hidden", a.hidden, "--gpus", str(gpus),
                    "--steps", str(steps), "--log-every", "1000"]
            res = paper.run_program(self.dp, args, f"{side.name} steady state {gpus} GPU {steps} steps", env=env,
                                    quiet=True)
            if res["rc"] != 0:
                raise RuntimeError(f"dp_train failed: {res['stderr'][-1500:]}")
            counts.append(parse_stats(stats))
        s1, s2 = counts
        out: dict = {}
        if s1 and s2:
            out["client_blocked_per_step_per_gpu"] = (s2["all"]["blocked"] - s1["all"]["blocked"]) / extra / gpus
            out["per_op"] = {k: (s2[k]["blocked"] - s1.get(k, {}).get("blocked", 0)) / extra / gpus for k in s2
                             if k != "all" and not k.startswith("GPU")
                             and s2[k]["blocked"] != s1.get(k, {}).get("blocked", 0)}
        return out


def build_baseline(base: Path) -> Path:
    """cmake build of another checkout's client libraries (build/dev/lib there)."""
    subprocess.run(["cmake", "-S", str(base), "-B", str(base / "build" / "dev"), "-DCMAKE_BUILD_TYPE=Release"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(base / "build" / "dev"), "-j2"], check=True, capture_output=True)
    return base / "build" / "dev" / "lib" / "libvcudart.so"


def links(a: argparse.Namespace) -> list[LinkSpec]:
    out = [LinkSpec("direct", None)]
    out += [LinkSpec(f"+{r:g}ms", r) for r in a.rtts]
    out += [LinkSpec(f"{rate}+0.2ms", 0.2, rate) for rate in a.rates]
    return out


def run(a: argparse.Namespace, log) -> dict:
    res: dict = {"config": {k: (v if not isinstance(v, Path) else str(v)) for k, v in vars(a).items()},
                 "machine": rb.machine()}
    with tempfile.TemporaryDirectory(prefix="pyvgpu-wan-") as tmp:
        bn = Bench(a, Path(tmp), log)
        bn.start()
        try:
            if not a.compress_only:
                run_links(a, bn, res, log)
            if a.compress or a.compress_only:
                res["compression"] = compression(bn, log)
        finally:
            bn.stop()
    res["machine"]["loadavg_end"] = rb.machine()["loadavg"]
    return res


def run_links(a: argparse.Namespace, bn: Bench, res: dict, log) -> None:
    """Links × (micro-benchmarks, paper workload) in rounds, the steady-state counts and the fits, into res."""
    ls = links(a)
    samples: dict[str, dict[str, list[dict]]] = {l.name: {"link": []} for l in ls}
    for r in range(a.rounds):
        order = ls[r % len(ls):] + ls[:r % len(ls)]
        for link in order:
            log(f"round {r + 1}/{a.rounds}: {link.name}")
            s = samples[link.name]
            s["link"].append(bn.measure_link(link))
            for side in bn.sides:
                s.setdefault(f"micro/{side.name}", []).append(bn.micro(side, link))
                for g in a.gpus:
                    s.setdefault(f"paper{g}/{side.name}", []).append(bn.paper_run(side, link, g))
    res["links"] = {name: {k: median_dict(v) for k, v in s.items()} for name, s in samples.items()}
    res["steady"] = {f"paper{g}/{side.name}": bn.steady_state(side, g) for side in bn.sides for g in a.gpus}
    res["fits"] = fits(res["links"], ls, bn.sides, a.gpus, a.steps)


def median_dict(rows: list[dict]) -> dict:
    out: dict = {}
    for k in rows[0]:
        vals = [r[k] for r in rows if k in r]
        if all(isinstance(v, (int, float)) for v in vals):
            out[k] = statistics.median(vals)
        else:
            out[k] = vals[-1]
    out["rounds"] = len(rows)
    return out


def fits(lk: dict, ls: list[LinkSpec], sides: list[Side], gpus: list[int], steps: int) -> dict:
    """Step time against measured RTT over the links without a line rate."""
    out: dict = {}
    pts = [l for l in ls if not l.rate]
    for side in sides:
        for g in gpus:
            key = f"paper{g}/{side.name}"
            xs = [lk[l.name]["link"]["rtt_ms"] for l in pts]
            wall = [lk[l.name][key]["step_ms"] for l in pts]
            rem = [lk[l.name][key]["remoting_ms"] for l in pts]
            a_w, b_w = fit(xs, wall)
            a_r, b_r = fit(xs, rem)
            out[key] = {"rtt_ms": xs, "step_ms": wall, "remoting_ms": rem, "slope_wall": b_w, "slope_remoting": b_r,
                        "intercept_wall_ms": a_w}
        key = f"micro/{side.name}"
        xs = [lk[l.name]["link"]["rtt_ms"] for l in pts]
        out[key] = {"meminfo_slope": fit(xs, [lk[l.name][key]["meminfo_p50_ms"] for l in pts])[1],
                    "launch_sync_slope": fit(xs, [lk[l.name][key]["launch_sync_ms"] for l in pts])[1]}
    return out


COMPRESS_DATA = ("zeros", "float32", "noise")
COMPRESS_MODES = ("off", "adaptive", "lz4", "zstd")


def compression(bn: Bench, log) -> dict:
    """16 MiB pinned copies of each kind of data (bandwidth.cu's BW_DATA) over 1 Gb/s + 0.2 ms, with PYVGPU_COMPRESS
    off, adaptive (the default policy, here applied through the loopback proxy) and each codec forced; then on the
    direct loopback link with the default (auto: no codec offered to a loopback daemon) against off."""
    side = bn.sides[0]
    out: dict = {}
    for link, modes in ((LinkSpec("1G+0.2ms", 0.2, "1G"), COMPRESS_MODES), (LinkSpec("direct", None), ("off", "auto"))):
        for data in COMPRESS_DATA:
            for mode in modes:
                log(f"compression: {link.name} {data} {mode}")
                ports = bn.ports(link, [side.daemons[0].port])
                env = bn.env(side, ports, {"PYVGPU_COMPRESS": mode, "BW_DATA": data})
                h2d = rb.run_lines([str(bn.cuda), "bw", "h2d", "pinned", str(COPY), "4"], env=env)["bw"]
                d2h = rb.run_lines([str(bn.cuda), "bw", "d2h", "pinned", str(COPY), "4"], env=env)["bw"]
                bn.drop_proxies()
                out.setdefault(link.name, {}).setdefault(data, {})[mode] = {
                    "h2d_GBps": COPY / statistics.median(h2d), "d2h_GBps": COPY / statistics.median(d2h)}
    return out


def compression_table(comp: dict) -> list[str]:
    out = ["", "Compression: 16 MiB pinned copies, GB/s (H2D / D2H), and the gain over PYVGPU_COMPRESS=off", ""]
    for link, rows in comp.items():
        modes = list(next(iter(rows.values())))
        out += [f"{link}:", "", "| data | " + " | ".join(modes) + " | gain of " + modes[1] + " |",
                "|---|" + "---:|" * (len(modes) + 1)]
        for data, r in rows.items():
            cells = [f"{r[m]['h2d_GBps']:.3f} / {r[m]['d2h_GBps']:.3f}" for m in modes]
            off, best = r[modes[0]], r[modes[1]]
            gain = f"{best['h2d_GBps'] / off['h2d_GBps']:.2f}x / {best['d2h_GBps'] / off['d2h_GBps']:.2f}x"
            out.append(f"| {data} | " + " | ".join(cells) + f" | {gain} |")
        out.append("")
    return out


def table(res: dict) -> str:
    out = links_table(res) if "links" in res else []
    if "compression" in res:
        out += compression_table(res["compression"])
    return "\n".join(out)


def links_table(res: dict) -> list[str]:
    lk = res["links"]
    names = list(lk)
    sides = sorted({k.split("/")[1] for n in names for k in lk[n] if "/" in k})
    out = ["Links (measured through the proxy with raw TCP: ping p50, 16 MiB copies)", "",
           "| link | RTT ms | raw D2H GB/s | raw H2D GB/s |", "|---|---:|---:|---:|"]
    for n in names:
        L = lk[n]["link"]
        out.append(f"| {n} | {L['rtt_ms']:.3f} | {L['raw_d2h_GBps']:.3f} | {L['raw_h2d_GBps']:.3f} |")
    for side in sides:
        out += ["", f"Micro-benchmarks ({side})", "",
                "| link | cudaMemGetInfo p50 ms | launches/s (N then sync) | H2D GB/s | D2H GB/s | H2D / raw | "
                "D2H / raw |", "|---|---:|---:|---:|---:|---:|---:|"]
        for n in names:
            m, L = lk[n][f"micro/{side}"], lk[n]["link"]
            out.append(f"| {n} | {m['meminfo_p50_ms']:.3f} | {m['launches_per_s']:,.0f} | {m['h2d_GBps']:.3f} | "
                       f"{m['d2h_GBps']:.3f} | {m['h2d_GBps'] / L['raw_h2d_GBps']:.2f} | "
                       f"{m['d2h_GBps'] / L['raw_d2h_GBps']:.2f} |")
        for key in sorted(k for k in lk[names[0]] if k.startswith("paper") and k.endswith("/" + side)):
            g = key[len("paper"):].split("/")[0]
            out += ["", f"Paper workload, {g} GPU(s) ({side}): ms per step", "",
                    "| link | RTT ms | step ms | device ms | wall - device ms |", "|---|---:|---:|---:|---:|"]
            for n in names:
                p = lk[n][key]
                out.append(f"| {n} | {lk[n]['link']['rtt_ms']:.3f} | {p['step_ms']:.1f} | {p['device_ms']:.1f} | "
                           f"{p['remoting_ms']:.1f} |")
    out += ["", "Slopes over the links without a line rate (ms of step time per ms of RTT = blocking round trips "
                "per step) beside the counted ones (steady state, per step and GPU)", "",
            "| run | slope of step time | slope of wall - device | counted by the client (PYVGPU_STATS) |",
            "|---|---:|---:|---:|"]
    for key, f in res["fits"].items():
        if key.startswith("paper"):
            st = res.get("steady", {}).get(key, {})
            cl = st.get("client_blocked_per_step_per_gpu")
            out.append(f"| {key} | {f['slope_wall']:.2f} | {f['slope_remoting']:.2f} | "
                       f"{'' if cl is None else f'{cl:.2f}'} |")
    for key, st in res.get("steady", {}).items():
        if st.get("per_op"):
            out.append(f"\n{key}: blocking calls per step and GPU by op: " +
                       ", ".join(f"{k} {v:.2f}" for k, v in st["per_op"].items()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer links, steps and rounds (a smoke test)")
    ap.add_argument("--rtts", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 0.2, 1.0, 10.0])
    ap.add_argument("--rates", type=lambda s: [x for x in s.split(",") if x], default=["1G", "10G"])
    ap.add_argument("--gpus", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--hidden", default="128")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--baseline", type=Path, help="another checkout to run side by side (its build/dev or built)")
    ap.add_argument("--compress", action="store_true", help="also the compression section (1 Gb/s)")
    ap.add_argument("--compress-only", action="store_true", help="only the compression section")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.quick:
        a.rtts, a.rates, a.gpus, a.steps, a.rounds = [0.0, 1.0], [], [1], 3, 1
        a.batch, a.hidden = 64, "16"

    def log(msg: str) -> None:
        print(f"[wan] {msg}", file=sys.stderr, flush=True)

    t0 = time.monotonic()
    res = run(a, log)
    res["seconds"] = round(time.monotonic() - t0, 1)
    return rb.finish(table(res), res, res["machine"]["loadavg"], a.out)


if __name__ == "__main__":
    sys.exit(main())
