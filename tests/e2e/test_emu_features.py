"""End to end: the PTX and runtime features of issue 19 part 5 that NVIDIA's samples use, each in a self-checking
program (tests/cuda/emu_*.cu, checked against host results) run unmodified through libvcudart: the SIMD and
scalar video instructions; cooperative launches with grid-wide synchronisation; device-side malloc/free/new/delete;
warp matrix operations (wmma, mma.sync)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.chain

PROGRAMS = {
    "emu_video.cu": (),               # vabsdiff4 (__vabsdiffu4, __vsadu4), vadd2/4 ... vset2/4, vadd ... vmad, vset
    "emu_coop.cu": (),                # grid.sync() through cudaLaunchCooperativeKernel, the ExC attribute, a graph
    "emu_wmma.cu": (),                # wmma m16n16k16/m32n8k16/m8n32k16 f16 and s8/u8, mma.sync m16n8k8, m8n8k16
    "emu_malloc.cu": (),              # device malloc/free/new/delete across launches, alignment, a full heap, limits
}


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_feature_program(program, cuda_build, daemon, run):
    exe = cuda_build(program)
    proc = run(exe, [daemon], *PROGRAMS[program])
    assert f"PASS {program[:-3]}" in proc.stdout, proc.stdout + proc.stderr
