"""Stage 3's register file (translator/ctagen.py): each register's array holds as many elements as the kernel's CTAs
can have threads (its .maxntid / .reqntid, else ctagen.MAX_CTA), so that a kernel declaring small CTAs (CUB's: 256)
touches a register file a quarter the size; and in a large kernel registers never live together in a thread share
an array (translator/ctaregs.py). Every kernel here runs against the lockstep NumPy path and a host model."""
from __future__ import annotations

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.translator import ctagen
from pyvgpu_daemon.errors import CudaError

from test_emu_ctagen import CTA, TRANSPOSE, _both, _io, _run, every_barrier_kernel  # noqa: F401 (autouse fixture)
from test_emu_threadgen import HEAD, _module


def _declaring(ptx: str, entry: str, directive: str) -> str:
    """`ptx` with `directive` (e.g. `.maxntid 32, 8, 1`) between the kernel's parameters and its body."""
    head, body = ptx.split(f".visible .entry {entry}(", 1)
    params, rest = body.split("\n{", 1)
    return f"{head}.visible .entry {entry}({params}\n{directive}\n{{{rest}"


@pytest.mark.parametrize("directive, cap", [("", 1024), (".maxntid 256, 1, 1", 256), (".maxntid 16, 8, 1", 128),
                                            (".reqntid 100", 128), (".maxntid 1", 64), (".maxntid 32, 32, 2", 1024)])
def test_the_arrays_hold_the_kernels_largest_cta(directive, cap):
    mod = _module(_declaring(TRANSPOSE, "tr", directive), CTA, DeviceMemory(1 << 40, 1 << 24))
    assert ctagen.cta_cap(mod.kernel("tr")) == cap


@pytest.mark.parametrize("block", [(16, 8, 1), (8, 4, 1), (3, 11, 1)])
def test_a_kernel_declaring_its_threads_gets_the_lockstep_bits_from_a_smaller_file(block):
    ptx = _declaring(TRANSPOSE, "tr", ".maxntid 16, 8, 1")
    grid = (3, 2, 1)
    cs = block[0] * block[1]
    n = cs * 6
    data = np.random.default_rng(cs).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    on, off, code = _both(ptx, "tr", grid, block, _io(data, n), lanes_per_chunk=2 * cs)
    lin = np.arange(cs)
    src = (lin % block[0]) * block[1] + lin // block[0]
    assert (on == data.reshape(6, cs)[:, src].reshape(-1)).all() and (on == off).all()
    _, undeclared = _run(TRANSPOSE, "tr", CTA, grid, block, _io(data, n), lanes_per_chunk=2 * cs)
    assert code.registers.nbytes < undeclared.registers.nbytes / 4


def test_more_threads_than_declared_are_refused_before_the_code_runs():
    ptx = _declaring(TRANSPOSE, "tr", ".maxntid 16, 8, 1")
    with pytest.raises(CudaError, match="cudaErrorInvalidConfiguration"):
        _run(ptx, "tr", CTA, (1, 1, 1), (16, 16, 1), _io(np.zeros(256, np.uint32), 256))


# Lanes 16-31 run first (the lower PCs) and load %r20 (0xFFFF0007), live until they store it in shared memory at B2
# (after the vote), while lanes 0-15 define %r9 and vote with it as their member mask. In no thread are %r9 and %r20
# live together, so they could share an array (the first u32 one: they would); but the vote reads %r9 in the
# threads not at it too (a lane whose own mask bit is set and runs elsewhere is waited for), where it is 0 on the
# lockstep path: the vote does not wait, and lanes 0-15 read shared memory before lanes 16-31 write it. %r9 in
# %r20's array would make the vote wait for lanes 16-31 (their bits set): 0xFFFF0007 read instead of 0.
MASK_ACROSS = HEAD + """
.visible .entry across(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<4>; .reg .b32 %r<24>; .reg .b64 %rd<8>;
  .shared .align 4 .b8 sh[4];
  ld.param.u64 %rd1, [out];
  cvt.u64.u32 %rd2, %tid.x;
  shl.b64 %rd3, %rd2, 2;
  add.s64 %rd4, %rd1, %rd3;
  setp.lt.u32 %p1, %tid.x, 16;
  @%p1 bra A;
  ld.param.u64 %rd5, [in];
  ld.global.u32 %r20, [%rd5];
  bra B2;
A:
  mov.u32 %r9, 65535;
  and.b32 %r21, %tid.x, 1;
  setp.ne.u32 %p2, %r21, 0;
  vote.sync.ballot.b32 %r10, %p2, %r9;
  ld.shared.u32 %r11, [sh];
  add.u32 %r12, %r11, %r10;
  st.global.u32 [%rd4], %r12;
  ret;
B2:
  st.shared.u32 [sh], %r20;
  st.global.u32 [%rd4], %r20;
  ret;
}
"""


def test_a_member_mask_read_in_threads_elsewhere_keeps_its_own_array(monkeypatch):
    monkeypatch.setattr(ctagen, "LARGE_INSTRUCTIONS", 0)       # (registers share arrays in large kernels only)
    data = np.array([0xFFFF0007], np.uint32)
    on, off, code = _both(MASK_ACROSS, "across", 1, 32, _io(data, 32))
    assert (on == np.array([0xAAAA] * 16 + [0xFFFF0007] * 16, np.uint32)).all() and (on == off).all()
