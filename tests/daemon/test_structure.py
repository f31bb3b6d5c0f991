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


def test_a_fast_op_never_creates_or_frees():
    """fastrun.py checks a run's FAST ops before any of them ran: sound only while none of them creates or frees what
    the others resolve. op() refuses a FAST line that says it does, however it says so; the table has none."""
    import pytest
    from pyvgpu import protocol as P
    fast = P.OpFlag.ASYNC | P.OpFlag.FAST
    assert [s.name for s in P.OPS if s.fast and P.creates_or_frees(s.name, s.args, s.reply)] == []
    for bad, why in ((lambda: P.op(99, "EVENT_RENEW", "dev:dev event:handle", flags=fast), "raw handle"),
                     (lambda: P.op(99, "SCRATCH_FREE", "dev:dev ptr:ptr stream:stream", flags=fast), "FREE"),
                     (lambda: P.op(99, "KERNEL_UNLOAD", "dev:dev func:func", flags=fast), "UNLOAD"),
                     (lambda: P.op(99, "STREAM_FORK", "dev:dev stream:stream", "u64", fast), "reply carries")):
        with pytest.raises(ValueError, match=f"never creates or frees.*{why}"):
            bad()
    # the same lines without FAST are fine: the rule is FAST's alone
    assert P.op(99, "SCRATCH_FREE", "dev:dev ptr:ptr stream:stream", flags=P.OpFlag.ASYNC).name == "SCRATCH_FREE"


# ---------------------------------------------------------------------------------------------- imports
PACKAGES = {"pyvgpu": ROOT / "pyvgpu", "pyvgpu_daemon": ROOT / "daemon" / "pyvgpu_daemon"}


def _modules() -> dict[str, Path]:
    """Every module of the two packages by its dotted name (a package by its own name: its __init__.py)."""
    out = {}
    for top, base in PACKAGES.items():
        for p in base.rglob("*.py"):
            if "__pycache__" in p.parts:
                continue
            parts = [top, *p.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (annotations only: no import at run time)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    return skip


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the two packages it imports (anywhere in it, functions included; importing a.b.c
    runs a, a.b and a.b.c, so each is an edge)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_only(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                parts = t.split(".")
                for i in range(1, len(parts) + 1):
                    dep = ".".join(parts[:i])
                    if dep in modules and dep != name and not name.startswith(dep + "."):
                        graph[name].add(dep)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    graph = import_graph()
    assert "pyvgpu_daemon.handlers.registry" in graph["pyvgpu_daemon.handlers.memory"]
    assert "pyvgpu_daemon.handlers.memory" in graph["pyvgpu_daemon.handlers.dispatch"]
