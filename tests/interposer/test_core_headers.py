"""The client core's declarations live in one header per module (csrc/core/pv_<module>.h): each compiles on its own
(it includes what it uses), the core's own files include the module headers they use rather than the whole
interface (pv_core.h, which the API libraries include), and pv_core.h includes every module header."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from harness import ROOT

CORE = ROOT / "csrc" / "core"
MODULE_HEADERS = sorted(p for p in CORE.glob("pv_*.h") if p.name != "pv_core.h")


@pytest.mark.parametrize("header", MODULE_HEADERS, ids=lambda p: p.name)
def test_each_header_compiles_alone(header, gen_dir, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    src = tmp_path / "one.c"
    src.write_text(f'#include "{header.name}"\n')
    out = subprocess.run([cc, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I", str(CORE),
                          "-I", str(gen_dir), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_core_files_include_module_headers():
    offenders = [p.name for p in CORE.glob("*.c") if '#include "pv_core.h"' in p.read_text()]
    assert not offenders, f"core files including the whole interface: {offenders}"
    umbrella = set(re.findall(r'#include "(pv_\w+\.h)"', (CORE / "pv_core.h").read_text()))
    wanted = {p.name for p in MODULE_HEADERS} - {"pv_features.h", "pv_graph.h", "pv_types.h"}
    assert wanted <= umbrella, f"pv_core.h lacks {sorted(wanted - umbrella)}"
