"""The interface between generated block code and the runtime (emu/chunk_api.py): the code generator emits no
access to the chunk `S` outside ChunkAPI's members, every member is used by some generated code (the interface is
exactly what the generator needs), no other free name reaches the generated code except its documented
namespace, and the runtime's Chunk implements the whole interface."""
from __future__ import annotations

import ast
import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.chunk_api import MEMBERS, ChunkAPI
from pyvgpu_daemon.emu.device_heap import DeviceHeap
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.runtime import Chunk
from pyvgpu_daemon.emu.translator.codegen import NAMESPACE, Codegen

# One kernel that makes the generator use every kind of chunk access: special registers (cached and clocks),
# parameters, loads, stores, atomics, isspacep, barriers with a thread count, bar.red, every warp operation,
# printf, malloc and free, assert and trap, texture, surface and warp matrix instructions (trap and the last three
# behind predicates that are never true).
PTX = r"""
.version 9.0
.target sm_75
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf (.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.extern .func (.param .b64 func_retval0) malloc (.param .b64 malloc_param_0);
.extern .func free (.param .b64 free_param_0);
.extern .func __assertfail (.param .b64 p0, .param .b64 p1, .param .b32 p2, .param .b64 p3, .param .b64 p4);
.global .align 1 .b8 $str[4] = {104, 105, 10, 0};
.func (.param .b32 rv) tri(.param .b32 a)
{
  .reg .b32 %q<4>; .reg .pred %pp;
  ld.param.b32 %q1, [a];
  setp.eq.u32 %pp, %q1, 0;
  @%pp bra TD;
  sub.u32 %q2, %q1, 1;
  { .param .b32 p0; st.param.b32 [p0], %q2; .param .b32 r0;
    call.uni (r0), tri, (p0); ld.param.b32 %q3, [r0]; }
  add.u32 %q1, %q1, %q3;
TD:
  st.param.b32 [rv], %q1;
  ret;
}

.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<20>; .reg .pred %p<8>; .reg .b64 %rd<12>; .reg .f32 %f<8>;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  mov.u64 %rd2, %clock64;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  isspacep.global %p1, %rd4;
  selp.u32 %r2, 1, 0, %p1;
  ld.global.u32 %r3, [%rd4];
  atom.global.add.u32 %r4, [%rd1+128], 1;
  bar.sync 0, 32;
  setp.lt.u32 %p2, %r1, 16;
  bar.red.popc.u32 %r5, 0, %p2;
  shfl.sync.down.b32 %r6|%p3, %r1, 1, 31, -1;
  vote.sync.ballot.b32 %r7, %p2, -1;
  redux.sync.add.u32 %r8, %r1, -1;
  match.any.sync.b32 %r9, %r2, -1;
  activemask.b32 %r10;
  add.u32 %r11, %r2, %r4;
  add.u32 %r11, %r11, %r5;
  st.global.u32 [%rd4+256], %r11;
  st.global.u32 [%rd4+384], %r7;
  st.global.u32 [%rd4+512], %r8;
  st.global.u32 [%rd4+640], %r10;
  { .param .b32 p0; st.param.b32 [p0], %r1; .param .b32 r0;
    call.uni (r0), tri, (p0); ld.param.b32 %r12, [r0]; }
  st.global.u32 [%rd4+768], %r12;
  setp.eq.u32 %p4, %r1, 0;
  @!%p4 bra DONE;
  mov.u64 %rd5, $str;
  cvta.global.u64 %rd6, %rd5;
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd6;
  .param .b64 param1;
  st.param.b64 [param1+0], 0;
  .param .b32 retval0;
  call.uni (retval0), vprintf, (param0, param1);
  }
  {
  .param .b64 param0;
  st.param.b64 [param0+0], 64;
  .param .b64 retval0;
  call.uni (retval0), malloc, (param0);
  ld.param.b64 %rd7, [retval0+0];
  }
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd7;
  call.uni free, (param0);
  }
DONE:
  setp.gt.u32 %p5, %r1, 1000;
  @%p5 trap;
  @!%p5 bra NOTEX;
  tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];
  txq.width.b32 %r12, [%rd1];
  suld.b.2d.b32.trap {%r13}, [%rd1, {%r1, %r1}];
  sust.b.2d.b32.trap [%rd1, {%r1, %r1}], {%r13};
  wmma.load.a.sync.aligned.row.m16n16k16.global.s8 {%r14, %r15}, [%rd1], 16;
  wmma.mma.sync.aligned.row.row.m16n16k16.s32.s8.s8.s32 {%r12, %r13, %r14, %r15, %r16, %r17, %r18, %r19}, {%r14, %r15}, {%r14, %r15}, {%r12, %r13, %r14, %r15, %r16, %r17, %r18, %r19};
  wmma.store.d.sync.aligned.row.m16n16k16.global.s32 [%rd1], {%r12, %r13, %r14, %r15, %r16, %r17, %r18, %r19}, 16;
NOTEX:
  @!%p5 bra END;
  {
  .param .b64 param0;
  st.param.b64 [param0+0], %rd6;
  .param .b64 param1;
  st.param.b64 [param1+0], %rd6;
  .param .b32 param2;
  st.param.b32 [param2+0], 1;
  .param .b64 param3;
  st.param.b64 [param3+0], %rd6;
  .param .b64 param4;
  st.param.b64 [param4+0], 1;
  call.uni __assertfail, (param0, param1, param2, param3, param4);
  }
END:
  ret;
}
"""


@pytest.fixture(scope="module")
def loaded():
    mem = DeviceMemory(1 << 40, 1 << 20)
    return mem, EmuModule.load(PTX.encode(), mem)


def chunk_accesses(source: str) -> set[str]:
    """Every attribute of `S` the generated source touches."""
    return {n.attr for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "S"}


def free_names(source: str) -> set[str]:
    """Names the generated source reads but never binds (they must come from its namespace)."""
    tree = ast.parse(source)
    bound = {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args}
    bound |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    bound |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loaded - bound


def test_generated_code_uses_exactly_the_declared_interface(loaded):
    _, mod = loaded
    k = mod.kernel("k")
    assert k.native_make() is not None                  # the native variant: runs that load take S.memctx()
    used = chunk_accesses(k.source) | chunk_accesses(k.native_source)
    assert used <= MEMBERS, f"generated code uses undeclared chunk members: {sorted(used - MEMBERS)}"
    assert used == MEMBERS, f"declared but never generated: {sorted(MEMBERS - used)}"
    extra = free_names(k.source) - set(NAMESPACE)
    assert all(n.startswith("_") and n in k.namespace for n in extra), sorted(extra)   # constants
    assert set(NAMESPACE) == {"np", "_where", "_scatter", "_fit", "_cvta_param", "_uniform", "_lanes",
                              "_brx_targets", "_ocall_targets"}


def test_generator_refuses_undeclared_members():
    assert Codegen.rt("load") == "S.load"
    with pytest.raises(AssertionError, match="ChunkAPI does not declare"):
        Codegen.rt("smem")


def test_chunk_implements_the_interface_and_the_kernel_runs(loaded):
    mem, mod = loaded
    assert issubclass(Chunk, ChunkAPI) and not Chunk.__abstractmethods__
    out = mem.alloc(1024)
    mem.write(out, np.arange(256, dtype=np.uint32).tobytes())
    seen: list[Chunk] = []
    heap = DeviceHeap(mem.alloc)
    bind = Chunk.bind_blocks

    def spy(chunk):
        seen.append(chunk)
        return bind(chunk)
    Chunk.bind_blocks = spy
    try:
        res = mod.launch("k", (1, 1, 1), (32, 1, 1), 0, struct.pack("<Q", out), heap=heap, heap_size=4096)
    finally:
        Chunk.bind_blocks = bind
    assert all(hasattr(seen[0], m) for m in MEMBERS)
    assert res.stdout == b"hi\n"
    assert heap.reserved and heap.live_bytes() == 0                 # the printing lane's malloc, then its free
    v = np.frombuffer(bytes(mem.read(out, 1024)), np.uint32)
    assert v[32] == 32 + 32                                  # the atomic counter: 32 increments of word 32
    lanes = np.arange(32)
    old = v[64:96] - 1 - 16                                  # minus isspacep (1) and bar.red popc (16 lanes < 16)
    assert sorted(old.tolist()) == list(range(32, 64))       # every lane saw a distinct old counter value
    assert (v[96:128] == 0xFFFF).all()                       # ballot of lanes < 16
    assert (v[128:160] == lanes.sum()).all()                 # redux.add of tid
    assert (v[160:192] == 0xFFFFFFFF).all()                  # activemask
    assert (v[192:224] == lanes * (lanes + 1) // 2).all()    # tri(tid), recursively: tid + (tid - 1) + ... + 0
