"""Diverged blocks run over their active lanes only (translator/kernel.py's sparse variant, runtime/sparse.py) give
the same bits as the same blocks run masked over the whole chunk: registers, memory, atomics' old values in lane
order, warp operations among the few lanes left, and the same error at the same instruction. Each kernel runs with
`sparse_divisor` 1 (every diverged block that has a sparse variant takes it) and 0 (none does), NumPy only and with
native runs (which masked and sparse blocks now take too), on random inputs whose lanes leave a loop at random
iterations, so the loop's blocks run over random, shrinking lane sets; the integer results and the atomic total
are also checked against a host model."""
from __future__ import annotations

import struct
import traceback

import numpy as np
import pytest

from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.errors import CudaError

NT = 128            # threads per CTA
WORDS = 8           # output words per thread
DATA = 1024         # input words (a thread's flags, then data the loop gathers from)

# Thread g loops (flags & 15) times; bit 8 of its flags guards an add, bit 9 a store. The loop's blocks use every
# family a sparse block may hold: integer and float ALU (native runs where native code is on), guarded
# instructions, special registers, global loads gathered by a data-dependent index, shared loads and stores, a
# generic load through cvta, local stores and loads, global and shared atomics whose old values depend on lane
# order, global stores; then warp operations among the lanes still looping (activemask, ballot, shfl.down).
KERNEL = r"""
.version 7.0
.target sm_75
.address_size 64

.visible .entry k(.param .u64 inp, .param .u64 out, .param .u64 cnt)
{
    .reg .pred %p<8>;
    .reg .b32 %r<48>;
    .reg .b64 %rd<24>;
    .reg .f32 %f<8>;
    .shared .align 4 .b32 sh[128];
    .local .align 4 .b32 loc[8];

    ld.param.u64 %rd1, [inp];
    ld.param.u64 %rd2, [out];
    ld.param.u64 %rd3, [cnt];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.s32 %r4, %r2, %r3, %r1;
    mul.wide.u32 %rd4, %r4, 4;
    add.s64 %rd5, %rd1, %rd4;
    ld.global.u32 %r5, [%rd5];
    shl.b32 %r6, %r1, 2;
    mov.u32 %r7, sh;
    add.u32 %r8, %r7, %r6;
    st.shared.u32 [%r8], %r5;
    bar.sync 0;
    and.b32 %r9, %r5, 15;
    mov.u32 %r10, 0;
    mov.u32 %r11, %r5;
    cvt.rn.f32.u32 %f1, %r5;
    mov.u32 %r12, 0;
    mov.u32 %r40, 0;
    mul.wide.u32 %rd20, %r4, 32;
    add.s64 %rd21, %rd2, %rd20;
    and.b32 %r17, %r5, 256;
    setp.ne.u32 %p2, %r17, 0;
    and.b32 %r18, %r5, 512;
    setp.ne.u32 %p5, %r18, 0;
    mov.u64 %rd23, %rd1;
LOOP:
    setp.ge.u32 %p1, %r10, %r9;
    @%p1 mov.u64 %rd23, 3;
    @%p1 bra DONE;
    add.u32 %r13, %r11, %r10;
    mul.lo.u32 %r14, %r13, -1640531535;
    xor.b32 %r11, %r14, %r5;
    shr.u32 %r15, %r11, 7;
    min.u32 %r16, %r15, %r13;
    @%p2 add.u32 %r11, %r11, %r16;
    selp.b32 %r19, %r16, %r15, %p2;
    cvt.rn.f32.u32 %f2, %r19;
    fma.rn.f32 %f1, %f1, 0f3F000000, %f2;
    div.rn.f32 %f3, %f1, %f2;
    sqrt.rn.f32 %f4, %f3;
    add.f32 %f1, %f1, %f4;
    and.b32 %r20, %r11, 1023;
    mul.wide.u32 %rd6, %r20, 4;
    add.s64 %rd7, %rd1, %rd6;
    ld.global.u32 %r21, [%rd7];
    ld.global.u32 %r43, [%rd23+8];
    add.u32 %r22, %r1, %r10;
    and.b32 %r22, %r22, 127;
    shl.b32 %r23, %r22, 2;
    add.u32 %r24, %r7, %r23;
    ld.shared.u32 %r25, [%r24];
    cvt.u64.u32 %rd8, %r24;
    cvta.shared.u64 %rd9, %rd8;
    ld.u32 %r26, [%rd9];
    xor.b32 %r21, %r21, %r43;
    atom.global.add.u32 %r29, [%rd3], %r20;
    st.shared.u32 [%r8], %r11;
    mov.u64 %rd10, loc;
    and.b32 %r27, %r10, 7;
    mul.wide.u32 %rd11, %r27, 4;
    add.s64 %rd12, %rd10, %rd11;
    st.local.u32 [%rd12], %r11;
    ld.local.u32 %r28, [loc+4];
    atom.shared.exch.b32 %r30, [%r7], %r4;
    atom.global.cas.b32 %r31, [%rd3+4], %r30, %r4;
    add.u32 %r12, %r12, %r29;
    xor.b32 %r12, %r12, %r30;
    add.u32 %r12, %r12, %r31;
    add.u32 %r12, %r12, %r21;
    xor.b32 %r12, %r12, %r25;
    add.u32 %r12, %r12, %r26;
    xor.b32 %r12, %r12, %r28;
    mov.u32 %r32, %laneid;
    add.u32 %r12, %r12, %r32;
    @%p5 st.global.u32 [%rd21+28], %r12;
WARP:
    activemask.b32 %r33;
    vote.sync.ballot.b32 %r34, %p2, %r33;
    shfl.sync.down.b32 %r35|%p3, %r11, 1, 31, %r33;
    selp.b32 %r36, 7, 3, %p3;
    xor.b32 %r40, %r40, %r34;
    add.u32 %r40, %r40, %r35;
    add.u32 %r40, %r40, %r36;
    add.u32 %r10, %r10, 1;
    bra.uni LOOP;
DONE:
    st.global.u32 [%rd21], %r11;
    mov.b32 %r41, %f1;
    st.global.u32 [%rd21+4], %r41;
    st.global.u32 [%rd21+8], %r12;
    st.global.u32 [%rd21+12], %r10;
    st.global.u32 [%rd21+16], %r40;
    ld.shared.u32 %r42, [%r8];
    st.global.u32 [%rd21+20], %r42;
    ret;
}
"""

# The same loop with one instruction that faults for one thread (the placeholder's lane and iteration).
FAULTS = {
    "global": ("ld.global.u32 %r45, [%rd22];", "cudaErrorIllegalAddress"),
    "misaligned": ("ld.global.u32 %r45, [%rd7+2];", "cudaErrorMisalignedAddress"),
    "shared": ("ld.shared.u32 %r45, [%r7+4096];", "cudaErrorIllegalAddress"),
    "local": ("st.local.u32 [loc+65536], %r45;", "cudaErrorIllegalAddress"),
    "atomic": ("atom.global.add.u32 %r45, [%rd22], 1;", "cudaErrorIllegalAddress"),
}


def fault_kernel(kind: str, lane: int, at: int) -> str:
    """KERNEL with, at the top of the loop's body, `kind`'s faulting access for thread `lane` at iteration `at`."""
    ins, _ = FAULTS[kind]
    guard = (f"    setp.eq.u32 %p6, %r4, {lane};\n    setp.eq.and.u32 %p6, %r10, {at}, %p6;\n"
             f"    mov.u64 %rd22, 16;\n    mov.u32 %r45, 0;\n    @%p6 {ins}\n")
    return KERNEL.replace("    add.u32 %r13, %r11, %r10;\n", guard + "    add.u32 %r13, %r11, %r10;\n", 1)


def flags_for(rng, nthreads: int, density: float) -> np.ndarray:
    """Per-thread flags: loop counts (0 for about 1 - density of the threads, so the loop starts with a random
    lane subset), guard bits, and data in the high bits."""
    count = rng.integers(1, 16, nthreads)
    count[rng.random(nthreads) >= density] = 0
    flags = rng.integers(0, 1 << 32, DATA, dtype=np.uint64).astype(np.uint32)
    flags[:nthreads] = (flags[:nthreads] & ~np.uint32(0x3FF)) | count.astype(np.uint32) | \
        (rng.integers(0, 4, nthreads).astype(np.uint32) << 8)
    return flags


def run(ptx: str, flags: np.ndarray, ncta: int, limits: EmuLimits):
    """(output words, counter words, the CudaError raised or None) of one launch."""
    mem = DeviceMemory(1 << 40, 1 << 22)
    mod = EmuModule.load(ptx.encode(), mem, limits=limits)
    n = ncta * NT
    inp, out, cnt = mem.alloc(DATA * 4), mem.alloc(n * WORDS * 4), mem.alloc(8)
    mem.write(inp, flags.tobytes())
    mem.fill(out, 0, n * WORDS * 4)
    mem.fill(cnt, 0, 8)
    err = None
    try:
        mod.launch("k", (ncta, 1, 1), (NT, 1, 1), 0, struct.pack("<QQQ", inp, out, cnt))
    except CudaError as e:
        err = e
    words = np.frombuffer(bytes(mem.read(out, n * WORDS * 4)), np.uint32).reshape(n, WORDS)
    return words, np.frombuffer(bytes(mem.read(cnt, 8)), np.uint32), err


def host_model(flags: np.ndarray, nthreads: int):
    """Each thread's final %r11 and loop count, and the global counter's total (the atomic adds' sum)."""
    r11 = np.zeros(nthreads, np.uint32)
    total = 0
    for g in range(nthreads):
        f = int(flags[g])
        x = f
        for i in range(f & 15):
            r13 = (x + i) & 0xFFFFFFFF
            x = ((r13 * 0x9E3779B1) & 0xFFFFFFFF) ^ f
            r16 = min(x >> 7, r13)
            if f & 256:
                x = (x + r16) & 0xFFFFFFFF
            total += x & 1023
        r11[g] = x
    return r11, total & 0xFFFFFFFF


def in_sparse_block(e: BaseException) -> bool:
    """Whether the error was raised inside a sparse block's body (translator/kernel.py: _sparse<index>); the
    launch raises it again with the kernel's name, the first one is its context."""
    while e is not None:
        if any(f.name.startswith("_sparse") for f in traceback.extract_tb(e.__traceback__)):
            return True
        e = e.__context__
    return False


def limits(native: str, divisor: int) -> EmuLimits:
    # (the lockstep path's sparse blocks: stage 3 would take these kernels, their warp operations included)
    return EmuLimits(threadgen=False, ctagen=False, native=native, sparse_divisor=divisor)


@pytest.mark.parametrize("native", ["off", "on"])
@pytest.mark.parametrize("density,ncta,seed", [(0.02, 4, 1), (0.2, 3, 2), (0.6, 2, 3), (1.0, 1, 4)])
def test_sparse_blocks_give_the_masked_bits(native, density, ncta, seed, sparse_calls):
    rng = np.random.default_rng(seed)
    flags = flags_for(rng, ncta * NT, density)
    reference = run(KERNEL, flags, ncta, limits("off", 0))     # NumPy, masked: the path both are held to
    masked = run(KERNEL, flags, ncta, limits(native, 0))
    assert sparse_calls[0] == 0
    sparse = run(KERNEL, flags, ncta, limits(native, 1))
    assert sparse_calls[0] > 0, "no block ran sparse"
    assert reference[2] is None and masked[2] is None and sparse[2] is None, (masked[2], sparse[2])
    r11, total = host_model(flags, ncta * NT)
    assert np.array_equal(reference[0][:, 0], r11)
    assert np.array_equal(reference[0][:, 3], flags[:ncta * NT] & 15)
    assert int(reference[1][0]) == total
    for name, got in (("masked", masked), ("sparse", sparse)):
        bad = np.argwhere(got[0] != reference[0])
        assert bad.size == 0, f"{name}: thread, word {bad[:5].tolist()}: {got[0][tuple(bad[0])]:#x} against " \
                              f"{reference[0][tuple(bad[0])]:#x}"
        assert np.array_equal(got[1], reference[1]), name


def test_native_runs_in_masked_and_sparse_blocks():
    """With native code the loop's runs (ALU, and loads without stores) are C calls in the masked block (over every
    lane, kept for the block's lanes: _where; a load of an inactive lane's stale address declines the run) and in
    the sparse one (ALU over the gathered lanes; its runs that load decline), so the comparisons above cover
    them."""
    mem = DeviceMemory(1 << 40, 1 << 22)
    kern = EmuModule.load(KERNEL.encode(), mem, limits=limits("on", 1)).kernel("k")
    assert kern.native_make() is not None
    src = kern.native_source
    body = src[src.index("def _sparse3("):src.index("def _sparse7(")]
    assert "_o = _nr" in body
    masked = src[src.index("    def m3(m):"):src.index("    def s3(_i):")]
    assert "_o = _nr" in masked and "= _where(m, _o[" in masked
    assert "_mc = S.memctx()" in masked and "_mc = S.memctx()" in body     # a run that loads, in both


def test_the_default_divisor_takes_the_sparse_path_for_few_lanes(sparse_calls):
    """At the default (a quarter of the chunk's lanes at most), the loop of a few lanes runs sparse, with the same
    bits as masked."""
    assert EmuLimits().sparse_divisor == 4
    flags = flags_for(np.random.default_rng(9), 4 * NT, 0.05)
    default = run(KERNEL, flags, 4, EmuLimits(threadgen=False, native="off"))
    assert sparse_calls[0] > 0
    masked = run(KERNEL, flags, 4, limits("off", 0))
    assert np.array_equal(default[0], masked[0]) and np.array_equal(default[1], masked[1])


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_a_fault_among_few_lanes_is_the_same_error(kind, sparse_calls):
    """A faulting access by one of few active lanes raises the same error (code and message: the address, the
    space) with the same memory left behind as the masked block."""
    flags = flags_for(np.random.default_rng(5), 3 * NT, 0.1)
    lane = int(np.flatnonzero((flags[:3 * NT] & 15) >= 4)[1])
    ptx = fault_kernel(kind, lane, 3)
    masked = run(ptx, flags, 3, limits("off", 0))
    sparse = run(ptx, flags, 3, limits("off", 1))
    assert sparse_calls[0] > 0
    code = FAULTS[kind][1]
    assert masked[2] is not None and sparse[2] is not None
    assert code in str(masked[2]), masked[2]
    assert str(masked[2]) == str(sparse[2])
    assert in_sparse_block(sparse[2]), "the fault was not in a sparse block"
    assert not in_sparse_block(masked[2])
    assert np.array_equal(masked[0], sparse[0]) and np.array_equal(masked[1], sparse[1])
