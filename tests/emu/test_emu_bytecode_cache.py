"""The disk cache of compiled block code (emu/translator/bytecode_cache.py): a miss compiles and writes, a hit
returns the same code without compiling, a changed source or another interpreter's entry is never used, damaged
entries are ignored and removed, the directory stays within its byte limit (least recently used out first), and a
kernel run from cached code computes what it computes from freshly compiled code."""
from __future__ import annotations

import os
import struct
import time

import numpy as np
import pytest

from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.translator import bytecode_cache, kernel
from pyvgpu_daemon.emu.translator.bytecode_cache import BytecodeCache

NAME = "<ptx k>"


def source(n: int = 0) -> str:
    return f"def make(S):\n    return S * 3 + {n}\n"


def compiled(src: str):
    return compile(src, NAME, "exec")


def run(code) -> int:
    ns: dict = {}
    exec(code, ns)
    return ns["make"](5)


def test_a_miss_then_a_hit_of_the_same_code(tmp_path):
    cache = BytecodeCache(tmp_path / "c", 1 << 20)
    src = source()
    assert cache.get(src, NAME) is None
    code = compiled(src)
    cache.put(src, NAME, code)
    got = cache.get(src, NAME)
    assert got is not None and got is not code
    assert got == code and run(got) == 15
    assert oct(os.stat(tmp_path / "c").st_mode & 0o777) == "0o700"     # marshalled code: the user's only


def test_another_source_or_file_name_is_a_miss(tmp_path):
    cache = BytecodeCache(tmp_path, 1 << 20)
    cache.put(source(1), NAME, compiled(source(1)))
    assert cache.get(source(2), NAME) is None
    assert cache.get(source(1), "<ptx other>") is None
    assert run(cache.get(source(1), NAME)) == 16


def _only_entry(directory):
    (entry,) = directory.glob("*.pvbc")
    return entry


def _one_entry(directory):
    """A cache in `directory` holding source()'s code: (cache, source, its entry's path, the entry's bytes)."""
    cache = BytecodeCache(directory, 1 << 20)
    src = source()
    cache.put(src, NAME, compiled(src))
    entry = _only_entry(directory)
    return cache, src, entry, bytearray(entry.read_bytes())


def test_an_entry_of_another_interpreter_is_ignored_and_removed(tmp_path):
    cache, src, entry, raw = _one_entry(tmp_path)
    start = len(bytecode_cache._FORMAT)
    raw[start:start + 4] = bytes(b ^ 0xFF for b in raw[start:start + 4])      # another Python's bytecode magic
    entry.write_bytes(bytes(raw))
    assert cache.get(src, NAME) is None and not entry.exists()


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage", "other code"])
def test_a_damaged_entry_is_ignored_and_removed(tmp_path, damage):
    cache, src, entry, raw = _one_entry(tmp_path)
    if damage == "flip":
        raw[-5] ^= 0x40
    elif damage == "truncate":
        raw = raw[:len(raw) // 2]
    elif damage == "empty":
        raw = bytearray()
    elif damage == "garbage":
        raw = bytearray(os.urandom(len(raw)))
    else:        # a whole, well-formed entry of a code object of another name at this key
        other = BytecodeCache(tmp_path / "o", 1 << 20)
        other.put(src, "<ptx other>", compile(src, "<ptx other>", "exec"))
        raw = bytearray(_only_entry(tmp_path / "o").read_bytes())
    entry.write_bytes(bytes(raw))
    assert cache.get(src, NAME) is None and not entry.exists()
    cache.put(src, NAME, compiled(src))           # rewritten whole
    assert run(cache.get(src, NAME)) == 15


def test_the_directory_stays_within_its_limit_least_recently_used_out_first(tmp_path):
    one = len(bytecode_cache._FORMAT) + 36 + len(__import__("marshal").dumps(compiled(source(0))))
    cache = BytecodeCache(tmp_path, 3 * one + one // 2)           # room for three entries
    for n in range(3):
        cache.put(source(n), NAME, compiled(source(n)))
    old = time.time() - 100
    for n, f in enumerate(sorted(tmp_path.glob("*.pvbc"))):
        os.utime(f, (old + n, old + n))
    assert cache.get(source(0), NAME) is not None                 # used now: the most recent
    cache.put(source(3), NAME, compiled(source(3)))
    kept = [n for n in range(4) if cache.get(source(n), NAME) is not None]
    assert len(kept) == 3 and 0 in kept and 3 in kept
    assert sum(f.stat().st_size for f in tmp_path.glob("*.pvbc")) <= cache.limit
    tiny = BytecodeCache(tmp_path / "t", 10)                      # an entry larger than the whole limit: not kept
    tiny.put(source(), NAME, compiled(source()))
    assert not list((tmp_path / "t").glob("*.pvbc"))


def test_a_directory_others_can_use_is_narrowed_and_one_of_another_user_is_not_read(tmp_path, monkeypatch):
    shared = tmp_path / "open"
    shared.mkdir()
    os.chmod(shared, 0o777)
    cache = BytecodeCache(shared, 1 << 20)
    cache.put(source(), NAME, compiled(source()))
    assert oct(os.stat(shared).st_mode & 0o777) == "0o700" and run(cache.get(source(), NAME)) == 15
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)       # the same directory seen by another user
    other = BytecodeCache(shared, 1 << 20)
    assert other.get(source(), NAME) is None
    other.put(source(1), NAME, compiled(source(1)))
    assert len(list(shared.glob("*.pvbc"))) == 1


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("PYVGPU_EMU_BYTECODE_CACHE", "0")
    assert bytecode_cache.shared() is None


ADD = """.version 8.0
.target sm_75
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<4>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  mul.lo.u32 %r2, %r1, 7;
  add.u32 %r3, %r2, 11;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
  ret;
}
"""


def _launch_k() -> np.ndarray:
    mem = DeviceMemory(1 << 40, 1 << 22)
    mod = EmuModule.load(ADD.encode(), mem)
    out = mem.alloc(4 * 64)
    mod.launch("k", (1, 1, 1), (64, 1, 1), 0, struct.pack("<Q", out))
    return np.frombuffer(bytes(mem.read(out, 256)), np.uint32)


def test_a_kernel_runs_the_same_from_cached_code_and_compiles_nothing(tmp_path, monkeypatch):
    cache = BytecodeCache(tmp_path, 1 << 20)
    monkeypatch.setattr(bytecode_cache, "_shared", cache)
    monkeypatch.setattr(bytecode_cache, "MIN_SOURCE", 0)
    monkeypatch.setattr(kernel, "_BYTECODE", type(kernel._BYTECODE)())
    fresh = _launch_k()
    np.testing.assert_array_equal(fresh, np.arange(64, dtype=np.uint32) * 7 + 11)
    assert len(list(tmp_path.glob("*.pvbc"))) == 1
    monkeypatch.setattr(kernel, "_BYTECODE", type(kernel._BYTECODE)())      # as in a new daemon
    compiles = []
    real = compile
    monkeypatch.setattr("builtins.compile", lambda *a, **k: compiles.append(a[1]) or real(*a, **k))
    again = _launch_k()
    np.testing.assert_array_equal(again, fresh)
    assert not [c for c in compiles if c.startswith("<ptx")]
