"""What real programs need beyond straight-line kernels, through the whole emulator with hand-written PTX:
predefined identifiers (WARP_SZ, every special register), addresses of kernel parameters (mov, cvta.param, ld.param
and generic loads through them), recursion and calls through registers on a bounded call stack, brx.idx, shared and
local accesses at negative constant offsets, the atomic types of the ISA, and internal faults turned into a sticky
cudaErrorLaunchFailure naming the kernel. Expected values come from the PTX ISA and plain Python."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pyvgpu.protocol import ERROR_CODES
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.ptx.predefined import SPECIAL_REGISTERS
from pyvgpu_daemon.emu.runtime import Chunk
from pyvgpu_daemon.errors import CudaError
from test_emu_runtime import head, run

E = ERROR_CODES


def load(body: str) -> tuple[DeviceMemory, EmuModule]:
    mem = DeviceMemory(1 << 40, 1 << 24)
    return mem, EmuModule.load((head() + body).encode(), mem)


# ---------------------------------------------------------------------------------------------- predefined identifiers
def test_warp_sz_is_the_immediate_32_anywhere():
    body = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, WARP_SZ;
  rem.u32 %r3, %r1, WARP_SZ;
  add.s32 %r4, %r2, -1;
  div.u32 %r5, %r1, WARP_SZ;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r2, %r3, %r4, %r5};
  ret;
}
"""
    v = run(body, 80, 4 * 80).reshape(80, 4)
    t = np.arange(80)
    assert (v[:, 0] == 32).all() and (v[:, 1] == t % 32).all() and (v[:, 2] == 31).all()
    assert (v[:, 3] == t // 32).all()


def test_every_special_register_reads_as_its_type():
    names = sorted(SPECIAL_REGISTERS)
    regs = {"u32": "%r", "u64": "%rd", "pred": "%p"}
    lines, stores = [], []
    for i, name in enumerate(names):
        t = SPECIAL_REGISTERS[name]
        lines.append(f"  mov.{'pred' if t == 'pred' else t} {regs[t]}{i}, {name};")
        if t == "pred":
            lines.append(f"  selp.u64 %rd{i}, 1, 0, %p{i};")
        elif t == "u32":
            lines.append(f"  cvt.u64.u32 %rd{i}, %r{i};")
        stores.append(f"  st.global.u64 [%rdo+{8 * i}], %rd{i};")
    n = len(names)
    body = f"""
.visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<{n}>; .reg .b64 %rd<{n}>; .reg .pred %p<{n}>; .reg .b64 %rdo; .reg .pred %first;
  ld.param.u64 %rdo, [out];
{chr(10).join(lines)}
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, %ctaid.x;
  or.b32 %r0, %r0, %r1;
  setp.ne.u32 %first, %r0, 0;
  @%first bra END;
{chr(10).join(stores)}
END:
  ret;
}}
"""
    v = dict(zip(names, run(body, 64, n, grid=3, dtype=np.uint64).tolist()))
    assert v["%nctaid.x"] == 3 and v["%ntid.x"] == 64 and v["%warpid"] == 0 and v["%laneid"] == 0
    assert v["%nclusterid.x"] == 3 and v["%cluster_nctaid.x"] == 1 and v["%cluster_nctarank"] == 1
    assert v["%is_explicit_cluster"] == 0 and v["%cluster_ctarank"] == 0 and v["%clusterid.x"] == 0
    assert v["%lanemask_eq"] == 1 and v["%lanemask_ge"] == 0xFFFFFFFF and v["%lanemask_lt"] == 0
    assert v["%nsmid"] > v["%smid"] and v["%clock64"] > 0 and v["%globaltimer"] > 0
    assert v["%total_smem_size"] == v["%aggr_smem_size"] and v["%dynamic_smem_size"] == 0
    assert all(v[f"%envreg{i}"] == 0 for i in range(32) if i not in (1, 2))
    assert all(v[f"%pm{i}_64"] == 0 for i in range(8))
    assert (v["%envreg1"] << 32 | v["%envreg2"]) != 0       # the grid workspace a kernel that reads it gets


# ---------------------------------------------------------------------------------------------- parameter addresses
PARAMS = """
.func (.param .b32 rv) second(.param .b64 p)
{
  .reg .b64 %a; .reg .b32 %v;
  ld.param.u64 %a, [p];
  ld.u32 %v, [%a+4];                      // a generic load from the kernel parameter window
  st.param.b32 [rv], %v;
  ret;
}
.visible .entry k(.param .u64 out, .param .align 8 .b8 blob[24])
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p<4>;
  ld.param.u64 %rd1, [out];
  mov.b64 %rd2, blob;                     // the .param-space address of a kernel parameter
  ld.param.u32 %r1, [%rd2+8];
  ld.param.v2.u32 {%r2, %r3}, [%rd2+16];
  cvta.param.u64 %rd3, %rd2;              // ... as a generic address
  ld.u32 %r4, [%rd3+12];
  isspacep.param %p1, %rd3;
  isspacep.global %p2, %rd3;
  selp.u32 %r5, 1, 0, %p1;
  selp.u32 %r6, 1, 0, %p2;
  { .param .b64 q; st.param.b64 [q], %rd3; .param .b32 res;
    call.uni (res), second, (q); ld.param.b32 %r7, [res]; }
  st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
  st.global.v4.u32 [%rd1+16], {%r5, %r6, %r7, 0};
  ret;
}
"""


def test_kernel_parameters_by_address():
    blob = struct.pack("<6I", 11, 22, 33, 44, 55, 66)
    v = run(PARAMS, 32, 8, extra_params=blob)
    assert v.tolist() == [33, 55, 66, 44, 1, 0, 22, 0]


def test_stores_to_kernel_parameters_fault():
    body = """
.visible .entry k(.param .u64 out, .param .u32 x)
{
  .reg .b64 %rd<3>;
  mov.b64 %rd1, x;
  cvta.param.u64 %rd2, %rd1;
  st.u32 [%rd2], 5;
  ret;
}
"""
    mem, mod = load(body)
    with pytest.raises(CudaError) as e:
        mod.launch("k", (1, 1, 1), (32, 1, 1), 0, struct.pack("<QI", mem.alloc(8), 1))
    assert e.value.code == E["cudaErrorIllegalAddress"] and "kernel parameter" in e.value.message


# ---------------------------------------------------------------------------------------------- calls
RECURSIVE = """
.func (.param .b32 rv) fib(.param .b32 n)
{
  .reg .b32 %r<6>; .reg .pred %p;
  ld.param.u32 %r1, [n];
  setp.lt.u32 %p, %r1, 2;
  @%p bra BASE;
  sub.u32 %r2, %r1, 1;
  { .param .b32 a; st.param.b32 [a], %r2; .param .b32 b;
    call.uni (b), fib, (a); ld.param.b32 %r3, [b]; }
  sub.u32 %r2, %r1, 2;
  { .param .b32 a; st.param.b32 [a], %r2; .param .b32 b;
    call.uni (b), fib, (a); ld.param.b32 %r4, [b]; }
  add.u32 %r1, %r3, %r4;
BASE:
  st.param.b32 [rv], %r1;
  ret;
}
.func (.param .b32 rv) twice(.param .b32 x)
{
  .reg .b32 %r<2>;
  ld.param.u32 %r1, [x];
  shl.b32 %r1, %r1, 1;
  st.param.b32 [rv], %r1;
  ret;
}
.func (.param .b32 rv) square(.param .b32 x)
{
  .reg .b32 %r<2>;
  ld.param.u32 %r1, [x];
  mul.lo.u32 %r1, %r1, %r1;
  st.param.b32 [rv], %r1;
  ret;
}
.global .align 8 .u64 ops[2] = {twice, square};
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<8>; .reg .pred %p;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  rem.u32 %r2, %r1, 13;
  { .param .b32 a; st.param.b32 [a], %r2; .param .b32 b;
    call.uni (b), fib, (a); ld.param.b32 %r3, [b]; }
  and.b32 %r4, %r1, 1;
  mul.wide.u32 %rd2, %r4, 8;
  mov.u64 %rd3, ops;
  add.s64 %rd3, %rd3, %rd2;
  ld.global.u64 %rd4, [%rd3];
  setp.lt.u32 %p, %r1, 40;
  { .param .b32 a; st.param.b32 [a], %r1; .param .b32 b;
    proto: .callprototype (.param .b32 _) _ (.param .b32 _);
    @%p call (b), %rd4, (a), proto; ld.param.b32 %r5, [b]; }
  @!%p mov.u32 %r5, 7;
  mul.wide.u32 %rd5, %r1, 8;
  add.s64 %rd6, %rd1, %rd5;
  st.global.v2.u32 [%rd6], {%r3, %r5};
  ret;
}
"""


def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def test_recursion_and_calls_through_a_function_table():
    v = run(RECURSIVE, 64, 128).reshape(64, 2)
    t = np.arange(64)
    assert v[:, 0].tolist() == [_fib(i % 13) for i in t]
    expect = np.where(t < 40, np.where(t % 2 == 0, 2 * t, t * t), 7)
    assert (v[:, 1] == expect).all()


def test_call_through_a_bad_address_is_an_invalid_pc():
    body = RECURSIVE.replace("ld.global.u64 %rd4, [%rd3];", "add.s64 %rd4, %rd3, 4;")
    mem, mod = load(body)
    with pytest.raises(CudaError) as e:
        mod.launch("k", (1, 1, 1), (32, 1, 1), 0, struct.pack("<Q", mem.alloc(512)))
    assert e.value.code == E["cudaErrorInvalidPc"] and e.value.sticky


def test_deep_recursion_needs_a_larger_stack_limit():
    body = """
.func (.param .b32 rv) depth(.param .b32 n)
{
  .reg .b32 %r<4>; .reg .pred %p;
  ld.param.u32 %r1, [n];
  setp.eq.u32 %p, %r1, 0;
  @%p bra DONE;
  sub.u32 %r2, %r1, 1;
  { .param .b32 a; st.param.b32 [a], %r2; .param .b32 b;
    call.uni (b), depth, (a); ld.param.b32 %r3, [b]; }
  add.u32 %r1, %r3, 1;
DONE:
  st.param.b32 [rv], %r1;
  ret;
}
.visible .entry k(.param .u64 out, .param .u32 n)
{
  .reg .b32 %r<3>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  { .param .b32 a; st.param.b32 [a], %r1; .param .b32 b;
    call.uni (b), depth, (a); ld.param.b32 %r2, [b]; }
  st.global.u32 [%rd1], %r2;
  ret;
}
"""
    mem, mod = load(body)
    out = mem.alloc(4)
    with pytest.raises(CudaError) as e:       # CUDA's default 1 KiB stack
        mod.launch("k", (1, 1, 1), (4, 1, 1), 0, struct.pack("<QI", out, 3000))
    assert e.value.code == E["cudaErrorHardwareStackError"]
    mod.launch("k", (1, 1, 1), (4, 1, 1), 0, struct.pack("<QI", out, 3000), stack_size=64 * 1024)
    assert struct.unpack("<I", bytes(mem.read(out, 4)))[0] == 3000


def test_brx_idx_jumps_through_a_label_table():
    body = """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<4>; .reg .b64 %rd<4>; .reg .pred %p;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  rem.u32 %r2, %r1, 3;
  setp.eq.u32 %p, %r1, 31;
  ts: .branchtargets L0, L1, L2;
  @!%p brx.idx %r2, ts;
  mov.u32 %r3, 99;
  bra.uni OUT;
L0:
  mov.u32 %r3, 10;
  bra.uni OUT;
L1:
  mov.u32 %r3, 11;
  bra.uni OUT;
L2:
  mov.u32 %r3, 12;
OUT:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
  ret;
}
"""
    v = run(body, 32, 32)
    assert v.tolist() == [10 + t % 3 for t in range(31)] + [99]
    mem, mod = load(body.replace("rem.u32 %r2, %r1, 3;", "rem.u32 %r2, %r1, 5;"))
    with pytest.raises(CudaError) as e:
        mod.launch("k", (1, 1, 1), (32, 1, 1), 0, struct.pack("<Q", mem.alloc(128)))
    assert e.value.code == E["cudaErrorInvalidPc"]


# ---------------------------------------------------------------------------------------------- memory
def test_shared_and_local_accesses_at_negative_offsets():
    # Every lane together (the converged fast path): loads and stores through a register at offsets below it.
    body = """
.visible .entry k(.param .u64 out)
{
  .local .align 8 .b8 depot[64];
  .shared .align 4 .b8 sm[512];
  .reg .b32 %r<12>; .reg .b64 %rd<6>; .reg .b16 %h<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  shl.b32 %r2, %r1, 2;
  mov.u32 %r3, sm;
  add.u32 %r4, %r3, %r2;
  st.shared.u32 [%r4], %r1;
  bar.sync 0;
  add.u32 %r5, %r4, 8;
  ld.shared.u32 %r6, [%r5+-8];
  ld.shared.u16 %h1, [%r5+-6];
  ld.shared.u8 %h2, [%r5+-8];
  st.shared.u32 [%r5+-4], 7;
  mov.u64 %rd2, depot;
  add.u64 %rd3, %rd2, 32;
  st.local.v2.u32 [%rd3+-16], {%r1, %r6};
  ld.local.u32 %r7, [%rd3+-12];
  cvt.u32.u16 %r8, %h1;
  cvt.u32.u16 %r9, %h2;
  bar.sync 0;
  ld.shared.u32 %r10, [%r4];
  mul.wide.u32 %rd4, %r1, 32;
  add.s64 %rd5, %rd1, %rd4;
  st.global.u32 [%rd5], %r6;
  st.global.v4.u32 [%rd5+16], {%r7, %r8, %r9, %r10};
  ret;
}
"""
    v = run(body, 64, 8 * 64).reshape(64, 8)[:, [0, 4, 5, 6, 7]]
    t = np.arange(64)
    assert (v[:, 0] == t).all() and (v[:, 1] == t).all() and (v[:, 2] == 0).all() and (v[:, 3] == t).all()
    assert v[0, 4] == 0 and (v[1:, 4] == 7).all()    # lane t - 1 stored 7 over word t



def test_atomics_on_64_bit_and_half_types():
    body = """
.visible .entry k(.param .u64 out)
{
  .shared .align 8 .u64 counter;
  .reg .b32 %r<4>; .reg .b64 %rd<8>; .reg .b16 %h<2>; .reg .f64 %fd; .reg .pred %p;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  cvt.u64.u32 %rd2, %r1;
  setp.eq.u32 %p, %r1, 0;
  @%p st.shared.u64 [counter], 100;
  bar.sync 0;
  atom.global.add.s64 %rd3, [%rd1], %rd2;
  neg.s64 %rd4, %rd2;
  atom.global.min.s64 %rd5, [%rd1+8], %rd4;
  atom.global.or.u64 %rd5, [%rd1+16], %rd2;
  atom.global.exch.b64 %rd5, [%rd1+24], %rd2;
  atom.shared::cta.add.u64 %rd5, [counter], %rd2;
  mov.b16 %h1, 0x3C00;
  atom.global.add.noftz.f16 %h0, [%rd1+40], %h1;
  atom.global.cas.b16 %h0, [%rd1+48], 0, 5;
  cvt.rn.f64.u32 %fd, %r1;
  red.global.add.f64 [%rd1+56], %fd;
  bar.sync 0;
  ld.shared.u64 %rd6, [counter];
  @%p st.global.u64 [%rd1+32], %rd6;
  ret;
}
"""
    v = run(body, 64, 8, dtype=np.uint64)
    t = np.arange(64)
    assert v[0] == t.sum() and v[1] == np.uint64(-63 & (2 ** 64 - 1)) and v[2] == np.bitwise_or.reduce(t)
    assert v[3] == 63 and v[4] == 100 + t.sum()
    assert np.frombuffer(v[5].tobytes()[:2], np.float16)[0] == 64.0
    assert v[6] & 0xFFFF == 5 and np.frombuffer(v[7].tobytes(), np.float64)[0] == t.sum()


# ---------------------------------------------------------------------------------------------- internal faults
def test_internal_fault_is_a_sticky_launch_failure_naming_the_kernel(monkeypatch):
    mem, mod = load(PARAMS)

    # (an IndexError is reported as what it is on a GPU, an illegal address: launch.py)
    def broken(self):
        raise TypeError("unsupported operand type(s) for +: 'NoneType' and 'int'")
    monkeypatch.setattr(Chunk, "run", broken)
    with pytest.raises(CudaError) as e:
        mod.launch("k", (1, 1, 1), (32, 1, 1), 0, struct.pack("<Q", mem.alloc(64)) + bytes(24))
    assert e.value.code == E["cudaErrorLaunchFailure"] and e.value.sticky
    assert "k: internal emulator error: TypeError: unsupported operand" in e.value.message
    assert "\n" not in e.value.message
