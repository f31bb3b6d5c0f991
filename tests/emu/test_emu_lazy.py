"""Lazy translation (emu/ptx/index.py, emu/module.py, emu/codebudget.py): a load reads only what lies outside
function bodies and scans the bodies; what the scan finds equals what the parser finds; kernels are translated at
their first launch, within the session's budget; refusals by name still happen at load."""
from __future__ import annotations

import mmap
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from pyvgpu_daemon.emu.codebudget import CodeBudget
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import TRANSLATION_BYTES_PER_INSTRUCTION, TRANSLATION_PEAK_PER_INSTRUCTION, EmuModule
from pyvgpu_daemon.emu.ptx import ir
from pyvgpu_daemon.emu.ptx.index import ModuleIndex
from pyvgpu_daemon.emu.ptx.parser import KNOWN_OPCODES, parse
from pyvgpu_daemon.emu.ptx.types import reg_width
from pyvgpu_daemon.errors import CudaError

CORPUS = Path("/work/shared/reference/ptx-corpus/ptx")

# What the scan must not be fooled by: comments and strings holding braces, semicolons and instruction-like text,
# `.file`/`.loc` lines (no semicolon), labels before declarations and instructions, guards, inline-asm scopes with
# `{lo, hi}` vectors of unprefixed registers, call sequences declaring .param in nested scopes, a called .func.
MIXED = """.version 9.0
.target sm_75
.address_size 64
.file 1 "mixed.cu"
.global .align 4 .b8 table[16] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0};
.extern .shared .align 16 .b8 dyn[];

// { not a body: st.global.u32 [x], 1;
.func (.param .b32 ret) twice(.param .b32 a)
{
  .reg .b32 %r<3>;
  .loc 1 10 0
  ld.param.b32 %r1, [a];
  add.s32 %r2, %r1, %r1;   // } ; add.cc.u32 %r1, %r1, 1;
  st.param.b32 [ret], %r2;
  ret;
}

.visible .entry first(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<4>;
  .reg .pred %p<2>;
$L_top: .shared .align 4 .b8 sh[256];
  .pragma "nounroll; weird.op %r1, { 1 }";
  /* a block comment with a brace { and ; add.cc.u32 %r1, %r1, 1; */
  .loc 1 20 0
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  {
  .reg .b32 lo, hi;
  mov.b64 {lo, hi}, %rd1;
  add.s32 %r2, lo, 0;
  }
  {
  .param .b32 p0;
  .param .b32 r0;
  st.param.b32 [p0], %r1;
  call.uni (r0), twice, (p0);
  ld.param.b32 %r3, [r0];
  }
  shl.b32 %r4, %r1, 2;
  st.shared.u32 [%r4], %r3;
  bar.sync 0;
  ld.shared.u32 %r5, [%r4];
  setp.ge.u32 %p1, %r1, 64; @%p1 bra $L_out;
$L_store: mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
$L_out:
  ret;
}

.visible .entry second(.param .u64 out) .maxntid 128, 1, 1
{
  .reg .b32 %r<8>; .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  and.b32 %r2, %r1, 3;
  mul.wide.u32 %rd2, %r2, 4;
  mov.u64 %rd3, table;
  add.s64 %rd4, %rd3, %rd2;
  ld.global.u32 %r3, [%rd4];
  shl.b32 %r4, %r1, 2;
  st.shared.u32 [dyn+0], %r3;
  mul.wide.u32 %rd5, %r1, 4;
  add.s64 %rd5, %rd1, %rd5;
  st.global.u32 [%rd5], %r3;
  ret;
}
"""


def load(src: str, **kw) -> EmuModule:
    return EmuModule.load(src.encode(), DeviceMemory(1 << 40, 1 << 22), **kw)


def sources() -> list[tuple[str, str]]:
    out = [("MIXED", MIXED)]
    out += [(f.name, f.read_text()) for f in sorted(CORPUS.glob("*.ptx"))]     # more where the reference is present
    return out


def opcode_text(ins: ir.Instr) -> str:
    return ".".join((ins.opcode,) + ins.mods)


@pytest.mark.parametrize("name,src", sources(), ids=[n for n, _ in sources()])
def test_the_scan_finds_what_the_parser_finds(name, src):
    full = parse(src)
    ix = ModuleIndex(src, EmuLimits())
    assert set(ix.spans) == set(full.functions)
    for fname, fn in full.functions.items():
        scan = ix.scans[fname]
        instrs = [i for i in fn.body if isinstance(i, ir.Instr)]
        want = {opcode_text(i) for i in instrs}
        # never fewer; more only for text that merely looks like a statement (MIXED's pragma string), which the
        # load confirms by parsing before refusing anything
        assert want <= scan.opcodes, fname
        assert all(op.partition(".")[0] not in KNOWN_OPCODES for op in scan.opcodes - want), fname
        assert scan.statements == len(instrs) + (name == "MIXED" and fname == "first"), fname   # + weird.op
        assert sorted(repr((r.type, r.count)) for r in scan.regs) == sorted(repr((r.type, r.count)) for r in fn.regs)
        shape = (lambda v: (v.space, v.size, v.align, v.name if v.space == "shared" else ""))
        assert sorted(map(shape, scan.locals)) == sorted(map(shape, fn.locals)), fname
        parsed = ix.function(fname)                 # a body parsed alone is the body parsed with the module
        assert [getattr(i, "text", i) for i in parsed.body] == [getattr(i, "text", i) for i in fn.body]
        assert [i.line for i in parsed.body if isinstance(i, ir.Instr)] == [i.line for i in instrs]


@pytest.mark.parametrize("name,src", sources(), ids=[n for n, _ in sources()])
def test_attributes_known_at_load_are_those_of_the_translation(name, src):
    mod = load(src, sm=80)
    assert not mod._compiled                          # nothing translated by the load
    for kname, info in mod.kernels.items():
        k = mod.kernel(kname)
        assert info.attrs["shared_size_bytes"] == k.layout.static_shared, kname
        assert info.attrs["local_size_bytes"] == k.layout.local_size, kname
        declared = sum(2 if reg_width(t) == 64 else 1 for t in k.flat.regs.values())
        assert info.attrs["num_regs"] == min(declared, 255, 65536 // info.attrs["max_threads_per_block"] // 8 * 8)
        assert info.params == list(k.layout.param_layout)


def test_a_kernel_is_translated_at_its_first_launch_only():
    mem = DeviceMemory(1 << 40, 1 << 22)
    mod = EmuModule.load(MIXED.encode(), mem)
    assert set(mod.kernels) == {"first", "second"} and not mod._compiled
    out = mem.alloc(4 * 128)
    mod.launch("first", (1, 1, 1), (64, 1, 1), 0, struct.pack("<Q", out))
    assert set(mod._compiled) == {"first"}
    np.testing.assert_array_equal(np.frombuffer(bytes(mem.read(out, 256)), np.uint32), 2 * np.arange(64))
    mod.launch("second", (1, 1, 1), (128, 1, 1), 16, struct.pack("<Q", out))
    assert set(mod._compiled) == {"first", "second"}
    np.testing.assert_array_equal(np.frombuffer(bytes(mem.read(out, 512)), np.uint32), np.arange(128) % 4 + 1)
    assert mod.kernels["second"].attrs["max_threads_per_block"] == 128


def refused_at_load(src: str, says: str, statement: str) -> None:
    """Loading `src` fails with cudaErrorInvalidPtx saying `says` and naming the line of `statement`."""
    with pytest.raises(CudaError) as e:
        load(src)
    line = src.splitlines().index(statement) + 1
    assert e.value.code == 218 and says in e.value.message and f"line {line}" in e.value.message


def test_an_instruction_the_emulator_lacks_is_refused_at_load_in_a_kernel_never_launched():
    bad = MIXED + """
.visible .entry third(.param .u64 out)
{
  .reg .b32 %r<3>;
  mov.u32 %r1, %tid.x;
  add.cc.u32 %r2, %r1, 1;
  ret;
}
"""
    refused_at_load(bad, "add.cc.u32", "  add.cc.u32 %r2, %r1, 1;")


def test_every_barrier_is_checked_at_load_not_only_the_first():
    bad = MIXED.replace("  ret;\n}\n\n.visible .entry second", "  bar.sync 16;\n  ret;\n}\n\n.visible .entry second")
    refused_at_load(bad, "barrier id 16", "  bar.sync 16;")


def test_an_unknown_instruction_is_refused_at_load_naming_it():
    bad = MIXED.replace("  shl.b32 %r4, %r1, 2;\n  st.shared", "  frobnicate.b32 %r4, %r1;\n  st.shared")
    refused_at_load(bad, "unknown instruction 'frobnicate.b32'", "  frobnicate.b32 %r4, %r1;")


def test_what_depends_on_operands_is_refused_at_the_first_launch_and_every_later_one():
    src = """.version 9.0
.target sm_75
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<3>; .reg .b64 %rd<2>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out];
  ld.global.v2.u32 {%r1, %p1}, [%rd1];
  ret;
}
"""
    mod = load(src)                                   # ld.global.v2.u32 is implemented: the load succeeds
    for _ in range(2):
        with pytest.raises(CudaError) as e:
            mod.launch("k", (1, 1, 1), (1, 1, 1), 0, struct.pack("<Q", 0))
        assert e.value.code == 218 and "load into a predicate" in e.value.message
    assert mod.budget.cached == 0 and not mod._compiled          # a failed translation holds nothing


def same_size_kernels(n: int) -> str:
    """Kernels k0..k{n-1} of the same size: out[tid] = tid * (i + 1)."""
    return ".version 9.0\n.target sm_75\n.address_size 64\n" + "".join(f"""
.visible .entry k{i}(.param .u64 out)
{{
  .reg .b32 %r<3>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.lo.u32 %r2, %r1, {i + 1};
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r2;
  ret;
}}
""" for i in range(n))


def test_translations_beyond_the_budget_are_dropped_least_recently_launched_first():
    src = same_size_kernels(3)
    probe = load(src)
    n = probe.index.inlined_instructions("k0")
    kept, peak = TRANSLATION_BYTES_PER_INSTRUCTION * n, TRANSLATION_PEAK_PER_INSTRUCTION * n
    budget = CodeBudget(probe.held + kept + peak)      # one translation kept while another is made
    mem = DeviceMemory(1 << 40, 1 << 22)
    mod = EmuModule.load(src.encode(), mem, budget=budget)
    out = mem.alloc(4 * 32)
    for k, held in [("k0", {"k0"}), ("k1", {"k0", "k1"}), ("k0", {"k0", "k1"}), ("k2", {"k0", "k2"}),
                    ("k1", {"k2", "k1"}), ("k2", {"k2", "k1"})]:
        mem.fill(out, 0, 128)
        mod.launch(k, (1, 1, 1), (32, 1, 1), 0, struct.pack("<Q", out))
        assert set(mod._compiled) == held, k              # the least recently launched was dropped for room
        assert budget.cached == kept * len(held) and budget.used <= budget.limit
        np.testing.assert_array_equal(np.frombuffer(bytes(mem.read(out, 128)), np.uint32),
                                      np.arange(32) * (int(k[1]) + 1))
    mod.unload()
    assert budget.used == 0 and budget.cached == 0


def test_a_module_the_budget_cannot_hold_is_refused_before_it_is_read():
    budget = CodeBudget(len(MIXED) - 1)
    with pytest.raises(CudaError) as e:
        EmuModule.load(MIXED.encode(), DeviceMemory(1 << 40, 1 << 22), budget=budget)
    assert e.value.code == 2 and "PYVGPU_EMU_MAX_CODE_BYTES" in e.value.message
    assert budget.used == 0


def test_a_translation_the_budget_cannot_hold_fails_its_launch_and_the_module_stays_usable():
    probe = load(MIXED)
    budget = CodeBudget(probe.held + 64)
    mem = DeviceMemory(1 << 40, 1 << 22)
    mod = EmuModule.load(MIXED.encode(), mem, budget=budget)
    with pytest.raises(CudaError) as e:
        mod.launch("first", (1, 1, 1), (64, 1, 1), 0, struct.pack("<Q", mem.alloc(256)))
    assert e.value.code == 2 and "translation of first" in e.value.message
    budget.limit = 1 << 30
    mod.launch("first", (1, 1, 1), (64, 1, 1), 0, struct.pack("<Q", mem.alloc(256)))   # not remembered as failed


def test_a_huge_ptx_image_is_refused_without_being_read():
    with mmap.mmap(-1, 1 << 30) as huge:              # 1 GiB of untouched pages
        huge[:8] = b".version"
        t0 = time.monotonic()
        with pytest.raises(CudaError) as e:
            EmuModule.load(huge, DeviceMemory(1 << 40, 1 << 20))
        assert time.monotonic() - t0 < 1.0
    assert e.value.code == 218 and "PYVGPU_EMU_MAX_PTX_BYTES" in e.value.message


def test_an_inlining_bomb_is_refused_at_load_without_expanding_it():
    funcs = "".join(f".func f{i}()\n{{\n" + f"call f{i + 1};\n" * 4 + "ret;\n}\n" for i in range(11))
    src = ".version 9.0\n.target sm_75\n.address_size 64\n" + funcs + ".func f11()\n{\nret;\n}\n" + \
        ".visible .entry k() {\ncall f0;\nret;\n}\n"
    t0 = time.monotonic()
    with pytest.raises(CudaError) as e:
        load(src)
    assert time.monotonic() - t0 < 1.0
    assert e.value.code == 218 and "k: more than 262144 instructions once its calls are inlined" in e.value.message


@pytest.mark.parametrize("regs,maxntid,expected",
                         [(5000, None, 64), (5000, 256, 255), (5000, 512, 128), (12, None, 12)])
def test_registers_reported_let_the_largest_block_run(regs, maxntid, expected):
    bound = f" .maxntid {maxntid}, 1, 1" if maxntid else ""
    src = (f".version 9.0\n.target sm_75\n.address_size 64\n.visible .entry k(){bound}\n"
           f"{{\n.reg .b32 %r<{regs}>;\nret;\n}}\n")
    info = load(src).kernels["k"]
    assert info.attrs["num_regs"] == expected
    threads = info.attrs["max_threads_per_block"]
    per_warp = -(-info.attrs["num_regs"] * 32 // 256) * 256          # the client's occupancy rule (core/launch.c)
    assert 65536 // (per_warp * (threads // 32)) >= 1
