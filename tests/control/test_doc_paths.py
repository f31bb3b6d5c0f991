"""Every repository path the documentation and the code's comments name exists: docs/ and the READMEs in full, and
the comments and docstrings of the C, CUDA, Python, CMake and shell sources. A path is a word starting with one of
the repository's top-level directories (`csrc/core/reader.c`, `tests/e2e/`); `{a,b}` alternatives are expanded and
globs must match something. Names with placeholders (`pv_<module>.h`) and what the build or an install creates
(BUILT) are not files of the repository."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from harness import ROOT

TOP = ("csrc", "pyvgpu", "daemon", "pyvgpu_daemon", "tests", "tools", "bench", "docs", "scripts", "examples", ".ci")
PATH = re.compile(r"(?<![\w./$~-])((?:" + "|".join(re.escape(t) for t in TOP) + r")/[\w.{},*/-]*[\w}*/])(<?)")
BUILT = ("pyvgpu/lib",)     # the installed package's client libraries (scikit-build-core puts them there)
SOURCES = (".md", ".c", ".h", ".cu", ".py", ".sh", ".map")


def commentary(path: Path) -> str:
    """The prose of a file: all of a Markdown file; comments (and docstrings) of code."""
    text = path.read_text(errors="replace")
    if path.suffix == ".md":
        return text
    if path.suffix in (".c", ".h", ".cu"):
        return "\n".join(re.findall(r"/\*.*?\*/|//[^\n]*", text, flags=re.S))
    if path.suffix == ".py":
        out = []
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and
                                                tok.string.lstrip("rbuRBU").startswith(('"""', "'''"))):
                out.append(tok.string)
        return "\n".join(out)
    return "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))   # CMake, shell, maps


def expand(word: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [x for alt in m.group(1).split(",") for x in expand(word[:m.start()] + alt + word[m.end():])]


def exists(path: str) -> bool:
    if path.startswith("pyvgpu_daemon/"):
        path = "daemon/" + path
    if path.startswith(BUILT):
        return True
    if "*" in path:
        return any(ROOT.glob(path))
    if (ROOT / path).exists():
        return True
    dotted = re.fullmatch(r"(.+)\.\w+", path)      # a Python module's attribute: tools/cublas_wheel.fetch
    return bool(dotted) and (ROOT / (dotted.group(1) + ".py")).is_file()


def documents() -> list[Path]:
    tracked = [ROOT / "README.md", ROOT / "CMakeLists.txt"]
    for top in TOP:
        if (ROOT / top).is_dir():
            tracked += [p for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                        and (p.suffix in SOURCES or p.name == "CMakeLists.txt")]
    return tracked


def missing_in(doc: Path) -> list[str]:
    """The paths doc names that are not in the repository."""
    bad = []
    for m in PATH.finditer(commentary(doc)):
        if m.group(2):                         # a placeholder follows: pv_<module>.h
            continue
        bad += [path for path in expand(m.group(1).rstrip(".")) if not exists(path)]
    return sorted(set(bad))


def test_every_named_path_exists():
    bad = [f"{doc.relative_to(ROOT)}: {path}" for doc in documents() for path in missing_in(doc)]
    assert bad == []


def test_a_missing_path_is_found(tmp_path):
    """The check itself: a stale name is reported; a live one, a placeholder, alternatives and a glob are not."""
    doc = tmp_path / "probe.md"
    doc.write_text("`csrc/core/no_such_file.c`, `csrc/core/reader.c`, `csrc/core/pv_<module>.h`, "
                   "csrc/cublas{,lt}/CMakeLists.txt, tests/cuda/drv_*.c, csrc/{core,nowhere}/x.c\n")
    assert missing_in(doc) == ["csrc/core/no_such_file.c", "csrc/core/x.c", "csrc/nowhere/x.c"]
