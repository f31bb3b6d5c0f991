"""Adversarial review of stage 3 as extended in stop 30 (translator/ctagen.py's loops without suspensions over
global memory and registers kept once per CTA; translator/ctawarp.py's warp operations; translator/ctaatomic.py's
atomics and CTAs that talk). Each kernel tries to make the CTA-at-a-time code give another result than the
lockstep NumPy path (PYVGPU_EMU_CTAGEN off: native="off" here) or a host model without an error; each is compared
bit for bit with both."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen, threadgen
from pyvgpu_daemon.errors import CudaError, code_of

from test_emu_threadgen import HEAD, _module

CTA = dict(native="on")
OFF = dict(native="off")
TICKS = pytest.mark.parametrize("tick", [None, 1, 7], ids=["plain", "suspended every step", "every 7"])


@pytest.fixture(autouse=True)
def every_stage3_kernel(monkeypatch):
    """A CTA at a time for every eligible kernel (ctagen.preferred_reason would leave some to thread mode)."""
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)


def _launch(ptx, name, mode, grid, block, params, shared=0, mem=None, **kw):
    """(what params' read-back returns, or (error code, read-back) after an error)."""
    mem = mem or DeviceMemory(1 << 40, 1 << 24)
    mod = _module(ptx, mode, mem, **kw)
    raw, read = params(mem)
    grid = grid if isinstance(grid, tuple) else (grid, 1, 1)
    block = block if isinstance(block, tuple) else (block, 1, 1)
    try:
        mod.launch(name, grid, block, shared, raw)
    except CudaError as e:
        return ("error", e.code, read(mem))
    if mode is CTA:
        assert isinstance(mod.kernel(name).native_make(), ctagen.CtaCode), "the kernel did not run a CTA at a time"
    return read(mem)


def _both(ptx, name, grid, block, params, shared=0, **kw):
    on = _launch(ptx, name, CTA, grid, block, params, shared, **kw)
    off = _launch(ptx, name, OFF, grid, block, params, shared, **kw)
    return on, off


def _out(nbytes: int, *extra_allocs: np.ndarray, pack: str = ""):
    """params(mem) for kernels taking (out, in0, in1, ..., extra scalars): out zeroed, in_k = extra_allocs[k]."""
    def params(mem):
        out = mem.alloc(nbytes)
        ins = []
        for a in extra_allocs:
            p = mem.alloc(max(a.nbytes, 4))
            mem.write(p, a.tobytes())
            ins.append(p)
        return struct.pack("<" + "Q" * (1 + len(ins)), out, *ins) + pack.encode("latin-1"), \
            lambda m: np.frombuffer(bytes(m.read(out, nbytes)), np.uint32).copy()
    return params


# ---------------------------------------------------------------- scanfast7: registers kept once per CTA
# %r5 has one definition, in the first block, from an immediate: ctagen._uniform keeps it once per CTA. But each
# thread reads its own %r5 before that definition (0: a register read before written starts at zero, as every
# lane's does on the lockstep path; test_emu_ctagen's test_registers_read_before_written_start_at_zero...), in the
# same loop over the threads: kept once, thread 1 read thread 0's 7.
READ_BEFORE = HEAD + """
.visible .entry rb(.param .u64 out)
{
  .reg .b32 %r<10>; .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x;
  mad.lo.s32 %r4, %r2, %r3, %r1;
  mul.wide.u32 %rd2, %r4, 4;
  add.s64 %rd3, %rd1, %rd2;
  add.u32 %r6, %r5, 1;
  mov.u32 %r5, 7;
  st.global.u32 [%rd3], %r6;
  bar.sync 0;
  ret;
}
"""


@pytest.mark.parametrize("block", [1, 33, 64])
def test_a_register_read_before_its_one_definition_is_per_thread(block):
    grid = 3
    on, off = _both(READ_BEFORE, "rb", grid, block, _out(4 * grid * block))
    want = np.ones(grid * block, np.uint32)
    assert (off == want).all()
    assert (on == want).all(), np.nonzero(on != want)
