"""Device time no session can hold (issue 23, part 3): one session runs a long kernel on an emulated GPU while
another does allocate-copy-launch round trips; the round trip's time during the kernel against its time alone.

    python bench/device_time_bench.py [--kernel-seconds 10] [--rounds 3] [--baseline /other/checkout]

Sessions are Python protocol clients (pyvgpu/client.py) of one `python -m pyvgpu_daemon --backend emu` daemon; the
kernels are tests/cuda/device_time.cu as PTX. The long kernel is `spin` (one block of 256 threads, an LCG loop) with
its iteration count calibrated to --kernel-seconds alone. A round trip is MALLOC 64 KiB, MEMCPY_HTOD 64 KiB (waited
for), LAUNCH add_one over it, MEMCPY_DTOH 64 KiB (checked: every byte + 1), FREE. Per round: 30 round trips alone,
then the kernel, and round trips back to back (20 ms apart) from 0.5 s after its launch until it ends. Prints, per
round and over all rounds, medians and 90th percentiles; --baseline runs the same against another checkout's daemon
(e.g. main before issue 23), alternating with this one.
"""
from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from harness import ptx_of, start_daemon  # noqa: E402
from pyvgpu.client import Client  # noqa: E402

DATA = bytes(range(256)) * 256
EXPECT = bytes((b + 1) & 255 if i % 4 == 0 else b for i, b in enumerate(DATA))   # +1 on each little-endian u32
# (no carry: the low byte of each word is at most 255 - 1 = 254 here)


class Tenant:
    def __init__(self, port: int, name: str) -> None:
        self.c = Client.connect("127.0.0.1", port, tls=None, client_text=name)
        info = self.c.check("MODULE_LOAD", 0, 1, payload=ptx_of("device_time.cu"))[0]
        self.k = {n: k["id"] for n, k in info["kernels"].items()}
        self.out = self.c.check("MALLOC", 0, 1024)[0]

    def spin(self, iters: int) -> float:
        t = time.perf_counter()
        self.c.call("LAUNCH", 0, self.k["spin"], [1, 1, 1], [256, 1, 1], 0, 0,
                    payload=struct.pack("<QI4x", self.out, iters), reply=False)
        self.c.check("DEVICE_SYNC", 0)
        return time.perf_counter() - t

    def round_trip(self) -> float:
        c = self.c
        t = time.perf_counter()
        p = c.check("MALLOC", 0, len(DATA))[0]
        c.check("MEMCPY_HTOD", 0, p, 0, payload=DATA)
        c.call("LAUNCH", 0, self.k["add_one"], [64, 1, 1], [256, 1, 1], 0, 0,
               payload=struct.pack("<QI4x", p, len(DATA) // 4), reply=False)
        got = c.check("MEMCPY_DTOH", 0, p, len(DATA), 0)[1]
        c.check("FREE", 0, p)
        dt = time.perf_counter() - t
        if got != EXPECT:
            raise AssertionError("round trip returned wrong bytes")
        return dt


def p90(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(len(xs) * 0.9) - 1)]


def one_round(work: Path, checkout: Path, seconds: float) -> dict:
    # native code built at the first launch (not in the background, which could leave the calibrating spins
    # interpreted) and an instruction budget that seconds of native spin fit in
    env = {"PYTHONPATH": os.pathsep.join([str(checkout), str(checkout / "daemon")]), "PYVGPU_EMU_NATIVE": "on",
           "PYVGPU_EMU_MAX_VECTOR_INSTRUCTIONS": str(10 ** 12)}
    d = start_daemon(work, "--emu-devices", "1", env=env, cwd=checkout)   # cwd: `python -m` puts it first
    try:
        a, b = Tenant(d.port, "long"), Tenant(d.port, "round-trips")
        for _ in range(5):
            b.round_trip()
        alone = [b.round_trip() for _ in range(30)]
        n = 20000
        a.spin(n)
        while (t1 := min(a.spin(n) for _ in range(2))) < 0.25:     # long enough that latency does not decide it
            n *= 4
        iters = int(n * seconds / t1)
        res: dict[str, float] = {}
        th = threading.Thread(target=lambda: res.setdefault("kernel", a.spin(iters)))
        th.start()
        time.sleep(0.5)
        during = []
        while th.is_alive():
            during.append(b.round_trip())
            time.sleep(0.02)
        th.join()
        return {"alone": alone, "during": during, "kernel": res["kernel"], "kernel_alone": t1 * iters / n}
    finally:
        d.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel-seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout whose daemon to measure the same way")
    a = ap.parse_args()
    trees = [("this tree", ROOT)] + ([("baseline", a.baseline.resolve())] if a.baseline else [])
    results: dict[str, list[dict]] = {name: [] for name, _ in trees}
    print(f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
    with tempfile.TemporaryDirectory() as work:
        for r in range(a.rounds):
            for name, checkout in trees:
                out = one_round(Path(work), checkout, a.kernel_seconds)
                results[name].append(out)
                al, du = out["alone"], out["during"]
                print(f"round {r + 1} {name}: kernel {out['kernel']:.1f} s (alone ~{out['kernel_alone']:.1f} s); "
                      f"round trip alone median {statistics.median(al) * 1e3:.2f} ms p90 {p90(al) * 1e3:.2f} ms; "
                      f"during the kernel n={len(du)} median {statistics.median(du) * 1e3:.2f} ms "
                      f"p90 {p90(du) * 1e3:.2f} ms max {max(du) * 1e3:.1f} ms; "
                      f"median ratio {statistics.median(du) / statistics.median(al):.2f}", flush=True)
    for name, outs in results.items():
        al = [x for o in outs for x in o["alone"]]
        du = [x for o in outs for x in o["during"]]
        print(f"{name}: {len(outs)} rounds, round trip alone median {statistics.median(al) * 1e3:.2f} ms, during a "
              f"{a.kernel_seconds:.0f} s kernel median {statistics.median(du) * 1e3:.2f} ms (ratio "
              f"{statistics.median(du) / statistics.median(al):.2f}), p90 {p90(du) * 1e3:.2f} ms (ratio "
              f"{p90(du) / p90(al):.2f}), {len(du)} round trips")
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
