"""End to end: unmodified CUDA programs (tests/cuda/emu_*.cu, each with a self-checking host main) built with
`nvcc -cudart shared` in every fatbin compression mode, run through libvcudart and a daemon with the emulated GPU."""
from __future__ import annotations

import pytest

PROGRAMS = ["emu_basic.cu", "emu_shared.cu", "emu_atomics.cu", "emu_math.cu", "emu_misc.cu", "emu_assert.cu"]
MODES = {"default": (), "speed": ("--compress-mode=speed",), "none": ("--compress-mode=none",)}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("program", PROGRAMS)
def test_program_runs_on_emulated_gpu(program, mode, cuda_build, daemon, run):
    exe = cuda_build(program, *MODES[mode])
    proc = run(exe, [daemon])
    name = program[:-3]
    assert f"PASS {name}" in proc.stdout, proc.stdout + proc.stderr
    if name == "emu_misc":
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("block ")]
        assert lines == [f"block {b} thread {t} n=7 f=1.500 d=2.25 x=0xff s=hi" for b in range(2) for t in range(2)]
    if name == "emu_assert":
        assert "block: [1,0,0], thread: [5,0,0] Assertion `v[i] >= 0` failed." in proc.stdout
        assert "sync: cudaErrorAssert" in proc.stdout
