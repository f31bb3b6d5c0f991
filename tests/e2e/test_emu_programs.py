"""End to end: unmodified CUDA programs (tests/cuda/emu_*.cu, each with a self-checking host main) built with
`nvcc -cudart shared` in every fatbin compression mode, run through libvcudart and a daemon with the emulated GPU,
and (default mode) through a chain (the cuda backend on pyvgpu's libcuda.so.1 over an emulated daemon)."""
from __future__ import annotations

import pytest

from harness import on_backends

PROGRAMS = ["emu_basic.cu", "emu_shared.cu", "emu_atomics.cu", "emu_math.cu", "emu_misc.cu", "emu_assert.cu"]
MODES = {"default": (), "speed": ("--compress-mode=speed",), "none": ("--compress-mode=none",)}


# Each program also runs on a chain, in the default mode (the other modes test the emulator's fatbin decoding).
CASES = on_backends([(p, m) for m in MODES for p in PROGRAMS], chain=lambda c: c[1] == "default")


@pytest.mark.parametrize("program,mode,backend", CASES, ids=["-".join(c) for c in CASES])
def test_program_runs_on_emulated_gpu(program, mode, backend, cuda_build, daemon, run):
    exe = cuda_build(program, *MODES[mode])
    proc = run(exe, [daemon])
    name = program[:-3]
    assert f"PASS {name}" in proc.stdout, proc.stdout + proc.stderr
    # device printf and assert messages: the program's from the emulator, the daemon's stdout from the cuda backend
    device_out = proc.stdout if backend == "emu" else daemon.log_text()
    if name == "emu_misc":
        lines = [ln for ln in device_out.splitlines() if ln.startswith("block ")]
        assert lines == [f"block {b} thread {t} n=7 f=1.500 d=2.25 x=0xff s=hi" for b in range(2) for t in range(2)]
    if name == "emu_assert":
        assert "block: [1,0,0], thread: [5,0,0] Assertion `v[i] >= 0` failed." in device_out
        assert "sync: cudaErrorAssert" in proc.stdout
