"""PTX parser: the reference corpus, literal forms, scopes, initializers, call sequences, error reporting."""
from __future__ import annotations

from pathlib import Path

import pytest

from pyvgpu_daemon.emu.ptx import ir
from pyvgpu_daemon.emu.ptx.parser import parse, parse_literal
from pyvgpu_daemon.errors import CudaError

CORPUS = Path("/work/shared/reference/ptx-corpus/ptx")
CORPUS_FILES = sorted(CORPUS.glob("*.ptx")) if CORPUS.exists() else []


@pytest.mark.skipif(not CORPUS_FILES, reason="reference corpus not present")
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_corpus_parses(path):
    mod = parse(path.read_text())
    assert mod.version and mod.target.startswith("sm_") and mod.address_size == 64
    assert any(f.is_entry for f in mod.functions.values())
    for f in mod.functions.values():
        for ins in f.body:
            assert isinstance(ins, (str, ir.Instr))


HEAD = ".version 9.0\n.target sm_75\n.address_size 64\n"


def test_literal_forms():
    assert parse_literal("0f3F800000") == ir.Imm(0x3F800000, True, "0f3F800000")
    assert parse_literal("0d3FF0000000000000").value == 0x3FF0000000000000
    assert parse_literal("0x3fb8aa3bU").value == 0x3FB8AA3B
    assert parse_literal("0X1F79U").value == 0x1F79
    assert parse_literal("42U").value == 42
    assert parse_literal("1.5").value == 1.5
    src = HEAD + ".visible .entry k(.param .u64 p)\n{\n.reg .b32 %r<3>;\n mov.b32 %r1, -1;\n add.s32 %r2, %r1, -0x10;\n ret;\n}\n"
    body = parse(src).functions["k"].body
    assert body[0].srcs[0].value == -1
    assert body[1].srcs[1].value == -16


def test_scoped_registers_are_renamed_and_vectors_parse():
    src = HEAD + """
.visible .entry k(.param .u64 p)
{
  .reg .b32 %r<4>; .reg .b16 %rs<3>;
  { .reg .b16 low, high; mov.b32 {low, high}, %r1; mov.b16 %rs1, low; }
  { .reg .b16 low; mov.b16 low, 7; mov.b32 %r2, {0, low}; }
  ret;
}
"""
    f = parse(src).functions["k"]
    names = [r.name for r in f.regs]
    assert len([n for n in names if n.startswith("low")]) == 2 and len(set(names)) == len(names)
    unpack, mov1, mov2, pack = f.body[0], f.body[1], f.body[2], f.body[3]
    assert isinstance(unpack.dsts[0], ir.Vec) and unpack.dsts[0].elems[0] == mov1.srcs[0]
    assert mov2.dsts[0] != mov1.srcs[0]
    assert pack.srcs[0].elems[0] == ir.Imm(0, False, "0") and pack.srcs[0].elems[1] == mov2.dsts[0]


def test_variables_initializers_and_directives_skipped():
    src = HEAD + """
.file 1 "x.cu"
.global .align 4 .b8 tbl[16] = {0, 0, 128, 63};
.const .align 4 .f32 c[4] = {0f3F800000, 0f40000000};
.extern .shared .align 16 .b8 dyn[];
.global .attribute(.managed) .align 4 .u32 m;
.visible .entry k()
{
  .loc 1 3 0
  ret;
}
.section .debug_str { .b8 65, 0 }
"""
    mod = parse(src)
    v = {x.name: x for x in mod.variables}
    assert v["tbl"].init == [0, 0, 128, 63] and v["tbl"].size == 16
    assert v["c"].init[0] == ("bits", 0x3F800000, True) and v["c"].size == 16
    assert v["dyn"].extern and v["dyn"].count == 0
    assert v["m"].attributes == ("managed",)
    assert [i.opcode for i in mod.functions["k"].body] == ["ret"]


def test_call_sequence_and_func_with_return():
    src = HEAD + """
.func (.param .b32 rv) f(.param .b32 a)
{
  .reg .b32 %r<2>;
  ld.param.b32 %r1, [a];
  st.param.b32 [rv+0], %r1;
  ret;
}
.visible .entry k()
{
  .reg .b32 %r<2>;
  { // callseq 0, 0
  .param .b32 param0;
  st.param.b32 [param0+0], 5;
  .param .b32 retval0;
  call.uni (retval0),
  f,
  (
  param0
  );
  ld.param.b32 %r1, [retval0+0];
  }
  ret;
}
"""
    mod = parse(src)
    f = mod.functions["f"]
    assert [p.name for p in f.returns] == ["rv"] and [p.name for p in f.params] == ["a"]
    k = mod.functions["k"]
    call = [i for i in k.body if i.opcode == "call"][0]
    assert call.srcs[0] == ir.Sym("f")
    assert isinstance(call.dsts[0], ir.Sym) and isinstance(call.srcs[1], ir.Sym)
    assert {v.name for v in k.locals if v.space == "param"} == {call.dsts[0].name, call.srcs[1].name}


def test_guards_and_piped_destinations():
    src = HEAD + """
.visible .entry k()
{
  .reg .pred %p<3>; .reg .b32 %r<4>;
  setp.lt.s32 %p1|%p2, %r1, %r2;
  shfl.sync.down.b32 %r3|%p1, %r1, 1, 31, -1;
  @!%p1 bra $L1;
$L1:
  ret;
}
"""
    body = parse(src).functions["k"].body
    assert len(body[0].dsts) == 2 and len(body[1].dsts) == 2
    assert body[2].guard == ("%p1", True) and body[3] == "$L1"


@pytest.mark.parametrize("bad,what", [("frobnicate.u32 %r1, %r2;", "frobnicate"),
                                      ("mov.u32 %r1 %r2;", "line 8")])
def test_errors_name_the_problem_and_line(bad, what):
    src = HEAD + ".visible .entry k()\n{\n.reg .b32 %r<3>;\n\n" + bad + "\nret;\n}\n"
    with pytest.raises(CudaError) as e:
        parse(src)
    assert e.value.code == 218 and what in e.value.message
