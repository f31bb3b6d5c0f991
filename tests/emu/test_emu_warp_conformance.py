"""Warp-level conformance (issue 19 part 1): shfl.sync in its four modes, vote.sync, redux.sync, match.sync,
activemask and bar.warp.sync driven with random run-time member masks, operands, divergent paths, exited lanes,
guards and partial warps (hypothesis), against the host model of tests/differential/warp_cases.py written from
the PTX ISA; and the fixed differential set that tests/differential/run.py checks on a real GPU: the emulator
still gives the outputs recorded in tests/differential/expected_emu.npz, and those match the model."""
from __future__ import annotations

import shutil
import struct
import subprocess
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from differential import run as diffrun
from differential.warp_cases import FORMS, WORDS_OUT, Case, compare, fixed_cases, kernel_ptx, make_case, model
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule

_MEM = DeviceMemory(1 << 40, 1 << 24)


@lru_cache(maxsize=None)
def _module(name: str) -> EmuModule:
    return EmuModule.load(kernel_ptx(FORMS[name]).encode(), _MEM)


def emulate(case: Case) -> np.ndarray:
    mod = _module(case.name)
    inp = _MEM.alloc(case.inp.nbytes)
    out = _MEM.alloc(case.nthreads * WORDS_OUT * 4)
    try:
        _MEM.write(inp, case.inp.tobytes())
        _MEM.fill(out, 0, case.nthreads * WORDS_OUT * 4)
        mod.launch("k", (1, 1, 1), (case.nthreads, 1, 1), 0, struct.pack("<QQ", inp, out))
        return np.frombuffer(bytes(_MEM.read(out, case.nthreads * WORDS_OUT * 4)), np.uint32) \
            .reshape(case.nthreads, WORDS_OUT).copy()
    finally:
        _MEM.free(inp)
        _MEM.free(out)


@pytest.mark.parametrize("form", list(FORMS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), nthreads=st.sampled_from([None, 32, 64, 96]))
def test_warp_instruction_matches_the_isa_model(form, seed, nthreads):
    case = make_case(FORMS[form], seed, nthreads)
    diffs = compare(emulate(case), model(case))
    assert not diffs, f"{form} seed {seed} ({case.nthreads} threads):\n" + "\n".join(diffs[:8])


def test_divergent_paths_really_diverge_and_exit():
    # the cases are only meaningful if both paths and exited lanes occur: check the generator's spread
    cases = fixed_cases()
    groups = np.concatenate([c.inp[:, 4] for c in cases])
    assert {0, 1, 2} <= set(groups.tolist())
    extra = [c for c in cases if any(int(c.inp[t, 3]) != sum(1 << (u % 32) for u in range(t - t % 32,
             min(c.nthreads, t - t % 32 + 32)) if c.inp[u, 4] == c.inp[t, 4]) for t in range(c.nthreads)
             if c.inp[t, 4])]
    assert extra, "some member masks name exited lanes"


def test_differential_set_matches_the_recorded_emulator_outputs_and_the_model():
    expected = diffrun.load_expected()
    cases = fixed_cases()
    assert sorted(expected) == sorted(diffrun.case_key(i, c) for i, c in enumerate(cases))
    for i, case in enumerate(cases):
        got = emulate(case)
        key = diffrun.case_key(i, case)
        np.testing.assert_array_equal(got, expected[key], err_msg=key)
        assert not compare(got, model(case)), key


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (the CUDA toolkit) is not installed")
def test_differential_ptx_assembles_for_its_target_and_a_newer_gpu(tmp_path):
    # What a real GPU's JIT does with each case: ptxas for the case's own target and for sm_90 (real-GPU run 1:
    # redux.sync under .target sm_75 was refused with cudaErrorInvalidPtx)
    for form in FORMS.values():
        src = tmp_path / "k.ptx"
        src.write_text(kernel_ptx(form))
        for arch in (form.target, "sm_90"):
            r = subprocess.run(["ptxas", f"-arch={arch}", str(src), "-o", str(tmp_path / "k.cubin")],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, f"{form.name} for {arch}: {r.stderr}"


def test_differential_runner_through_an_emu_daemon(daemon):
    # the hook tools/gpu_check.py calls against a cuda daemon, here against the emulated GPU
    failures = diffrun.run_all("127.0.0.1", daemon.port, limit=6)
    assert failures == [], failures
