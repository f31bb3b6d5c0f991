"""Emulator instruction semantics: cost of AluOp.fn (daemon/pyvgpu_daemon/emu/ops/) on 1M float32 lanes against
the raw NumPy operation it wraps (ratio = fn / raw).

    python bench/emu_ops_bench.py [lanes]
"""
from __future__ import annotations

import sys
import timeit
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "daemon"), str(ROOT)]

from pyvgpu_daemon.emu.ops import build_alu  # noqa: E402
from pyvgpu_daemon.emu.ptx import ir  # noqa: E402


def _op(spec: str, ndst: int = 1):
    parts = spec.split(".")
    return build_alu(ir.Instr(parts[0], tuple(parts[1:]), [ir.Reg("%d")] * ndst, [ir.Reg("%a")] * 3))


def _best(f, number=5, repeat=5):
    return min(timeit.repeat(f, number=number, repeat=repeat)) / number


def main(n: int = 1 << 20) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    i = rng.integers(-2**31, 2**31, n).astype(np.int32)
    cases = [
        ("add.f32", lambda: np.add(a, b), lambda op: op.fn(a, b)),
        ("add.rn.f32", lambda: np.add(a, b), lambda op: op.fn(a, b)),
        ("fma.rn.f32", lambda: np.add(np.multiply(a, b), c), lambda op: op.fn(a, b, c)),
        ("fma.rm.f32", lambda: np.add(np.multiply(a, b), c), lambda op: op.fn(a, b, c)),
        ("mul.f32", lambda: np.multiply(a, b), lambda op: op.fn(a, b)),
        ("setp.lt.f32", lambda: np.less(a, b), lambda op: op.fn(a, b)),
        ("setp.geu.f32", lambda: np.less(a, b), lambda op: op.fn(a, b)),
        ("cvt.rn.f32.s32", lambda: i.astype(np.float32), lambda op: op.fn(i)),
        ("cvt.rzi.s32.f32", lambda: a.astype(np.int32), lambda op: op.fn(a)),
        ("cvt.f64.f32", lambda: a.astype(np.float64), lambda op: op.fn(a)),
        ("ex2.approx.ftz.f32", lambda: np.exp2(a), lambda op: op.fn(a)),
    ]
    print(f"{'op':22s} {'raw ms':>8s} {'fn ms':>8s} {'ratio':>6s}   ({n} lanes)")
    for spec, raw, call in cases:
        op = _op(spec)
        t_raw = _best(raw)
        t_fn = _best(lambda: call(op))
        print(f"{spec:22s} {t_raw * 1e3:8.2f} {t_fn * 1e3:8.2f} {t_fn / t_raw:6.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20)
