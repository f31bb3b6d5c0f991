"""translator/pycompile.py: a large generated source compiles in a child interpreter (the daemon keeps the GIL),
into exactly the code an in-process compile gives; a child that fails leaves it to the in-process compile, whose
error (a syntax error in generated code) is the one raised."""
from __future__ import annotations

import marshal
import subprocess
import struct

import numpy as np
import pytest

from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.translator import kernel as kernel_mod
from pyvgpu_daemon.emu.translator import pycompile


def _source(n: int) -> str:
    body = "".join(f"    x{i} = a * {i} + (b or 0)\n" for i in range(n))
    return f"def make(a, b=None):\n{body}    def inner():\n        return x{n - 1}\n    return inner\n"


@pytest.fixture
def children(monkeypatch):
    """The child interpreters started (their command lines)."""
    runs = []
    real = subprocess.run

    def spy(cmd, *a, **k):
        runs.append(cmd)
        return real(cmd, *a, **k)
    monkeypatch.setattr(pycompile.subprocess, "run", spy)
    return runs


def test_a_large_source_compiles_in_a_child_to_the_same_code(children):
    src = _source(20000)
    assert len(src) >= pycompile.MIN_SOURCE
    code = pycompile.compile_source(src, "<ptx big>")
    assert len(children) == 1
    here = compile(src, "<ptx big>", "exec")            # (this module has the translator's future flags too)
    assert marshal.dumps(code) == marshal.dumps(here)
    ns: dict = {}
    exec(code, ns)
    assert ns["make"](3)() == 3 * 19999


def test_a_small_source_compiles_here(children):
    assert pycompile.compile_source(_source(10), "<ptx small>").co_filename == "<ptx small>"
    assert children == []


def test_a_failing_child_gives_the_in_process_result(children, monkeypatch):
    bad = _source(20000) + "def broken(:\n"
    with pytest.raises(SyntaxError):
        pycompile.compile_source(bad, "<ptx bad>")
    assert len(children) == 1
    monkeypatch.setattr(pycompile.sys, "executable", "/nonexistent/python")
    src = _source(20000)
    assert marshal.dumps(pycompile.compile_source(src, "<ptx x>")) == marshal.dumps(compile(src, "<ptx x>", "exec"))


PTX = """.version 9.0
.target sm_75
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  mul.lo.u32 %r2, %r1, 3;
  st.global.u32 [%rd3], %r2;
  ret;
}
"""


def test_a_kernel_whose_code_compiles_in_a_child_gives_the_same_bits(children, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))      # (no bytecode cached on disk)
    monkeypatch.setattr(pycompile, "MIN_SOURCE", 0)
    monkeypatch.setattr(kernel_mod, "_BYTECODE", type(kernel_mod._BYTECODE)())
    mem = DeviceMemory(1 << 40, 1 << 24)
    m = EmuModule.load(PTX.encode(), mem, limits=EmuLimits(native="off"))
    out = mem.alloc(4 * 256)
    m.launch("k", (1, 1, 1), (256, 1, 1), 0, struct.pack("<Q", out))
    assert any(f"<ptx k>" in c for c in children)
    assert (np.frombuffer(bytes(mem.read(out, 4 * 256)), np.uint32) == np.arange(256) * 3).all()
