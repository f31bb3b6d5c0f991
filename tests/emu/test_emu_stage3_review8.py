"""Review of stop 31's stage-3 and native-build work (ctasize8, native8, scanfast8): cases that gave a wrong result
or broke a guarantee, each failing on the code before its fix."""
from __future__ import annotations

from pyvgpu_daemon.emu import native


# --------------------------------------------------------------------------- native.py: failures worth remembering
def _fake_cc(tmp_path, body: str):
    """A compiler (PYVGPU_EMU_CC) that logs each run to tmp_path/runs, then runs `body` (sh)."""
    cc = tmp_path / "fake-cc"
    cc.write_text(f"#!/bin/sh\necho run >> {tmp_path / 'runs'}\n{body}\n")
    cc.chmod(0o755)
    return cc


def _runs(tmp_path) -> int:
    p = tmp_path / "runs"
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_a_compiler_killed_from_outside_is_not_remembered_as_failed(tmp_path, monkeypatch):
    # GCC's driver exits 1 (not by a signal) when the OOM killer kills cc1, with this message (checked with gcc 12:
    # cc1 killed by SIGKILL during a build): remembered, the kernel never got native code on this machine again
    monkeypatch.setattr(native, "_warned", set())
    for message in ("gcc: fatal error: Killed signal terminated program cc1", "cc1: out of memory allocating 65536 bytes",
                    "/usr/bin/ld: final link failed: No space left on device"):
        cache = tmp_path / message.split()[1].strip(":")
        cache.mkdir()
        monkeypatch.setenv("PYVGPU_EMU_CC", str(_fake_cc(tmp_path, f"echo '{message}' >&2; echo 'compilation "
                                                                   f"terminated.' >&2; exit 1")))
        src = "int f(void) { return 3; }\n"
        before = _runs(tmp_path)
        assert native.load(src, cache) is None and not list(cache.glob("*.failed"))
        assert native.load(src, cache) is None and _runs(tmp_path) == before + 2       # tried again
        monkeypatch.delenv("PYVGPU_EMU_CC")
    # a real error in the source is still remembered
    monkeypatch.setenv("PYVGPU_EMU_CC", str(_fake_cc(tmp_path, "echo 'x.c:1:1: error: expected ;' >&2; exit 1")))
    assert native.load("int g(void) { return 4 }\n", tmp_path) is None and len(list(tmp_path.glob("*.failed"))) == 1
