"""coldkey12: the level a build actually runs at (ctagen.opt_level's fallback), the compiler's version in the native
cache's key, and a kernel's record beside its library (native.py) that lets a warm run find the library without
generating its C."""
from __future__ import annotations

from pyvgpu_daemon.emu import native
from pyvgpu_daemon.emu.translator import ctagen

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
