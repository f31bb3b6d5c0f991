"""memtune: glibc's mmap/trim thresholds are raised once per process; a libc without them is skipped quietly; the
collector's set-up objects are frozen and young collections made rarer."""
from __future__ import annotations

import ctypes
import logging
import subprocess
import sys

import pytest

from pyvgpu_daemon import memtune


def test_tune_malloc_applies_once_on_glibc():
    code = ("from pyvgpu_daemon.memtune import tune_malloc as t; import platform;"
            "r = t(); print(r, t() is r, platform.libc_ver()[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    if out[2] != "glibc":
        pytest.skip("not a glibc system")
    assert out[:2] == ["True", "True"]


def test_non_glibc_is_skipped_at_debug(monkeypatch, caplog):
    def no_libc(*a, **k):
        raise OSError("no such library")
    monkeypatch.setattr(memtune, "_applied", None)
    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    with caplog.at_level(logging.DEBUG, logger="pyvgpu.daemon"):
        assert memtune.tune_malloc() is False
    assert any(r.levelno == logging.DEBUG and "not glibc" in r.message for r in caplog.records)


def test_tune_gc_freezes_set_up_objects_and_keeps_collecting_cycles():
    """After tune_gc what existed is frozen, young collections wait GC_YOUNG allocations (the older generations keep
    CPython's ratios), and cyclic garbage made afterwards is still collected."""
    code = ("import gc, weakref; from pyvgpu_daemon import memtune as m; m.tune_gc();"
            "print(gc.get_freeze_count() > 1000, gc.get_threshold() == (m.GC_YOUNG, 10, 10));"
            "A = type('A', (), {}); a = A(); a.me = a; r = weakref.ref(a); del a;"
            "keep = []\n"
            "while r() is not None and len(keep) < 10 * m.GC_YOUNG:\n"
            "    keep.append([])\n"
            "print(r() is None, len(keep) > m.GC_YOUNG // 2)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "True", "True"]
