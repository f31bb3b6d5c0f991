"""ModuleIndex: what loading a module needs from its PTX text, without parsing function bodies.

A framework's module can hold hundreds of kernels in tens of MB of PTX (CuPy's CUB module: 383 kernels, 21 MB)
of which a program launches a few. Parsing it all costs about 2 KB of host memory and 0.1 ms per instruction, so
a load reads only:
- everything outside function bodies, with the parser (ptx/parser.py parse_headers): directives, variables and
  their initializers, function headers (parameters, .maxntid); each body is jumped over (`BodySpan`);
- each body once, with a few regular-expression passes (no tokens, no IR): the opcodes its statements start with
  (`BodyScan.opcodes`, for the check that every instruction is one the emulator implements), how many statements
  it has, its declarations (.reg, .local, .shared, call-sequence .param: parsed for real, they are few), which of
  the module's functions it calls directly or mentions otherwise, and which module-level .shared variables it names.

A function's body is parsed in full only when a kernel that needs it is translated (`view`). The scan errs only on
the safe side: a text that merely looks like an opcode (inside a string, say) is confirmed by parsing its function
before anything is refused, and a statement the scan does not see is still parsed and checked at translation.
"""
from __future__ import annotations

import functools
import hashlib
import operator
import re
from collections import Counter
from dataclasses import dataclass, field

from pyvgpu_daemon.errors import CudaError

from ..limits import EmuLimits
from . import ir
from .lexer import tokenize
from .parser import BodySpan, parse_body, parse_declarations, parse_headers, parse_statement
from .types import BYTES, reg_width

# Comments and `.loc`/`.file` lines: blanked (offsets kept) before a body is scanned, since statements after them
# are not preceded by `;`, `{` or `}`.
_NOISE = re.compile(r"//[^\n]*|/\*.*?\*/|^[ \t]*\.(?:loc|file)\b[^\n]*", re.S | re.M)
_LABELS = r"(?:[A-Za-z_$%][\w$]*\s*:(?!:)\s*)*"
_GUARD = r"(?:@!?\s*[%\w$.]+\s+)?"
_OPCODE = r"[A-Za-z][\w$]*(?:\.[\w$]+(?:::[\w$]+)*)*"
# The opcode of every statement: after `;`, `{` or `}`, labels and a guard. Not an opcode: a name followed by `,`,
# `}` or `:` (`{lo, hi}` vector operands, labels of directives).
_NOT_OPERAND = r"(?![\w$.:]|\s*[,}:])"
# One pass finds both, as strings: an instruction's opcode, or a declaration statement (it starts with a dot).
_STATEMENT = re.compile(r"[;{}]\s*" + _LABELS + "(?:" + _GUARD + "(?=[A-Za-z])|(?=\\.))(" + _OPCODE + _NOT_OPERAND
                        + r"|\.(?:reg|local|shared|param|const|global)\b[^;]*(?=;))")
_is_declaration = operator.methodcaller("startswith", ".")
_DECL = re.compile(r"[;{}]\s*" + _LABELS + r"(\.(?:reg|local|shared|param|const|global)\b[^;]*)(?=;)")
# `.reg .b32 %r<12>` and `.reg .pred p`: most declarations, read without the parser (anything else goes through it)
_SIMPLE_REG = re.compile(r"\.reg\s+\.(\w+)\s+(%?[A-Za-z_$][\w$]*)\s*(?:<\s*(\d+)\s*>)?\s*")
_CALL = re.compile(r"(?<![\w$.%])call(?:\.uni)?\s*(?:\([^)]*\)\s*,\s*)?([%\w$.]+)")


@dataclass
class BodyScan:
    """What the scan found in one function body."""
    opcodes: set[str]                        # opcode texts ('ld.global.nc.v4.u32') its statements start with
    statements: int                          # instruction statements
    regs: list[ir.RegDecl]
    locals: list[ir.VarDecl]                 # .local, .shared and call-sequence .param declarations
    calls: Counter = field(default_factory=Counter)   # direct call target -> call sites
    mentions: Counter = field(default_factory=Counter)  # module function -> times named (calls included)
    indirect: bool = False                   # a call through a register
    shared: set[str] = field(default_factory=set)     # module-level .shared variables named

    @property
    def reg_units(self) -> int:
        """32-bit register units declared (cudaFuncAttributes.numRegs counts these)."""
        return sum((2 if reg_width(r.type) == 64 else 1) * (1 if r.count is None else r.count) for r in self.regs)


class ModuleIndex:
    """A module's headers and the scans of its bodies (see the module docstring). `module` has every function with
    an empty body; `function(name)` parses one in full; `view(kernel)` is the ir.Module the translator needs for a
    kernel."""

    def __init__(self, src: str, limits: EmuLimits) -> None:
        self.src = src
        self.limits = limits
        self.module, self.spans = parse_headers(src, limits)
        shared_vars = {v.name for v in self.module.variables if v.space == "shared"}
        func_names = {n for n, f in self.module.functions.items() if not f.is_entry}
        self.scans: dict[str, BodyScan] = {}
        self.opcodes: dict[str, tuple[str, int]] = {}   # opcode text -> (function, offset) of its first use
        self._names: dict[str, str] = {}
        mention = _names_regex(func_names)
        shared = _names_regex(shared_vars)
        for name, span in self.spans.items():
            self.scans[name] = self._scan(name, span, mention, shared, func_names)
        self.module.facts["out_of_line"] = self._out_of_line(func_names)
        self._reach: dict[str, list[str]] = {}

    # ---------------------------------------------------------------- the scan of one body
    def _scan(self, name: str, span: BodySpan, mention, shared, func_names: set[str]) -> BodyScan:
        src = self.src
        text = src[span.start:span.end]
        if "/" in text or ".loc" in text or ".file" in text:
            text = _NOISE.sub(lambda m: " " * len(m.group()), text)
        found = _STATEMENT.findall(text)                 # opcodes and declarations, as strings: C speed
        decls = list(filter(_is_declaration, found))
        statements = len(found) - len(decls)
        if statements > self.limits.max_instructions:
            raise CudaError("cudaErrorInvalidPtx", f"PTX line {span.line}: instructions in {name} exceed the "
                                                   f"emulator's bound of {self.limits.max_instructions}")
        opcodes = set(found).difference(decls)
        for op in opcodes - self.opcodes.keys():          # where the module first uses it (for the check)
            m = re.search(r"[;{}]\s*" + _LABELS + _GUARD + "(" + re.escape(op) + ")" + _NOT_OPERAND, text)
            self.opcodes[op] = (name, span.start + (m.start(1) if m else 0))
            self._names[op] = op
        opcodes = {self._names[op] for op in opcodes}    # one string per opcode text for the whole module
        scan = BodyScan(opcodes, statements, *self._declarations(name, span, text, decls))
        if func_names and mention is not None:
            scan.mentions = Counter(mention.findall(text))
            for target in _CALL.findall(text):
                if target in func_names:
                    scan.calls[target] += 1
                elif target not in self.module.externs:
                    scan.indirect = True          # through a register
        if shared is not None:
            scan.shared = set(shared.findall(text))
        return scan

    def _declarations(self, name: str, span: BodySpan, text: str, decls: list[str]) -> tuple[list, list]:
        """(registers, variables) of a body's declaration statements: the simple register declarations (most of
        them) directly, the rest by the parser; past a bound, all again by the parser one by one (its error names
        the line)."""
        regs: list[ir.RegDecl] = []
        others = []
        for d in decls:
            m = _SIMPLE_REG.fullmatch(d)
            count = m and m.group(3)
            if m and m.group(1) in BYTES and not (count and count[0] == "0" and count != "0"):   # 010 is octal
                regs.append(ir.RegDecl(m.group(1), m.group(2), int(count) if count else None))
            else:
                others.append(d)
        try:
            locals_: list[ir.VarDecl] = []
            if others:
                more, locals_ = parse_declarations(tokenize(" ;\n".join(others) + " ;", line=span.line), name,
                                                   self.limits)
                regs += more
            if sum(1 if r.count is None else r.count for r in regs) > self.limits.max_registers:
                raise CudaError("cudaErrorInvalidPtx", "too many registers")
            return regs, locals_
        except CudaError:
            return parse_declarations(self._declaration_tokens(span, text), name, self.limits)

    @staticmethod
    def _declaration_tokens(span: BodySpan, text: str) -> list:
        """The tokens of a body's declaration statements, each on its own line."""
        toks: list = []
        pos, line = 0, span.line
        for m in _DECL.finditer(text):
            line += text.count("\n", pos, m.start(1))
            pos = m.start(1)
            toks += tokenize(text, m.start(1), m.end(1) + 1, line)
        return toks

    # ---------------------------------------------------------------- the module's call graph
    def _out_of_line(self, func_names: set[str]) -> tuple[set[str], set[str]]:
        """(functions on a cycle of direct calls, functions whose address is taken): what translator/inline.py
        compiles out of line. A function named other than as a direct call's target counts as taken (a .calltargets
        list too): compiling a function out of line is always correct, only slower."""
        if not func_names:
            return set(), set()
        taken: set[str] = set()
        for scan in self.scans.values():
            taken.update(f for f, n in scan.mentions.items() if n > scan.calls.get(f, 0))
        for v in self.module.variables:
            for e in v.init or ():
                if isinstance(e, str) and e.partition("+")[0] in func_names:
                    taken.add(e.partition("+")[0])
        recursive = {f for f in func_names if f in self.spans and self._calls_itself(f)}
        return recursive, taken

    def _calls_itself(self, f: str) -> bool:
        seen: set[str] = set()
        todo = list(self.scans[f].calls)
        while todo:
            g = todo.pop()
            if g == f:
                return True
            if g not in seen and g in self.scans:
                seen.add(g)
                todo.extend(self.scans[g].calls)
        return False

    def reach(self, kernel: str) -> list[str]:
        """The functions `kernel` may run (named in it, transitively; every address-taken function when a call
        goes through a register), in module order."""
        if kernel not in self._reach:
            taken = self.module.facts["out_of_line"][1]
            seen: set[str] = set()
            todo = [kernel]
            while todo:
                f = todo.pop()
                scan = self.scans[f]
                more = set(scan.mentions) | set(scan.calls) | (taken if scan.indirect else set())
                for g in more:
                    if g not in seen and g != kernel and g in self.spans:
                        seen.add(g)
                        todo.append(g)
            self._reach[kernel] = [f for f in self.spans if f in seen]
        return self._reach[kernel]

    def inlined_instructions(self, kernel: str) -> int:
        """The kernel's statements once its calls are inlined (each call site of an inlined function copies it;
        out-of-line functions count once), capped just past EmuLimits.max_instructions."""
        cap = self.limits.max_instructions + 1
        recursive, taken = self.module.facts["out_of_line"]
        ool = recursive | taken
        memo: dict[str, int] = {}

        def size(f: str, depth: int) -> int:
            if f in memo:
                return memo[f]
            scan = self.scans[f]
            n = scan.statements
            if depth <= self.limits.max_call_depth:
                for g, sites in scan.calls.items():
                    if g not in ool and g in self.scans:
                        n = min(cap, n + sites * size(g, depth + 1))
            memo[f] = min(n, cap)
            return memo[f]

        return min(cap, size(kernel, 0) + sum(self.scans[f].statements for f in self.reach(kernel) if f in ool))

    @functools.cached_property
    def digest(self) -> str:
        """A hash of the module's PTX text: with a kernel's name, what its translation is made from (the native
        cache's kernel records: emu/native.py's `record_key`)."""
        return hashlib.sha256(self.src.encode()).hexdigest()

    # ---------------------------------------------------------------- parsing on demand
    def function(self, name: str) -> ir.Function:
        """One function parsed in full."""
        return parse_body(self.src, self.spans[name], self.module.functions[name], self.limits)

    def view(self, kernel: str) -> ir.Module:
        """The module as the translator sees it for one kernel: its variables, externs and call-graph facts, and
        the kernel and the functions it may run parsed in full (nothing else is parsed)."""
        m = self.module
        functions = {f: self.function(f) for f in [kernel, *self.reach(kernel)]}
        return ir.Module(m.version, m.target, m.address_size, m.variables, functions, m.externs, m.facts)

    def statement(self, offset: int, function: str) -> ir.Instr:
        """The instruction whose opcode starts at `offset` (in `function`'s body), parsed alone."""
        span = self.spans[function]
        end = self.src.find(";", offset, span.end)
        end = span.end if end < 0 else end + 1
        line = span.line + self.src.count("\n", span.start, offset)
        return parse_statement(tokenize(self.src, offset, end, line), self.limits)

    def statements(self, opcodes: frozenset[str]) -> list[tuple[str, int]]:
        """(function, offset) of every statement whose opcode (before its first dot) is one of `opcodes`, in the
        functions that use them: each occurrence of the name is confirmed as a statement's opcode by matching the
        statement pattern from the `;`, `{` or `}` before it."""
        heads = {op.partition(".")[0] for op in self.opcodes} & opcodes
        out = []
        for name, scan in self.scans.items():
            used = {op.partition(".")[0] for op in scan.opcodes} & heads
            if not used:
                continue
            span = self.spans[name]
            text = self.src[span.start:span.end]
            if "/" in text or ".loc" in text or ".file" in text:
                text = _NOISE.sub(lambda m: " " * len(m.group()), text)
            found = set()
            for head in used:
                pos = text.find(head)
                while pos >= 0:
                    before = max(text.rfind(";", 0, pos), text.rfind("{", 0, pos), text.rfind("}", 0, pos))
                    m = _STATEMENT.match(text, before) if before >= 0 else None
                    if m and m.start(1) == pos and m.group(1).partition(".")[0] == head:
                        found.add(pos)
                    pos = text.find(head, pos + len(head))
            out.extend((name, span.start + p) for p in sorted(found))
        return out


def _names_regex(names: set[str]):
    """A pattern finding any of `names` as a whole PTX identifier (None for no names)."""
    if not names:
        return None
    alts = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(r"(?<![\w$.%])(" + alts + r")(?![\w$])")
