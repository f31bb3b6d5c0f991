"""The daemon's structure, checked: everything an op is lives on its spec line (pyvgpu/protocol.py), so no module
keeps a list of op names or decides by an op's name."""
from __future__ import annotations

import ast
from pathlib import Path

from harness import ROOT
from pyvgpu.protocol import OP_BY_NAME

SOURCES = (ROOT / "pyvgpu", ROOT / "daemon" / "pyvgpu_daemon", ROOT / "tools")


def _python_files() -> list[Path]:
    return sorted(p for d in SOURCES for p in d.rglob("*.py") if "__pycache__" not in p.parts)


def _op_name(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and node.value in OP_BY_NAME else None


def op_name_lists(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every collection of two or more op names, and every comparison of a `.name` with one."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            names = [n for n in map(_op_name, node.elts) if n]
        elif isinstance(node, ast.Dict):
            names = [n for n in map(_op_name, [k for k in node.keys if k is not None]) if n]
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_op_name(x) for x in sides) and any(isinstance(x, ast.Attribute) and x.attr == "name"
                                                      for x in sides):
                found.append((node.lineno, f"decides by the op name {next(filter(None, map(_op_name, sides)))}"))
            continue
        else:
            continue
        if len(names) >= 2:
            found.append((node.lineno, f"a list of op names {names[:4]}{'...' if len(names) > 4 else ''}"))
    return found


def test_no_module_keeps_a_list_of_op_names():
    offenders = []
    for path in _python_files():
        for line, what in op_name_lists(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not offenders, "op properties belong on the spec line (pyvgpu/protocol.py):\n" + "\n".join(offenders)


def test_the_checker_finds_lists_and_name_tests():
    """The check above could fail: it finds each form a list of op names has taken in this code base."""
    cases = {
        'LOOP = frozenset({"MEMSET", "LAUNCH"})': 1,
        'SIZE = {"MEMSET": 3, "MEMCPY_DTOH": 2}': 1,
        'if spec.name in ("STATUS", "PING"): pass': 1,
        'if spec.name == "GOODBYE": pass': 1,
        'x = OP_BY_NAME["LAUNCH"].code': 0,
        'names = ["MEMSET", "not an op"]': 0,
    }
    for source, count in cases.items():
        assert len(op_name_lists(ast.parse(source))) == count, source


def test_spec_lines_declare_what_the_daemon_acts_on():
    """The properties read from the spec: flags as booleans, argument roles, and what op() refuses."""
    import pytest
    from pyvgpu import protocol as P
    d3 = P.OP_BY_NAME["MEMCPY3D_DTOH"]
    args = [0] * len(d3.args)
    for name, v in (("width", 16), ("height", 3), ("depth", 2)):
        args[d3.arg_names.index(name)] = v
    assert d3.payload_out and d3.sync_point and d3.extent(args) == 96
    args[d3.arg_names.index("depth")] = True                  # a bool is not a size
    assert d3.extent(args) is None
    assert P.OP_BY_NAME["LAUNCH"].func_arg == 1 and P.OP_BY_NAME["LAUNCH"].graph and P.OP_BY_NAME["LAUNCH"].loop
    wait = P.OP_BY_NAME["STREAM_WAIT_EVENT"]
    assert wait.stream_arg == 1 and wait.ordered_on is None    # an event: a barrier for stream priorities
    assert P.OP_BY_NAME["MEMSET"].ordered_on == P.OP_BY_NAME["MEMSET"].arg_names.index("stream")
    assert not P.OP_BY_NAME["MALLOC"].work and P.OP_BY_NAME["MEMSET"].work and not P.OP_BY_NAME["STATUS"].device
    assert P.OP_BY_NAME["MEM_GET_INFO"].extent([0]) == 0       # no extent: moves no bytes by an argument
    for bad in (lambda: P.op(99, "BAD", "dev:dev x:u64:nonsense"),          # unknown role
                lambda: P.op(99, "BAD", "dev:dev x:ptr:extent"),            # an extent is a count
                lambda: P.op(99, "BAD", "dev:dev", flags=P.OpFlag.GRAPH),   # a graph node is fire-and-forget
                lambda: P.op(99, "BAD", "", flags=P.OpFlag.NO_DEVICE | P.OpFlag.LOOP)):
        with pytest.raises(ValueError):
            bad()
