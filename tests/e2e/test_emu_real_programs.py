"""End to end: CUDA programs of the kinds NVIDIA publishes as self-checking samples (tests/cuda/emu_*.cu below),
built once with `nvcc -cudart shared` (default fatbin compression) and run unmodified through libvcudart on an
emulated GPU. Each checks its results against host computations and prints PASS; they cover warp-level code with
warpSize, recursion and function pointers, kernel parameter addresses, shared-memory histograms, bisection with
shared-memory compaction, thrust/CUB device algorithms, and the reduction patterns of NVIDIA's reduction sample
and cooperative groups."""
from __future__ import annotations

import pytest

from harness import ROOT, build_cuda

pytestmark = pytest.mark.chain

PROGRAMS = {
    "emu_warp.cu": (),                # warpSize (WARP_SZ), shuffles, ballot + %lanemask_lt, special registers
    "emu_calls.cu": (),               # recursion, deep recursion with cudaLimitStackSize, function pointers
    "emu_histogram.cu": ("262144",),  # per-warp shared-memory atomics, 8-bit per-thread counters
    "emu_eigen.cu": (),               # bisection: shared intervals, scans in device functions, offsets of -1
    "emu_thrust.cu": ("5000",),       # thrust sort/scan/reduce/copy_if, CUB radix sort/scan/reduce/select
    "emu_reduce.cu": (),              # the reduction sample's patterns on 16M ints: ballot-masked shfl_down,
                                      # tiles of 1-1024 threads (cg::reduce, named barriers with counts),
                                      # coalesced_threads, labeled_partition
}


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_real_program_runs_on_emulated_gpu(program, cuda_build, daemon, run):
    exe = cuda_build(program)
    proc = run(exe, [daemon], *PROGRAMS[program])
    assert f"PASS {program[:-3]}" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.emu_only("the emulator's handling of PTX for a newer architecture than the device's")
def test_thrust_and_cub_shipped_as_compute_120_ptx_only(cuda_build, daemon, run):
    # as CuPy ships its prebuilt CUB and Thrust kernels: PTX for compute_120 alone, no SASS the device could run;
    # the newest PTX is translated, kernel by kernel at first launch (emu/ptx/index.py)
    exe = cuda_build("emu_thrust.cu", "-gencode", "arch=compute_120,code=compute_120")
    proc = run(exe, [daemon], "5000")
    assert "PASS emu_thrust" in proc.stdout, proc.stdout + proc.stderr


BENCH = {
    "black_scholes.cu": ("20000", "2"),          # option pricing (expf/logf/rsqrt/division heavy)
    "streams_overlap.cu": ("65536", "4", "2"),   # kernels and async copies in 4 streams
}


@pytest.mark.parametrize("program", list(BENCH))
def test_benchmark_program_is_correct_with_native_code(program, daemon_factory, run):
    # bench/cuda programs at small sizes, with native code for every launch (the speed-up of large ones)
    exe = build_cuda(ROOT / "bench" / "cuda" / program)
    daemon = daemon_factory(env={"PYVGPU_EMU_NATIVE": "on"})
    proc = run(exe, [daemon], *BENCH[program])
    assert f"PASS {program[:-3]}" in proc.stdout, proc.stdout + proc.stderr
