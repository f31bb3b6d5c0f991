"""Thread-at-a-time native code (translator/threadgen.py): an eligible kernel runs as one C function over the chunk's
threads and gives the lockstep NumPy code's memory bit for bit; a fault is the same error; an access the C code
cannot serve (a reserved range) is served by Python; an endless loop still ends in cudaErrorLaunchTimeout; kernels
with `bar.sync 0` run a CTA's threads in phases between barriers, with the lockstep path's results (host results
too); kernels with other barriers, warp operations, atomics, volatile global accesses or warp-synchronous shared
memory keep the lockstep path; PYVGPU_EMU_THREADGEN=0 turns it off."""
from __future__ import annotations

import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.translator import threadgen
from pyvgpu_daemon.errors import CudaError, code_of

from test_emu_native import BAD_LOADS, KERNEL, LOADS, _blob, values

# test_emu_native's kernels, made eligible: its float kernel without cvt.rzi (no C form), its loads kernel with each
# thread reading back its own shared slot instead of a neighbour's after a barrier
FLOATS = KERNEL.replace("cvt.rzi.s32.f32 %r6, %f12;", "mov.b32 %r6, %f12;")
LOADS_T = LOADS.replace("  bar.sync 0;\n", "").replace("xor.b32 %r9, %r1, 5;", "xor.b32 %r9, %r1, 0;")
assert FLOATS != KERNEL and LOADS_T != LOADS

ON = dict(native="on", ctagen=False)          # threadgen is on by default (ctagen, which takes most barrier
#                                               kernels first, has its own tests: test_emu_ctagen.py)
OFF = dict(native="off")                      # the lockstep NumPy code


def _module(ptx: str, mode: dict, mem: DeviceMemory, **kw) -> EmuModule:
    return EmuModule.load(ptx.encode(), mem, limits=EmuLimits(**mode, **kw))


def _thread_code(mod: EmuModule, name: str) -> bool:
    return isinstance(mod.kernel(name).native_make(), threadgen.ThreadCode)


HEAD = ".version 9.0\n.target sm_75\n.address_size 64\n"

# simple_streams' kernel (bench/cuda/simple_streams.cu), as nvcc writes it: a counted loop of dependent global
# loads and stores, parameters by name
STREAM = HEAD + """
.visible .entry add_factor(.param .u64 data, .param .u64 factor, .param .u32 iterations)
{
  .reg .pred %p<6>; .reg .b32 %r<31>; .reg .b64 %rd<7>;
  ld.param.u64 %rd3, [data];
  ld.param.u64 %rd4, [factor];
  ld.param.u32 %r13, [iterations];
  cvta.to.global.u64 %rd1, %rd4;
  setp.lt.s32 %p1, %r13, 1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd5, %rd3;
  mov.u32 %r14, %tid.x;
  mov.u32 %r15, %ctaid.x;
  mov.u32 %r16, %ntid.x;
  mad.lo.s32 %r17, %r15, %r16, %r14;
  mul.wide.s32 %rd6, %r17, 4;
  add.s64 %rd2, %rd5, %rd6;
  ld.global.u32 %r29, [%rd2];
LOOP:
  ld.global.u32 %r26, [%rd1];
  add.s32 %r29, %r29, %r26;
  st.global.u32 [%rd2], %r29;
  add.s32 %r13, %r13, -1;
  setp.ne.s32 %p5, %r13, 0;
  @%p5 bra LOOP;
DONE:
  ret;
}
"""

# every position special register, 3-D blocks and grids; per-thread shared and local scratch (no barrier: each
# thread reads back only what it wrote), generic addresses, vector and narrow stores, guarded accesses
SHAPE = HEAD + """
.visible .entry shape(.param .u64 out)
{
  .reg .pred %p<4>; .reg .b16 %h<4>; .reg .b32 %r<40>; .reg .b64 %rd<20>;
  .shared .align 16 .b8 sh[4096];
  .local .align 16 .b8 loc[16];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; mov.u32 %r3, %tid.z;
  mov.u32 %r4, %ntid.x; mov.u32 %r5, %ntid.y; mov.u32 %r6, %ntid.z;
  mov.u32 %r7, %ctaid.x; mov.u32 %r8, %ctaid.y; mov.u32 %r9, %ctaid.z;
  mov.u32 %r10, %nctaid.x; mov.u32 %r11, %nctaid.y;
  mov.u32 %r12, %laneid; mov.u32 %r13, %warpid;
  mad.lo.s32 %r14, %r3, %r5, %r2;
  mad.lo.s32 %r14, %r14, %r4, %r1;          // thread in block
  mad.lo.s32 %r15, %r9, %r11, %r8;
  mad.lo.s32 %r15, %r15, %r10, %r7;          // block in grid
  mul.lo.s32 %r16, %r4, %r5;
  mul.lo.s32 %r16, %r16, %r6;
  mad.lo.s32 %r17, %r15, %r16, %r14;         // global thread
  shl.b32 %r18, %r2, 8;  or.b32 %r18, %r18, %r1;
  shl.b32 %r19, %r3, 16; or.b32 %r18, %r18, %r19;
  shl.b32 %r19, %r12, 24; or.b32 %r18, %r18, %r19;
  shl.b32 %r20, %r8, 8;  or.b32 %r20, %r20, %r7;
  shl.b32 %r19, %r9, 16; or.b32 %r20, %r20, %r19;
  shl.b32 %r19, %r13, 24; or.b32 %r20, %r20, %r19;
  mov.u32 %r21, sh;
  shl.b32 %r22, %r14, 3;
  add.s32 %r23, %r21, %r22;
  st.shared.v2.u32 [%r23], {%r18, %r20};
  mov.u64 %rd2, loc;
  cvta.local.u64 %rd3, %rd2;
  st.u32 [%rd3+4], %r17;                      // generic store into the local window
  cvt.u64.u32 %rd4, %r23;
  cvta.shared.u64 %rd5, %rd4;
  ld.v2.u32 {%r24, %r25}, [%rd5];             // generic load from the shared window
  ld.local.u32 %r26, [%rd2+4];
  mul.wide.u32 %rd6, %r17, 16;
  add.s64 %rd7, %rd1, %rd6;
  st.global.v4.u32 [%rd7], {%r24, %r25, %r26, %r14};
  setp.eq.s32 %p1, %r12, 3;
  cvt.u16.u32 %h1, %r12;
  @%p1 st.global.u8 [%rd7+12], %h1;           // a guarded narrow store: lane 3 only
  @!%p1 ld.global.u16 %h2, [%rd7];
  @!%p1 st.global.u16 [%rd7+14], %h2;
  ret;
}
"""

LOOP = HEAD + """
.visible .entry spin(.param .u64 out)
{
  .reg .pred %p<2>; .reg .b32 %r<4>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, 0;
AGAIN:
  add.s32 %r1, %r1, 1;
  setp.ne.s32 %p1, %r1, 0;
  @%p1 bra AGAIN;
  st.global.u32 [%rd1], %r1;
  ret;
}
"""


def _stream(mode: dict, n: int, block: int, base_region: bool = False, **kw) -> tuple[bytes, EmuModule]:
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(STREAM, mode, mem, **kw)
    owner = mem
    if base_region:                        # the data in a reserved range outside the heap (emu/vmm.py's regions)
        owner = DeviceMemory((1 << 40) + (1 << 30), 1 << 22)
        mem.add_region(owner)
    data = owner.alloc(4 * n)
    factor = mem.alloc(4)
    owner.write(data, np.arange(n, dtype=np.int32).tobytes())
    mem.write(factor, struct.pack("<i", 7))
    mod.launch("add_factor", (n // block, 1, 1), (block, 1, 1), 0, struct.pack("<QQi", data, factor, 5))
    return bytes(owner.read(data, 4 * n)), mod


def test_a_loop_of_loads_and_stores_gives_the_same_bits_as_numpy():
    on, mod = _stream(ON, 4096, 128)
    off, _ = _stream(OFF, 4096, 128)
    assert _thread_code(mod, "add_factor")
    assert on == off == (np.arange(4096, dtype=np.int32) + 35).tobytes()


def test_suspending_at_every_backward_branch_changes_nothing(monkeypatch):
    """The function suspends (R_TICK) and resumes where it stopped; with a tiny period it does so inside every
    thread's loop."""
    monkeypatch.setattr(threadgen, "TICK_EVERY", 3)
    on, _ = _stream(ON, 1024, 64)
    assert on == (np.arange(1024, dtype=np.int32) + 35).tobytes()


def test_a_reserved_range_is_served_by_python():
    """Global memory outside the heap (a VMM reservation) is no fault: each access suspends the function (R_SLOW) and
    runtime/spaces.py serves it."""
    on, mod = _stream(ON, 256, 64, base_region=True)
    assert on == (np.arange(256, dtype=np.int32) + 35).tobytes()
    code = mod.kernel("add_factor").native_make()
    assert isinstance(code, threadgen.ThreadCode) and code.suspended == 256 * 6    # its first load, 5 stores


def test_a_kernel_whose_accesses_python_serves_runs_as_lockstep_code_after_its_first_chunk():
    """One Python call per access is far slower than the lockstep code: once a chunk had more of them than
    UNFIT_SLOW_SHARE of its threads, later launches of the kernel run as lockstep code, with the same results."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(STREAM, ON, mem)
    owner = DeviceMemory((1 << 40) + (1 << 30), 1 << 22)
    mem.add_region(owner)
    n, block = 256, 64
    data, factor = owner.alloc(4 * n), mem.alloc(4)
    owner.write(data, np.arange(n, dtype=np.int32).tobytes())
    mem.write(factor, struct.pack("<i", 7))
    code = mod.kernel("add_factor").native_make()
    assert isinstance(code, threadgen.ThreadCode) and not code.unfit
    for k in (1, 2):
        mod.launch("add_factor", (n // block, 1, 1), (block, 1, 1), 0, struct.pack("<QQi", data, factor, 5))
        assert bytes(owner.read(data, 4 * n)) == (np.arange(n, dtype=np.int32) + 35 * k).tobytes()
        assert code.unfit and code.suspended == 256 * 6      # the second launch: no access served by Python


@pytest.mark.parametrize("grid, block", [((3, 2, 2), (8, 4, 2)), ((5, 1, 1), (96, 1, 1)), ((1, 3, 1), (7, 1, 5))])
def test_position_registers_shared_local_generic_and_guarded_accesses(grid, block):
    threads = int(np.prod(grid)) * int(np.prod(block))
    outs = []
    for mode in (ON, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(SHAPE, mode, mem, lanes_per_chunk=128)       # several chunks: cta0 > 0
        out = mem.alloc(16 * threads)
        mod.launch("shape", grid, block, 0, struct.pack("<Q", out))
        outs.append(bytes(mem.read(out, 16 * threads)))
        if mode is ON:
            assert _thread_code(mod, "shape")
    assert outs[0] == outs[1]
    words = np.frombuffer(outs[0], np.uint32).reshape(threads, 4)
    assert (words[:, 2] == np.arange(threads)).all()


def test_float_kernel_gives_the_same_bits_as_numpy():
    data = np.concatenate([values("f32"), values("f32")]).view(np.float32)
    outs = []
    for mode in (ON, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(FLOATS, mode, mem)
        n = data.size // 2
        src, dst = mem.alloc(data.nbytes), mem.alloc(data.nbytes)
        mem.write(src, data.tobytes())
        mod.launch("k", ((n + 255) // 256, 1, 1), (256, 1, 1), 0, struct.pack("<QQI", src, dst, n))
        outs.append(bytes(mem.read(dst, data.nbytes)))
        if mode is ON:
            assert _thread_code(mod, "k")
    assert outs[0] == outs[1] and any(outs[0])         # (and the kernel wrote its results: dst starts zeroed)


def _loads(mode: dict, kernel: str, params) -> bytes:
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(LOADS_T, mode, mem)
    data = np.random.default_rng(11).integers(0, 1 << 32, 64 * 4, dtype=np.uint64).astype(np.uint32)
    src, dst = mem.alloc(data.nbytes), mem.alloc(64 * 128)
    mem.write(src, data.tobytes())
    mod.launch(kernel, (1, 1, 1), (64 if kernel == "ld" else 32, 1, 1), 0, params(src, dst))
    if mode is ON:
        assert _thread_code(mod, kernel)
    return bytes(mem.read(dst, 64 * 128))


def test_loads_of_every_space_give_the_same_bits_as_numpy():
    on = _loads(ON, "ld", _blob)
    assert on == _loads(OFF, "ld", _blob) and any(on)      # (and the kernel wrote its results: dst starts zeroed)


@BAD_LOADS
def test_a_bad_access_is_the_same_error(gofs, sofs, lofs):
    def params(src, dst):
        return struct.pack("<QQqII", src, dst, gofs, sofs & 0xFFFFFFFF, lofs & 0xFFFFFFFF)
    errors = []
    for mode in (ON, OFF):
        with pytest.raises(CudaError) as e:
            _loads(mode, "bad", params)
        errors.append((e.value.code, e.value.message))
    assert errors[0] == errors[1]
    assert errors[0][0] in (code_of("cudaErrorIllegalAddress"), code_of("cudaErrorMisalignedAddress"))


PARAM_STORE = HEAD + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<4>; .reg .b64 %rd<4>;
  mov.u64 %rd1, out;                          // the parameter's generic address (its window)
  ld.u32 %r1, [%rd1];
  add.s32 %r1, %r1, 1;
  st.u32 [%rd1], %r1;
  ret;
}
"""


def test_a_generic_store_to_a_kernel_parameter_is_the_same_error():
    errors = []
    for mode in (ON, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(PARAM_STORE, mode, mem)
        with pytest.raises(CudaError) as e:
            mod.launch("k", (1, 1, 1), (4, 1, 1), 0, struct.pack("<Q", 1234))
        errors.append((e.value.code, e.value.message))
        if mode is ON:
            assert _thread_code(mod, "k")
    assert errors[0] == errors[1] and errors[0][0] == code_of("cudaErrorIllegalAddress")


@pytest.mark.parametrize("mode", [ON, OFF], ids=["threadgen", "numpy"])
def test_an_endless_loop_ends_in_a_launch_timeout(mode):
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(LOOP, mode, mem, max_vector_instructions=2_000_000)
    out = mem.alloc(4)
    with pytest.raises(CudaError) as e:
        mod.launch("spin", (1, 1, 1), (32, 1, 1), 0, struct.pack("<Q", out))
    assert e.value.code == code_of("cudaErrorLaunchTimeout")
    if mode is ON:
        assert _thread_code(mod, "spin")


@pytest.mark.parametrize("body", ["bar.sync 1;", "barrier.sync 0, 64;", "bar.arrive 1, 64;",
                                  "bar.red.popc.u32 %r2, 0, %p1;", "@%p1 bar.sync 0;",
                                  "atom.global.add.u32 %r2, [%rd1], 1;", "ld.volatile.global.u32 %r2, [%rd1];",
                                  "shfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;", "membar.gl;"],
                         ids=["named barrier", "counted barrier", "arrive", "bar.red", "guarded barrier", "atomic",
                              "volatile", "shuffle", "fence"])
def test_kernels_that_could_tell_keep_the_lockstep_path(body):
    ptx = HEAD + f""".visible .entry k(.param .u64 out)
{{
  .reg .pred %p<2>; .reg .b32 %r<4>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  setp.eq.u32 %p1, %r1, 3;
  {body}
  st.global.u32 [%rd1], %r1;
  ret;
}}
"""
    mod = _module(ptx, ON, DeviceMemory(1 << 40, 1 << 24))
    assert not _thread_code(mod, "k")


def test_the_switch_turns_it_off():
    mod = _module(STREAM, dict(native="on", threadgen=False), DeviceMemory(1 << 40, 1 << 24))
    assert not _thread_code(mod, "add_factor") and mod.kernel("add_factor").native_make() is not None
    code = "from pyvgpu_daemon.emu.limits import EmuLimits; print(EmuLimits().threadgen)"
    for value, expect in (("0", "False"), ("1", "True"), (None, "True")):
        env = {k: v for k, v in os.environ.items() if k != "PYVGPU_EMU_THREADGEN"}
        if value is not None:
            env["PYVGPU_EMU_THREADGEN"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expect


def test_a_generator_failure_leaves_the_lockstep_runs(monkeypatch):
    def broken(*a, **kw):
        raise RuntimeError("generator bug")
    monkeypatch.setattr(threadgen, "kernel_source", broken)
    on, mod = _stream(ON, 1024, 64)
    made = mod.kernel("add_factor").native_make()
    assert made is not None and not isinstance(made, threadgen.ThreadCode)     # the native runs serve
    assert on == (np.arange(1024, dtype=np.int32) + 35).tobytes()


# ------------------------------------------------------------------------------------------------- CTA barriers
# `bar.sync 0` (__syncthreads): a CTA's threads run one after the other up to the barrier, then each resumes there.

# Each thread stores its input in its shared slot; threads tid >= live exit (an exited thread counts as arrived);
# after the barrier the others read the slot mirrored in the block (a reversal), store it back into their own slot
# and, after a second barrier, their partner's (tid ^ 1): out = in[block - 1 - (tid ^ 1)] for live pairs.
REVERSE = HEAD + """
.visible .entry rev(.param .u64 out, .param .u64 in, .param .u32 live)
{
  .reg .pred %p<3>; .reg .b32 %r<16>; .reg .b64 %rd<8>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in]; ld.param.u32 %r9, [live];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r5, [%rd4];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  st.shared.u32 [%r8], %r5;
  setp.ge.u32 %p1, %r1, %r9;
  @%p1 bra DONE;
  bar.sync 0;
  sub.s32 %r10, %r2, %r1;
  sub.s32 %r10, %r10, 1;
  shl.b32 %r10, %r10, 2;
  add.s32 %r10, %r6, %r10;
  ld.shared.u32 %r11, [%r10];
  barrier.sync 0;
  st.shared.u32 [%r8], %r11;
  bar.sync 0;
  xor.b32 %r12, %r1, 1;
  shl.b32 %r12, %r12, 2;
  add.s32 %r12, %r6, %r12;
  ld.shared.u32 %r13, [%r12];
  add.s64 %rd5, %rd1, %rd3;
  st.global.u32 [%rd5], %r13;
DONE:
  ret;
}
"""

# A tree reduction: barriers inside a loop, threads skipping the addition (a branch around it) still arrive.
REDUCE = HEAD + """
.visible .entry red(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<3>; .reg .b32 %r<16>; .reg .b64 %rd<8>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.wide.u32 %rd3, %r4, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r5, [%rd4];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  st.shared.u32 [%r8], %r5;
  bar.sync 0;
  shr.u32 %r9, %r2, 1;
LOOP:
  setp.eq.u32 %p1, %r9, 0;
  @%p1 bra END;
  setp.ge.u32 %p2, %r1, %r9;
  @%p2 bra SKIP;
  shl.b32 %r10, %r9, 2;
  add.s32 %r10, %r8, %r10;
  ld.shared.u32 %r11, [%r10];
  ld.shared.u32 %r12, [%r8];
  add.s32 %r12, %r12, %r11;
  st.shared.u32 [%r8], %r12;
SKIP:
  bar.sync 0;
  shr.u32 %r9, %r9, 1;
  bra LOOP;
END:
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  ld.shared.u32 %r13, [sh];
  mul.wide.u32 %rd5, %r3, 4;
  add.s64 %rd6, %rd1, %rd5;
  st.global.u32 [%rd6], %r13;
DONE:
  ret;
}
"""

# The same after a loop (a grid-stride sum of 4 elements per thread): the shape that runs a thread at a time by
# default (threadgen.slower_reason).
GRID_SUM = REDUCE.replace("ld.global.u32 %r5, [%rd4];", """mov.u32 %r5, 0;
  mov.u32 %r14, 0;
  mov.u32 %r15, %nctaid.x;
  mul.lo.s32 %r15, %r15, %r2;
  mul.wide.u32 %rd7, %r15, 4;
GS:
  ld.global.u32 %r16, [%rd4];
  add.s32 %r5, %r5, %r16;
  add.s64 %rd4, %rd4, %rd7;
  add.s32 %r14, %r14, 1;
  setp.lt.u32 %p2, %r14, 4;
  @%p2 bra GS;""").replace("%r<16>", "%r<20>")
assert GRID_SUM != REDUCE

# Divergent barriers: even threads wait at one bar.sync, odd ones at another (the lockstep runtime releases the CTA
# once every thread waits at either), then each reads its partner's slot.
DIVERGENT = HEAD + """
.visible .entry div(.param .u64 out)
{
  .reg .pred %p<2>; .reg .b32 %r<12>; .reg .b64 %rd<6>;
  .shared .align 4 .b8 sh[4096];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, %r2, %r1;
  mul.lo.s32 %r5, %r4, 7;
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  st.shared.u32 [%r8], %r5;
  and.b32 %r9, %r1, 1;
  setp.eq.u32 %p1, %r9, 0;
  @%p1 bra EVEN;
  bar.sync 0;
  ld.shared.u32 %r10, [%r8+-4];
  bra OUT;
EVEN:
  bar.sync 0;
  ld.shared.u32 %r10, [%r8+4];
OUT:
  mul.wide.u32 %rd2, %r4, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r10;
  ret;
}
"""

# scan_batches' scanTiles (bench/cuda/scan_batches.cu) as nvcc 13.0 writes it: a log-step scan in volatile shared
# memory, two barriers per step inside a loop; each thread reads back what it stored itself only after its store.
SCAN_TILES = HEAD + """
.visible .entry scanTiles(.param .u64 p0, .param .u64 p1, .param .u32 p2)
{
  .reg .pred %p<3>; .reg .b32 %r<49>; .reg .b64 %rd<9>;
  .shared .align 4 .b8 s[2048];
  ld.param.u64 %rd1, [p0];
  ld.param.u64 %rd2, [p1];
  ld.param.u32 %r11, [p2];
  cvta.to.global.u64 %rd3, %rd2;
  mov.u32 %r12, %ntid.x;
  mov.u32 %r13, %ctaid.x;
  mov.u32 %r14, %tid.x;
  mad.lo.s32 %r15, %r13, %r12, %r14;
  mul.wide.u32 %rd4, %r15, 16;
  add.s64 %rd5, %rd3, %rd4;
  ld.global.v4.u32 {%r16, %r17, %r18, %r19}, [%rd5];
  mov.u32 %r20, 0;
  add.s32 %r2, %r17, %r16;
  add.s32 %r3, %r2, %r18;
  add.s32 %r4, %r3, %r19;
  shl.b32 %r24, %r14, 1;
  shr.u32 %r5, %r11, 2;
  add.s32 %r25, %r5, -1;
  and.b32 %r26, %r25, %r14;
  sub.s32 %r6, %r24, %r26;
  shl.b32 %r27, %r6, 2;
  mov.u32 %r28, s;
  add.s32 %r29, %r28, %r27;
  st.volatile.shared.u32 [%r29], %r20;
  shl.b32 %r30, %r5, 2;
  add.s32 %r7, %r29, %r30;
  st.volatile.shared.u32 [%r7], %r4;
  setp.lt.u32 %p1, %r11, 8;
  @%p1 bra $L__BB0_3;
  add.s32 %r8, %r6, %r5;
  mov.u32 %r48, 1;
$L__BB0_2:
  bar.sync 0;
  sub.s32 %r32, %r8, %r48;
  shl.b32 %r33, %r32, 2;
  add.s32 %r35, %r28, %r33;
  ld.volatile.shared.u32 %r36, [%r35];
  ld.volatile.shared.u32 %r37, [%r7];
  add.s32 %r38, %r36, %r37;
  bar.sync 0;
  st.volatile.shared.u32 [%r7], %r38;
  shl.b32 %r48, %r48, 1;
  setp.lt.u32 %p2, %r48, %r5;
  @%p2 bra $L__BB0_2;
$L__BB0_3:
  ld.volatile.shared.u32 %r39, [%r7];
  cvta.to.global.u64 %rd6, %rd1;
  add.s64 %rd8, %rd6, %rd4;
  sub.s32 %r44, %r39, %r4;
  add.s32 %r45, %r44, %r3;
  add.s32 %r46, %r44, %r2;
  add.s32 %r47, %r44, %r16;
  st.global.v4.u32 [%rd8], {%r44, %r47, %r46, %r45};
  ret;
}
"""

# Warp-synchronous code (the classic reduction's last warp): volatile shared loads of other lanes' slots between
# stores, with no barrier. A GPU's warps (and the lockstep interpreter) add in lockstep; a thread at a time would not.
WARP_SYNC = HEAD + """
.visible .entry wsync(.param .u64 out, .param .u64 in)
{
  .reg .pred %p<2>; .reg .b32 %r<16>; .reg .b64 %rd<8>;
  .shared .align 4 .b8 sh[512];
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [in];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.u32 %r5, [%rd4];
  mov.u32 %r6, sh;
  shl.b32 %r7, %r1, 2;
  add.s32 %r8, %r6, %r7;
  st.volatile.shared.u32 [%r8], %r5;
  mov.u32 %r9, 0;
  st.volatile.shared.u32 [%r8+128], %r9;
  bar.sync 0;
  ld.volatile.shared.u32 %r11, [%r8+64];
  ld.volatile.shared.u32 %r12, [%r8];
  add.s32 %r12, %r12, %r11;
  st.volatile.shared.u32 [%r8], %r12;
  ld.volatile.shared.u32 %r11, [%r8+32];
  ld.volatile.shared.u32 %r12, [%r8];
  add.s32 %r12, %r12, %r11;
  st.volatile.shared.u32 [%r8], %r12;
  ld.volatile.shared.u32 %r11, [%r8+16];
  ld.volatile.shared.u32 %r12, [%r8];
  add.s32 %r12, %r12, %r11;
  st.volatile.shared.u32 [%r8], %r12;
  ld.volatile.shared.u32 %r11, [%r8+8];
  ld.volatile.shared.u32 %r12, [%r8];
  add.s32 %r12, %r12, %r11;
  st.volatile.shared.u32 [%r8], %r12;
  ld.volatile.shared.u32 %r11, [%r8+4];
  ld.volatile.shared.u32 %r12, [%r8];
  add.s32 %r12, %r12, %r11;
  st.volatile.shared.u32 [%r8], %r12;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  ld.volatile.shared.u32 %r13, [sh];
  st.global.u32 [%rd1], %r13;
DONE:
  ret;
}
"""

# Thread 0 loops (about 2^32 times) before the barrier its CTA's other threads wait at.
RUNAWAY = HEAD + """
.visible .entry runaway(.param .u64 out)
{
  .reg .pred %p<3>; .reg .b32 %r<4>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra WAIT;
  mov.u32 %r2, 1;
AGAIN:
  add.s32 %r2, %r2, 1;
  setp.ne.s32 %p2, %r2, 0;
  @%p2 bra AGAIN;
WAIT:
  bar.sync 0;
  st.global.u32 [%rd1], %r1;
  ret;
}
"""

BOTH = pytest.mark.parametrize("mode", [ON, OFF], ids=["threadgen", "numpy"])


@pytest.fixture
def thread_barriers(monkeypatch):
    """Thread mode for every eligible kernel with barriers, also where the lockstep native code would be faster
    (threadgen.slower_reason: no loop between two barriers)."""
    monkeypatch.setattr(threadgen, "slower_reason", lambda kernel: None)


def test_barriers_run_a_thread_at_a_time_only_where_a_loop_runs_between_two():
    mem = DeviceMemory(1 << 40, 1 << 24)
    for ptx, name, slower in ((REVERSE, "rev", True), (REDUCE, "red", True),
                              (DIVERGENT, "div", True), (RUNAWAY, "runaway", False), (STREAM, "add_factor", False)):
        mod = _module(ptx, ON, mem)
        assert threadgen.eligible_reason(mod.kernel(name)) is None
        assert (threadgen.slower_reason(mod.kernel(name)) is not None) == slower
        assert _thread_code(mod, name) != slower


def _barrier_kernel(ptx: str, name: str, mode: dict, grid: int, block: int, inputs: np.ndarray | None, out_words: int,
                    extra: bytes = b"", in_region: bool = False, **kw) -> tuple[np.ndarray, object]:
    """Run `name` (params: out[, in] + extra) in `mode`; (out as uint32, the kernel's native code)."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(ptx, mode, mem, **kw)
    out = mem.alloc(4 * out_words)
    params = struct.pack("<Q", out)
    if inputs is not None:
        owner = mem
        if in_region:                  # a reserved range outside the heap: every access to it is served by Python
            owner = DeviceMemory((1 << 40) + (1 << 30), 1 << 22)
            mem.add_region(owner)
        src = owner.alloc(inputs.nbytes)
        owner.write(src, inputs.tobytes())
        params += struct.pack("<Q", src)
    mod.launch(name, (grid, 1, 1), (block, 1, 1), 0, params + extra)
    code = mod.kernel(name).native_make() if mode is ON else None
    if mode is ON:
        assert isinstance(code, threadgen.ThreadCode) and code.bar_words > 0
    return np.frombuffer(bytes(mem.read(out, 4 * out_words)), np.uint32), code


@pytest.mark.usefixtures("thread_barriers")
@pytest.mark.parametrize("block, live", [(64, 64), (96, 40), (40, 40)], ids=["all", "some exit", "short warp"])
def test_a_reversal_across_barriers_matches_the_host_and_the_lockstep_path(block, live):
    data = np.random.default_rng(block).integers(0, 1 << 32, 5 * block, dtype=np.uint64).astype(np.uint32)
    outs = [_barrier_kernel(REVERSE, "rev", m, 5, block, data, 5 * block, struct.pack("<I", live),
                            lanes_per_chunk=2 * block)[0] for m in (ON, OFF)]
    tiles = data.reshape(5, block)
    tid = np.arange(block)
    exp = np.where((tid < live) & ((tid ^ 1) < live), tiles[:, block - 1 - (tid ^ 1)], 0).astype(np.uint32)
    # (a live thread whose partner exited reads the partner's slot as the partner left it: its input)
    lonely = (tid < live) & ((tid ^ 1) >= live)
    exp[:, lonely] = tiles[:, (tid ^ 1)[lonely]]
    assert (outs[0] == exp.reshape(-1)).all() and (outs[0] == outs[1]).all()


@pytest.mark.usefixtures("thread_barriers")
@pytest.mark.parametrize("tick", [None, 3], ids=["plain", "suspended in every phase"])
def test_a_tree_reduction_with_barriers_in_a_loop(monkeypatch, tick):
    """Also with the launch's bounds checked (R_TICK) every few instructions: threads suspend and resume inside a
    phase, with earlier threads of their CTA already waiting at the barrier."""
    if tick is not None:
        monkeypatch.setattr(threadgen, "TICK_EVERY", tick)
    data = np.random.default_rng(5).integers(0, 1 << 20, 7 * 256, dtype=np.uint32)
    on, _ = _barrier_kernel(REDUCE, "red", ON, 7, 256, data, 7, lanes_per_chunk=512)
    off, _ = _barrier_kernel(REDUCE, "red", OFF, 7, 256, data, 7, lanes_per_chunk=512)
    assert (on == data.reshape(7, 256).sum(1, dtype=np.uint32)).all() and (on == off).all()


def test_a_loop_then_a_tree_reduction_runs_a_thread_at_a_time_by_default():
    data = np.random.default_rng(9).integers(0, 1 << 20, 4 * 7 * 256, dtype=np.uint32)
    on, _ = _barrier_kernel(GRID_SUM, "red", ON, 7, 256, data, 7, lanes_per_chunk=512)
    off, _ = _barrier_kernel(GRID_SUM, "red", OFF, 7, 256, data, 7, lanes_per_chunk=512)
    exp = data.reshape(4, 7, 256).sum((0, 2), dtype=np.uint32)
    assert (on == exp).all() and (on == off).all()


@pytest.mark.usefixtures("thread_barriers")
def test_threads_waiting_at_different_barriers_are_released_together():
    outs = [_barrier_kernel(DIVERGENT, "div", m, 3, 64, None, 192)[0] for m in (ON, OFF)]
    g = np.arange(192)
    assert (outs[0] == ((g ^ 1) * 7).astype(np.uint32)).all() and (outs[0] == outs[1]).all()


@pytest.mark.usefixtures("thread_barriers")
@pytest.mark.parametrize("size", [4, 64, 1024])
def test_scan_tiles_as_nvcc_writes_it(monkeypatch, size):
    """scan_batches' kernel reads back volatile shared memory its own thread stored since the last barrier: the
    lockstep path runs it (threadgen._warp_synchronous_reason says why), with the host's scan, also where thread
    mode is forced."""
    monkeypatch.setattr(threadgen, "TICK_EVERY", 97)        # suspensions in the middle of phases too
    data = np.random.default_rng(size).integers(0, 256, 4 * 1024, dtype=np.uint32)
    outs = []
    for mode in (ON, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(SCAN_TILES, mode, mem, lanes_per_chunk=512)
        src, dst = mem.alloc(data.nbytes), mem.alloc(data.nbytes)
        mem.write(src, data.tobytes())
        mod.launch("scanTiles", (4, 1, 1), (256, 1, 1), 0, struct.pack("<QQI", dst, src, size))
        outs.append(np.frombuffer(bytes(mem.read(dst, data.nbytes)), np.uint32))
        if mode is ON:
            assert "volatile shared load" in threadgen.eligible_reason(mod.kernel("scanTiles"))
            assert not _thread_code(mod, "scanTiles")
    tiles = data.reshape(-1, size)
    exp = (np.cumsum(tiles, 1, dtype=np.uint32) - tiles).reshape(-1)
    assert (outs[0] == exp).all() and (outs[0] == outs[1]).all()


def test_warp_synchronous_shared_memory_keeps_the_lockstep_path():
    mod = _module(WARP_SYNC, ON, DeviceMemory(1 << 40, 1 << 24))
    assert "warp-synchronous" in threadgen.eligible_reason(mod.kernel("wsync"))
    assert not _thread_code(mod, "wsync")
    data = np.random.default_rng(3).integers(0, 1 << 20, 32, dtype=np.uint32)
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(WARP_SYNC, ON, mem)
    out, src = mem.alloc(4), mem.alloc(data.nbytes)
    mem.write(src, data.tobytes())
    mod.launch("wsync", (1, 1, 1), (32, 1, 1), 0, struct.pack("<QQ", out, src))
    assert struct.unpack("<I", bytes(mem.read(out, 4)))[0] == int(data.sum()) % (1 << 32)


@pytest.mark.usefixtures("thread_barriers")
def test_an_access_served_by_python_between_barriers():
    """The input in a reserved range: each thread's load suspends (R_SLOW) while the threads before it in its CTA
    already wait at the barrier."""
    data = np.arange(128, dtype=np.uint32) * 3 + 1
    on, code = _barrier_kernel(REVERSE, "rev", ON, 2, 64, data, 128, struct.pack("<I", 64), in_region=True)
    off, _ = _barrier_kernel(REVERSE, "rev", OFF, 2, 64, data, 128, struct.pack("<I", 64), in_region=True)
    assert code.suspended == 128 and (on == off).all()
    assert (on == data.reshape(2, 64)[:, 63 - (np.arange(64) ^ 1)].reshape(-1)).all()


@pytest.mark.usefixtures("thread_barriers")
def test_a_fault_after_a_barrier_is_the_same_error():
    errors = []
    for mode in (ON, OFF):
        mem = DeviceMemory(1 << 40, 1 << 24)
        mod = _module(REVERSE, mode, mem)
        src = mem.alloc(4 * 128)
        with pytest.raises(CudaError) as e:      # out: an address nothing is allocated at
            mod.launch("rev", (2, 1, 1), (64, 1, 1), 0, struct.pack("<QQI", (1 << 40) + (1 << 23), src, 64))
        errors.append((e.value.code, e.value.message))
        if mode is ON:
            assert _thread_code(mod, "rev")
    assert errors[0] == errors[1] and errors[0][0] == code_of("cudaErrorIllegalAddress")


@BOTH
def test_a_runaway_thread_before_a_barrier_ends_in_a_launch_timeout(mode):
    mem = DeviceMemory(1 << 40, 1 << 24)
    mod = _module(RUNAWAY, mode, mem, max_vector_instructions=200_000)
    out = mem.alloc(4)
    with pytest.raises(CudaError) as e:
        mod.launch("runaway", (2, 1, 1), (32, 1, 1), 0, struct.pack("<Q", out))
    assert e.value.code == code_of("cudaErrorLaunchTimeout")
    if mode is ON:
        assert _thread_code(mod, "runaway")
