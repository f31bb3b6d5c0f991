"""coldkey12: the level a build actually runs at (ctagen.opt_level's fallback), the compiler's version in the native
cache's key, and a kernel's record beside its library (native.py) that lets a warm run find the library without
generating its C."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from pyvgpu_daemon.emu import native
from pyvgpu_daemon.emu.limits import EmuLimits
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
from pyvgpu_daemon.emu.translator import ctagen

from test_emu_coldtier import FMIX   # (products, a quotient and a square root in a loop, through a barrier)

# a GCC before 11: -fno-ipa-modref (one of LEAN_O1's flags) is an error
OLD_GCC = ("case \" $* \" in *' -fno-ipa-modref '*) echo \"cc1: error: unrecognized command-line option "
           "'-fno-ipa-modref'\" >&2; exit 1;; esac; exec cc \"$@\"")


def test_the_level_a_refused_lean_o1_falls_back_to_answers_its_own_cost(fake_cc, monkeypatch):
    # where the compiler refuses LEAN_O1's flags the build runs at -O1 (ctagen.flags): its estimate (s_per_mb), and
    # with it compile_seconds, MAX_COMPILE_S and QUICK_MAX_SHARE, must be -O1's, not LEAN_O1's 3.0
    monkeypatch.setattr(native, "_warned", set())
    big = "x" * (2 << 20)
    lean = ctagen.opt_level(big)
    assert lean.flags == ctagen.LEAN_O1 and lean.s_per_mb == 3.0
    assert ctagen.quick_flags(10_000, big) is None          # (LEAN_O1 costs about what the quick tier does)
    monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc(OLD_GCC)))
    level = ctagen.opt_level(big)
    assert level.flags == ("-O1",) and level.s_per_mb == 7.0
    assert ctagen.flags(big) == ctagen.FLAGS + ("-O1",)
    assert ctagen.compile_seconds(big) == len(big) / 1e6 * 7.0
    assert ctagen.quick_flags(10_000, big) == ctagen.FLAGS + ctagen.QUICK.flags   # -O1 is worth a quick tier


def test_a_level_without_a_measured_fallback_falls_back_to_its_o_level(fake_cc, monkeypatch):
    monkeypatch.setattr(native, "_warned", set())
    monkeypatch.setattr(ctagen, "OPT_BY_SIZE", (ctagen.OptLevel(0, ("-O2", "-fno-ipa-modref"), 9.0),))
    monkeypatch.setenv("PYVGPU_EMU_CC", str(fake_cc(OLD_GCC)))
    assert ctagen.opt_level("int x;").flags == ("-O2",)
    assert ctagen.flags("int x;") == ctagen.FLAGS + ("-O2",)


# ------------------------------------------------------------------------------------- the compiler in the key
def _versioned(tmp_path, version: str):
    cc = tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\n[ "$*" = --version ] && {{ echo "{version}"; exit 0; }}\nexec cc "$@"\n')
    cc.chmod(0o755)
    return str(cc)


def test_the_compilers_version_is_in_the_librarys_key(tmp_path):
    # the same compiler path, another version behind it (an upgrade, a wrapper pointed elsewhere): another key
    cc = _versioned(tmp_path, "gcc 12.2.0")
    native._compiler_identity.cache_clear()
    a = native.library_key(["int f;"], cc, native.FLAGS)
    assert "gcc 12.2.0" in native.compiler_identity(cc)
    _versioned(tmp_path, "gcc 12.3.0")
    native._compiler_identity.cache_clear()
    assert native.library_key(["int f;"], cc, native.FLAGS) != a
    _versioned(tmp_path, "gcc 12.2.0")
    native._compiler_identity.cache_clear()
    assert native.library_key(["int f;"], cc, native.FLAGS) == a


# ------------------------------------------------------------------------- a kernel's record beside its library
N = 8 * 64


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(12)
    x = rng.standard_normal(N).astype(np.float32) * np.float32(1e3)
    x[::17] = np.float32(1e-40)
    x[5::23] = np.inf
    x[::31] = np.frombuffer(np.uint32(0x7FC12345).tobytes(), np.float32)[0]     # a NaN with a payload
    return x


def _daemon(native_mode: str = "on") -> tuple[EmuModule, DeviceMemory]:
    """A daemon's module (a fresh load: its kernel translated and built anew)."""
    mem = DeviceMemory(1 << 40, 1 << 24)
    return EmuModule.load(FMIX.encode(), mem, limits=EmuLimits(native=native_mode, threads=1)), mem


def _run(mod: EmuModule, mem: DeviceMemory, x: np.ndarray) -> bytes:
    src, out = mem.alloc(4 * N), mem.alloc(4 * N)
    mem.write(src, x.tobytes())
    mod.launch("fmix", (8, 1, 1), (64, 1, 1), 0, struct.pack("<QQ", out, src))
    return bytes(mem.read(out, 4 * N))


@pytest.fixture
def generated(monkeypatch, tmp_path) -> list[int]:
    """An empty cache; ctagen.kernel_source's calls counted ([calls]), from before the first daemon on (the
    settings, hence the record's key, stay the same throughout)."""
    if native.compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(ctagen, "preferred_reason", lambda kernel, threadgen_on=True: None)
    calls = [0]
    orig = ctagen.kernel_source

    def counted(*a, **k):
        calls[0] += 1
        return orig(*a, **k)

    monkeypatch.setattr(ctagen, "kernel_source", counted)
    return calls


def _records(tmp_path) -> list[Path]:
    return sorted((tmp_path / "pyvgpu" / "emu-native").glob(f"*{native.RECORD}"))


def _want(x: np.ndarray) -> bytes:
    return _run(*_daemon("off"), x)


def test_a_warm_daemon_finds_the_library_by_the_kernels_record_without_generating_its_c(generated, tmp_path):
    x = _inputs()
    want = _want(x)
    mod, mem = _daemon()
    assert _run(mod, mem, x) == want and generated == [1]
    first = mod.kernel("fmix")
    assert isinstance(first._native, ctagen.CtaCode)
    [path] = _records(tmp_path)
    rec = json.loads(path.read_text())
    assert rec["version"] == native.RECORD_VERSION and rec["key"] == path.stem and rec["class"] == "CtaCode"
    assert (path.parent / f"{rec['library']}.so").exists()
    mod2, mem2 = _daemon()                              # the next daemon: the record names the library
    assert _run(mod2, mem2, x) == want and generated == [1]
    k = mod2.kernel("fmix")
    assert isinstance(k._native, ctagen.CtaCode) and k._native.state == first._native.state
    assert k._native.registers == first._native.registers
    assert k.native_source == first.native_source and generated == [2]     # (made again when asked)


CORRUPT = {
    "empty": lambda path, rec: path.write_bytes(b""),
    "garbage": lambda path, rec: path.write_bytes(b"\x00\xffnot json"),
    "truncated": lambda path, rec: path.write_text(json.dumps(rec)[:-7]),
    "other version": lambda path, rec: path.write_text(json.dumps({**rec, "version": "pyvgpu-kernel-record 0"})),
    "other key": lambda path, rec: path.write_text(json.dumps({**rec, "key": "0" * 24})),
    "library not cached": lambda path, rec: path.write_text(json.dumps({**rec, "library": "0" * 24})),
    "library not a key": lambda path, rec: path.write_text(json.dumps({**rec, "library": "../../x"})),
    "other class": lambda path, rec: path.write_text(json.dumps({**rec, "class": "ThreadCode"})),
    "state not a count": lambda path, rec: path.write_text(json.dumps({**rec, "state": "7"})),
    "layout not pairs": lambda path, rec: path.write_text(json.dumps(
        {**rec, "extra": {"cta": {**rec["extra"]["cta"], "arrays": [[0, 1, 2]]}}})),
    "layout missing": lambda path, rec: path.write_text(json.dumps({**rec, "extra": {"cta": {}}})),
    "too large": lambda path, rec: path.write_text(json.dumps(rec) + " " * native.MAX_RECORD_BYTES),
}


@pytest.mark.parametrize("damage", list(CORRUPT))
def test_a_record_that_is_not_one_of_this_version_and_key_is_a_miss(generated, tmp_path, damage):
    # a record that could name the wrong library or layout runs the wrong code: anything unreadable, of another
    # version or key, or not well formed is a miss (the C generated, its library found by the C's own key) and
    # the record is written again
    x = _inputs()
    want = _want(x)
    mod, mem = _daemon()
    assert _run(mod, mem, x) == want and generated == [1]
    [path] = _records(tmp_path)
    rec = json.loads(path.read_text())
    CORRUPT[damage](path, rec)
    mod2, mem2 = _daemon()
    assert _run(mod2, mem2, x) == want and generated == [2]
    assert isinstance(mod2.kernel("fmix")._native, ctagen.CtaCode)
    assert json.loads(path.read_text()) == rec                  # written again
    mod3, mem3 = _daemon()
    assert _run(mod3, mem3, x) == want and generated == [2]     # (and found)


def test_a_changed_setting_makes_another_records_key(generated, tmp_path, monkeypatch):
    # the C the same PTX makes depends on the generator's settings (a level, a bound, a function replaced): the
    # record of other settings is not found
    x = _inputs()
    want = _want(x)
    mod, mem = _daemon()
    assert _run(mod, mem, x) == want and generated == [1]
    monkeypatch.setattr(ctagen, "OPT_BY_SIZE", (ctagen.OptLevel(0, ("-O1",), 7.0),))
    mod2, mem2 = _daemon()
    assert _run(mod2, mem2, x) == want and generated == [2] and len(_records(tmp_path)) == 2
    monkeypatch.setattr(ctagen, "_shared_at_cta", lambda code: code.replace("TS(M, i, ", "TSC(sb, shl, "))
    mod3, mem3 = _daemon()
    assert _run(mod3, mem3, x) == want and generated == [3] and len(_records(tmp_path)) == 3


def test_a_kernel_without_its_ptxs_identity_keeps_no_record(generated, tmp_path, monkeypatch):
    from pyvgpu_daemon.emu.translator import kernel as kernel_mod
    x = _inputs()
    mod, mem = _daemon()
    monkeypatch.setattr(kernel_mod.Kernel, "_record_key", lambda self, code_class: None)
    assert _run(mod, mem, x) == _want(x) and generated == [1] and _records(tmp_path) == []


def test_what_a_module_keeps_as_it_runs_is_no_setting(monkeypatch):
    # the records' key must be the same in the run that writes a record and the run that reads it, whatever each
    # compiled or logged before (kernel.py's bytecode cache and its count, native's warnings); a setting changes it
    from pyvgpu_daemon.emu.translator import kernel as kernel_mod
    before = native.settings_signature()
    monkeypatch.setattr(kernel_mod, "_bytecode_held", kernel_mod._bytecode_held + 5)
    monkeypatch.setitem(kernel_mod._BYTECODE, ("source", "name"), None)
    monkeypatch.setattr(native, "_warned", {"a reason"})
    assert native.settings_signature() == before
    monkeypatch.setattr(ctagen, "MAX_COMPILE_S", ctagen.MAX_COMPILE_S + 1)
    assert native.settings_signature() != before


def test_the_generator_signature_of_an_install_without_sources(tmp_path, monkeypatch):
    """Records hold for the generator that made them: an install of compiled files only is hashed by those files
    (another build of them, another signature); one with neither sources nor such files never matches a record
    (before, it hashed nothing: every version of the emulator had the same signature)."""
    monkeypatch.setattr(native, "__file__", str(tmp_path / "native.py"))
    signature = native.generator_signature.__wrapped__
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "native.cpython-311.pyc").write_bytes(b"cache")
    assert signature() != signature()                   # (a cache directory's files are not the install)
    (tmp_path / "native.pyc").write_bytes(b"one")
    first = signature()
    assert first == signature()
    (tmp_path / "native.pyc").write_bytes(b"two")
    assert signature() != first
    (tmp_path / "native.py").write_text("x = 1\n")
    assert signature() == signature() != first
