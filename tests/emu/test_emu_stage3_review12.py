"""review12: stage 3 and the paths beside it attacked where this stop changed them (vector ALU steps, memory loops,
the talk path, the cache key): each test compares the native paths with the lockstep NumPy path and a host model,
bit for bit, and fails on the code before its fix."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen, threadgen

from test_emu_ctagen import _run, every_barrier_kernel  # noqa: F401 (autouse fixture)
from test_emu_threadgen import HEAD, _module

# the paths: CTA at a time (ctagen), a thread at a time (threadgen), the lockstep path's runs of C (cgen), NumPy
PATHS = {"cta": dict(native="on"), "thread": dict(native="on", ctagen=False),
         "runs": dict(native="on", ctagen=False, threadgen=False), "numpy": dict(native="off")}


def _check_path(ptx: str, path: str) -> None:
    """The kernel runs on the path named (not on another one that declined it)."""
    mod = _module(ptx, PATHS[path], DeviceMemory(1 << 40, 1 << 24))
    code = mod.kernel("k").native_make() if path != "numpy" else None
    want = {"cta": ctagen.CtaCode, "thread": threadgen.ThreadCode}.get(path)
    assert want is None or type(code) is want, (path, type(code))
    assert path != "runs" or (code is not None and not isinstance(code, threadgen.ThreadCode))


def _guard_kernel(body: str) -> str:
    """Each thread: a, b from `in`; %p1 = a odd; body; out = (%p1, %p2) as words."""
    return HEAD + """
.visible .entry k(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<8>; .reg .b32 %r<40>; .reg .b64 %rd<10>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [in];
  mov.u32 %r30, %tid.x;
  mul.wide.u32 %rd3, %r30, 8;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.v2.u32 {%r1, %r2}, [%rd4];
  mul.wide.u32 %rd5, %r30, 8;
  add.s64 %rd6, %rd1, %rd5;
  and.b32 %r3, %r1, 1;
  setp.ne.u32 %p1, %r3, 0;
  setp.ne.u32 %p2, %r3, 1;
  bar.sync 0;
""" + body + """
  bar.sync 0;
  selp.u32 %r10, 1, 0, %p1;
  selp.u32 %r11, 1, 0, %p2;
  st.global.v2.u32 [%rd6], {%r10, %r11};
  ret;
}
"""


# (PTX, the host model of (%p1, %p2) from p1 = a odd, p2 = a even, lt = a < b): every source and the guard are read
# before the instruction writes (PTX), here where a destination is also the combining predicate c or the guard
SETP_CASES = {
    "c is the first destination": ("  setp.lt.u32.and %p1|%p2, %r1, %r2, %p1;\n",
                                   lambda p1, p2, lt: (lt & p1, ~lt & p1)),
    "c is the first destination (or)": ("  setp.lt.u32.or %p1|%p2, %r1, %r2, %p1;\n",
                                        lambda p1, p2, lt: (lt | p1, ~lt | p1)),
    "the guard is the first destination": ("  @%p1 setp.lt.u32 %p1|%p2, %r1, %r2;\n",
                                            lambda p1, p2, lt: (np.where(p1, lt, p1), np.where(p1, ~lt, p2))),
    "negated guard, first destination": ("  @!%p1 setp.lt.u32.xor %p1|%p2, %r1, %r2, %p1;\n",
                                         lambda p1, p2, lt: (np.where(~p1, lt ^ p1, p1), np.where(~p1, ~lt ^ p1, p2))),
}


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("case", list(SETP_CASES))
def test_setp_reads_its_combining_predicate_and_guard_before_it_writes(monkeypatch, case, path, large):
    """`setp.lt.and.u32 %p1|%p2, a, b, %p1` combines both results with the old %p1, and `@%p1 setp %p1|%p2` guards
    both writes with the old %p1: the C code read them again after the first write (cgen's setp and guarded writes;
    the lockstep path's guard too), a silent wrong %p2 in some threads."""
    if large:
        monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)
    monkeypatch.setattr(threadgen, "slower_reason", lambda kernel: None)     # (thread mode takes the kernel)
    body, model = SETP_CASES[case]
    n = 45
    rng = np.random.default_rng(len(case))
    data = rng.integers(0, 1 << 32, (n, 2), dtype=np.uint64).astype(np.uint32)

    def params(mem: DeviceMemory):
        out, src = mem.alloc(8 * n), mem.alloc(8 * n)
        mem.write(src, data.tobytes())
        return struct.pack("<QQ", out, src), \
            lambda m: np.frombuffer(bytes(m.read(out, 8 * n)), np.uint32).reshape(n, 2).copy()
    got, _ = _run(_guard_kernel(body), "k", PATHS[path], 1, n, params)
    _check_path(_guard_kernel(body), path)
    p1 = (data[:, 0] & 1) != 0
    want = np.stack(model(p1, ~p1, data[:, 0] < data[:, 1]), axis=1).astype(np.uint32)
    assert (got == want).all()
