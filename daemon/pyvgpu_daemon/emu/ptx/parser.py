"""PTX text → ir.Module.

A hand-written recursive-descent parser over lexer tokens. It knows the module directives, variable declarations
with initializers, .entry/.func with parameters and return parameters, .reg declarations, labels, guards, vector
operands, nested `{ }` scopes (inline asm, call sequences) whose local names are renamed uniquely, and call
sequences. `.file`, `.loc`, `.section`, `.pragma` are skipped. Anything unknown is cudaErrorInvalidPtx naming it and
its line. Instruction *semantics* (which modifiers an opcode accepts) are checked when a kernel is compiled.

Two ways in: `parse` reads a whole module; `parse_headers` reads only what is outside function bodies (directives,
variables and their initializers, function headers) and jumps over each body, recording where it is (`BodySpan`),
and `parse_body` reads one body later (ptx/index.py: lazy translation of large modules), which also reads
declarations and single statements alone (`parse_declarations`, `parse_statement`).

Bounded by EmuLimits: the text's size, registers per function (a range `%rd<N>` counts N), declarations per module
and per parameter list, instructions per function. Past a bound the module is cudaErrorInvalidPtx, before the
parser has spent more than the bound.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace

from pyvgpu_daemon.errors import CudaError

from ..limits import EmuLimits
from . import ir
from .lexer import Lexer, Token, tokenize
from .predefined import WARP_SZ
from .types import BYTES

# Every instruction name of the PTX ISA (9.x). The parser accepts these; the translator decides what it can run.
KNOWN_OPCODES = frozenset("""
abs activemask add addc alloca and applypriority atom bar barrier bfe bfi bfind bmsk bra brev brkpt brx call
clz cnot copysign cos cp cvt cvta discard div dp2a dp4a elect exit ex2 fence fma fns getctarank griddepcontrol
isspacep istypep ld ldmatrix ldu lg2 lop3 mad mad24 madc match max mbarrier membar min mma mov movmatrix mul
mul24 multimem nanosleep neg not or pmevent popc prefetch prefetchu prmt rcp red redux rem ret rsqrt sad selp
set setmaxnreg setp shf shfl shl shr sin slct sqrt st stackrestore stacksave stmatrix sub subc suld suq sured
sust szext tanh testp tex tld4 trap txq vabsdiff vabsdiff2 vabsdiff4 vadd vadd2 vadd4 vavrg2 vavrg4 vmad vmax
vmax2 vmax4 vmin vmin2 vmin4 vote vset vset2 vset4 vshl vshr vsub vsub2 vsub4 wgmma wmma xor tcgen05 clusterlaunchcontrol
""".split())

# The video instructions: their operands carry selectors (`%r1.b0`, `%r2.h10`) and vmad's may be negated.
VIDEO_OPCODES = frozenset("vadd vsub vabsdiff vmin vmax vshl vshr vmad vset vadd2 vsub2 vavrg2 vabsdiff2 vmin2 "
                          "vmax2 vset2 vadd4 vsub4 vavrg4 vabsdiff4 vmin4 vmax4 vset4".split())
_VIDEO_SEL = re.compile(r"b[0-3]|h[01]|h[0-3]{1,2}|b[0-7]{1,4}")

# Opcodes whose first operand is not a destination.
_NO_DST = frozenset("st bra brx ret exit membar fence red call nanosleep trap brkpt prefetch prefetchu pmevent "
                    "sust sured cp discard applypriority stackrestore griddepcontrol setmaxnreg mbarrier "
                    "stmatrix".split())

_SKIP_LINE = (".file", ".loc")
_CALL_DIRECTIVES = (".callprototype", ".calltargets", ".branchtargets")
_PERF = {".maxntid", ".reqntid", ".minnctapersm", ".maxnctapersm", ".maxnreg", ".maxclusterrank", ".reqnctapercluster",
         ".explicitcluster", ".noreturn", ".blocksareclusters"}


def _err(line: int, msg: str) -> CudaError:
    return CudaError("cudaErrorInvalidPtx", f"PTX line {line}: {msg}")


def parse_literal(text: str, line: int = 0) -> ir.Imm:
    t = text
    low = t.lower()
    try:
        if low.startswith("0f") and len(t) == 10:
            return ir.Imm(int(t[2:], 16), True, text)
        if low.startswith("0d") and len(t) == 18:
            return ir.Imm(int(t[2:], 16), True, text)
        if low.endswith("u"):
            t = t[:-1]
            low = low[:-1]
        if low.startswith("0x"):
            return ir.Imm(int(t[2:], 16), False, text)
        if low.startswith("0b"):
            return ir.Imm(int(t[2:], 2), False, text)
        if "." in t or "e" in low:
            return ir.Imm(float(t), False, text)
        if len(t) > 1 and t.startswith("0"):
            return ir.Imm(int(t, 8), False, text)
        return ir.Imm(int(t), False, text)
    except ValueError:
        raise _err(line, f"bad literal {text!r}") from None


@dataclass(frozen=True)
class BodySpan:
    """Where a function's body is in the module text: src[start:end] is `{ ... }`, starting on line `line`."""
    start: int
    end: int
    line: int


# What can contain braces without opening or closing a scope: comments and strings (as the lexer reads them).
_BRACES = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|[{}]', re.S)


_NOT_BRACE = re.compile(r"[^{}]+")
_BRACE_IN_COMMENT = re.compile(r"//[^\n]*[{}]")
_BRACE_IN_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*[{}]')


def _braces_only_in_code(window: str) -> bool:
    """No brace of `window` is inside a comment or string (no block comment at all)."""
    return not ("/*" in window or "//" in window and _BRACE_IN_COMMENT.search(window)
                or '"' in window and _BRACE_IN_STRING.search(window))


def body_end(src: str, start: int, name: str, line: int) -> int:
    """The offset just past the `}` that closes the `{` at src[start] (vector operands and nested scopes are
    balanced inside); cudaErrorInvalidPtx when it is never closed."""
    # Compilers close a body with `}` at the start of a line: try the first such line, counting braces at C speed;
    # anything unusual (that line does not close the body, braces in comments or strings) takes the full scan.
    cand = src.find("\n}", start)
    if cand > 0:
        window = src[start:cand + 2]
        if _braces_only_in_code(window):
            braces = _NOT_BRACE.sub("", window)
            depth = 0
            for k, c in enumerate(braces):
                depth += 1 if c == "{" else -1
                if depth == 0:
                    if k == len(braces) - 1:
                        return cand + 2
                    break
    depth = 0
    for m in _BRACES.finditer(src, start):
        c = m.group()
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return m.end()
    raise _err(line, f"unterminated body of {name}")


def check_size(nbytes: int, limits: EmuLimits) -> None:
    """PTX text of `nbytes` is refused before anything of it is read when larger than EmuLimits.max_ptx_bytes."""
    if nbytes > limits.max_ptx_bytes:
        raise CudaError("cudaErrorInvalidPtx", f"PTX of {nbytes} bytes is larger than the emulator's bound of "
                                               f"{limits.max_ptx_bytes} bytes (PYVGPU_EMU_MAX_PTX_BYTES)")


class _Parser:
    def __init__(self, src: str, limits: EmuLimits, toks: list[Token] | None = None) -> None:
        """Over `toks` when given, else over the whole text read on demand (so that, with `bodies` False, function
        bodies are skipped unread and their spans recorded in `spans`)."""
        self.src = src
        self.limits = limits
        self.toks: list[Token] = toks if toks is not None else []
        self.lexer: Lexer | None = None if toks is not None else Lexer(src)
        self.bodies = True                 # parse function bodies (False: record their spans only)
        self.spans: dict[str, BodySpan] = {}
        self.i = 0
        self.scope_counter = 0
        self.decls = 0                     # module-level declarations so far
        self.fn_regs = 0                   # registers the current function declared so far
        self.mod = ir.Module(version="", target="", address_size=64)

    def _bound(self, n: int, limit: int, what: str, line: int) -> None:
        if n > limit:
            raise _err(line, f"{what} exceed the emulator's bound of {limit}")

    # ---------------------------------------------------------------- token helpers
    def peek(self, k: int = 0) -> Token | None:
        j = self.i + k
        toks = self.toks
        while j >= len(toks) and self.lexer is not None:
            if not self.lexer.more(toks):
                self.lexer = None
        return toks[j] if j < len(toks) else None

    def line(self) -> int:
        t = self.peek()
        return t.line if t else (self.toks[-1].line if self.toks else 0)

    def next(self) -> Token:
        t = self.peek()
        if t is None:
            raise _err(self.line(), "unexpected end of PTX")
        self.i += 1
        return t

    def accept(self, text: str) -> bool:
        t = self.peek()
        if t is not None and t.text == text:
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        t = self.next()
        if t.text != text:
            raise _err(t.line, f"expected {text!r}, found {t.text!r}")
        return t

    def skip_line(self, line: int) -> None:
        while self.peek() is not None and self.peek().line == line:
            self.i += 1

    def skip_balanced(self) -> None:
        self.expect("{")
        depth = 1
        while depth:
            t = self.next()
            if t.text == "{":
                depth += 1
            elif t.text == "}":
                depth -= 1

    def int_value(self) -> int:
        neg = self.accept("-")
        t = self.next()
        if t.kind != "num":
            raise _err(t.line, f"expected a number, found {t.text!r}")
        v = parse_literal(t.text, t.line)
        if v.is_float_bits or isinstance(v.value, float):
            raise _err(t.line, f"expected an integer, found {t.text!r}")
        return -v.value if neg else v.value

    # ---------------------------------------------------------------- module level
    def parse(self) -> ir.Module:
        while self.peek() is not None:
            t = self.peek()
            x = t.text
            if x == ".version":
                self.next()
                self.mod.version = self.next().text
            elif x == ".target":
                self.next()
                targets = [self.next().text]
                while self.accept(","):
                    targets.append(self.next().text)
                self.mod.target = targets[0]
            elif x == ".address_size":
                self.next()
                self.mod.address_size = self.int_value()
            elif x in _SKIP_LINE:
                self.skip_line(t.line)
            elif x == ".section":
                self.next()
                self.next()
                self.skip_balanced()
            elif x == ".pragma":
                self.next()
                self.next()
                self.expect(";")
            elif x in (".visible", ".extern", ".weak", ".common", ".entry", ".func", ".global", ".const",
                       ".shared", ".local", ".tex", ".surfref", ".texref", ".samplerref", ".alias"):
                self.top_decl()
            else:
                raise _err(t.line, f"unknown module-level directive or statement {x!r}")
        return self.mod

    def top_decl(self) -> None:
        self.decls += 1
        self._bound(self.decls, self.limits.max_declarations, "module-level declarations", self.line())
        extern = False
        while self.peek().text in (".visible", ".extern", ".weak", ".common"):
            if self.next().text == ".extern":
                extern = True
        t = self.peek()
        if t.text in (".entry", ".func"):
            self.function(extern)
        elif t.text in (".global", ".const", ".shared", ".local"):
            v = self.var_decl(extern)
            self.mod.variables.append(v)
        elif t.text == ".alias":
            raise _err(t.line, "unsupported directive '.alias'")
        else:
            raise _err(t.line, f"unsupported declaration {t.text!r}")

    def var_decl(self, extern: bool, rename=None) -> ir.VarDecl:
        space_tok = self.next()
        space = space_tok.text[1:]
        align = 0
        attrs: list[str] = []
        vec = 1
        typ = None
        while True:
            t = self.peek()
            if t.text == ".align":
                self.next()
                align = self.int_value()
            elif t.text == ".attribute":
                self.next()
                self.expect("(")
                while not self.accept(")"):
                    attrs.append(self.next().text.lstrip("."))
            elif t.text in (".v2", ".v4", ".v8"):
                self.next()
                vec = int(t.text[2:])
            elif t.text.startswith(".") and t.text[1:] in BYTES:
                self.next()
                typ = t.text[1:]
            elif t.text == ".ptr":
                self.next()
            else:
                break
        if typ is None:
            raise _err(space_tok.line, f"variable declaration without a type (found {self.peek().text!r})")
        name_tok = self.next()
        if name_tok.kind != "id":
            raise _err(name_tok.line, f"expected a variable name, found {name_tok.text!r}")
        name = name_tok.text
        count: int | None = None
        dims: list[int] = []
        while self.accept("["):
            if self.accept("]"):
                dims.append(0)
            else:
                dims.append(self.int_value())
                self.expect("]")
        if dims:
            count = 1
            for d in dims:
                count *= d
        if vec > 1:
            count = (count if count is not None else 1) * vec
        init = None
        if self.accept("="):
            init = []
            self.initializer(init)
        self.expect(";")
        if rename is not None:
            name = rename(name)
        if not align:
            align = BYTES.get(typ, 1) * vec
        return ir.VarDecl(space=space, name=name, type=typ, align=align, count=count, init=init,
                          extern=extern or (count == 0), attributes=tuple(attrs))

    def initializer(self, out: list) -> None:
        if self.accept("{"):
            if self.accept("}"):
                return
            self.initializer(out)
            while self.accept(","):
                self.initializer(out)
            self.expect("}")
            return
        neg = self.accept("-")
        t = self.next()
        if t.kind == "num":
            v = parse_literal(t.text, t.line)
            if v.is_float_bits:
                out.append(("bits", v.value, len(t.text) == 10))
            elif isinstance(v.value, float):
                out.append(-v.value if neg else v.value)
            else:
                out.append(-v.value if neg else v.value)
        elif t.kind == "id":
            name = t.text
            if name in ("generic", "mask"):
                self.expect("(")
                name = self.next().text
                self.expect(")")
            off = 0
            if self.accept("+"):
                off = self.int_value()
            out.append(name if not off else f"{name}+{off}")
        else:
            raise _err(t.line, f"bad initializer element {t.text!r}")

    def param_list(self, fn_line: int) -> list[ir.Param]:
        params: list[ir.Param] = []
        self.expect("(")
        if self.accept(")"):
            return params
        while True:
            kind = self.next()
            if kind.text not in (".param", ".reg"):
                raise _err(kind.line, f"expected .param or .reg in a parameter list, found {kind.text!r}")
            align = None
            typ = None
            while self.peek().text.startswith(".") and self.peek().kind == "id":
                d = self.next().text
                if d == ".align":
                    align = self.int_value()
                elif d[1:] in BYTES:
                    typ = d[1:]
                elif d in (".ptr", ".global", ".const", ".shared", ".local"):
                    pass
                else:
                    raise _err(kind.line, f"unsupported parameter attribute {d!r}")
            if typ is None:
                raise _err(kind.line, "parameter without a type")
            name = self.next().text
            count = None
            if self.accept("["):
                count = self.int_value()
                self.expect("]")
            if kind.text == ".reg" and typ == "pred":
                raise _err(kind.line, ".reg .pred parameters are not supported")
            params.append(ir.Param(name, typ, align, count))
            self._bound(len(params), self.limits.max_declarations, "parameters", kind.line)
            if self.accept(")"):
                return params
            self.expect(",")

    def function(self, extern: bool) -> None:
        kw = self.next()
        is_entry = kw.text == ".entry"
        returns: list[ir.Param] = []
        if not is_entry and self.peek().text == "(":
            returns = self.param_list(kw.line)
        name = self.next().text
        params: list[ir.Param] = []
        if self.peek() is not None and self.peek().text == "(":
            params = self.param_list(kw.line)
        fn = ir.Function(name=name, is_entry=is_entry, params=params, returns=returns, line=kw.line)
        self.fn_regs = 0
        while self.peek() is not None and self.peek().text in _PERF:
            d = self.next().text
            vals = []
            if d not in (".noreturn", ".explicitcluster", ".blocksareclusters"):
                vals.append(self.int_value())
                while self.accept(","):
                    vals.append(self.int_value())
            if d in (".maxntid", ".reqntid"):
                fn.maxntid = tuple(vals)
        if self.accept(";"):
            self.mod.externs.add(name)
            return
        if extern:
            self.mod.externs.discard(name)
        if self.bodies:
            self.body(fn)
        else:
            self.skip_body(fn)
        self.mod.functions[name] = fn

    def skip_body(self, fn: ir.Function) -> None:
        """Jump over the body that starts at the current `{`, recording its span; reading goes on after it."""
        t = self.peek()
        if t is None or t.text != "{":
            raise _err(self.line(), f"expected the body of {fn.name}, found {t.text if t else 'the end'!r}")
        end = body_end(self.src, t.pos, fn.name, t.line)
        self.spans[fn.name] = BodySpan(t.pos, end, t.line)
        del self.toks[self.i:]
        self.lexer = Lexer(self.src, end, line=t.line + self.src.count("\n", t.pos, end))

    # ---------------------------------------------------------------- function bodies
    def body(self, fn: ir.Function) -> None:
        self.expect("{")
        # Scope stack: each scope maps declared names to their (possibly renamed) names.
        scopes: list[dict[str, str]] = [{}]
        for p in fn.params + fn.returns:
            scopes[0][p.name] = p.name
        depth = 1

        def lookup(name: str) -> str | None:
            for s in reversed(scopes):
                if name in s:
                    return s[name]
            return None

        while True:
            t = self.peek()
            if t is None:
                raise _err(self.line(), f"unterminated body of {fn.name}")
            x = t.text
            if x == "{":
                self.next()
                scopes.append({})
                depth += 1
                self.scope_counter += 1
                continue
            if x == "}":
                self.next()
                scopes.pop()
                depth -= 1
                if depth == 0:
                    return
                continue
            if x == ".reg":
                self.reg_decl(fn, scopes, depth)
                continue
            if x in (".local", ".shared", ".param", ".const", ".global"):
                fn.locals.append(self.scoped_var(t, scopes, depth))
                self._bound(len(fn.locals), self.limits.max_declarations, f"declarations in {fn.name}", t.line)
                continue
            if x in _SKIP_LINE:
                self.skip_line(t.line)
                continue
            if x == ".pragma":
                self.next()
                self.next()
                self.expect(";")
                continue
            if t.kind == "id" and self.peek(1) is not None and self.peek(1).text == ":" and not x.startswith("."):
                self.next()
                self.next()
                if self.peek() is not None and self.peek().text in _CALL_DIRECTIVES:
                    self.call_directive(fn, x)
                else:
                    fn.body.append(x)
                continue
            if x == ";":
                self.next()
                continue
            fn.body.append(self.instruction(lookup))
            if len(fn.body) > self.limits.max_instructions:
                self._bound(len(fn.body), self.limits.max_instructions, f"instructions in {fn.name}", t.line)

    def scoped_var(self, t: Token, scopes: list[dict[str, str]], depth: int) -> ir.VarDecl:
        """A variable declared inside a function body; in a nested scope its name gets the scope's suffix."""
        sid = self.scope_counter

        def rename(n: str) -> str:
            new = n if depth == 1 else f"{n}${'{'}{sid}"
            scopes[-1][n] = new
            return new
        v = self.var_decl(False, rename)
        if v.space in ("global", "const"):
            raise _err(t.line, f"function-scope .{v.space} variable {v.name!r} is not supported")
        return v

    def reg_decl(self, fn: ir.Function, scopes, depth: int) -> None:
        kw = self.next()
        typ = None
        vec = 1
        while self.peek().text.startswith(".") and self.peek().kind == "id":
            d = self.next().text
            if d in (".v2", ".v4"):
                vec = int(d[2:])
            elif d[1:] in BYTES:
                typ = d[1:]
            else:
                raise _err(kw.line, f"unsupported register attribute {d!r}")
        if typ is None:
            raise _err(kw.line, ".reg without a type")
        if vec != 1:
            raise _err(kw.line, "vector registers (.reg .v2/.v4) are not supported")
        while True:
            nt = self.next()
            if nt.kind != "id":
                raise _err(nt.line, f"expected a register name, found {nt.text!r}")
            name = nt.text
            count = None
            if self.accept("<"):
                count = self.int_value()
                self.expect(">")
                if count < 0:
                    raise _err(nt.line, f"negative register count {name}<{count}>")
            self.fn_regs += 1 if count is None else count
            self._bound(self.fn_regs, self.limits.max_registers, f"registers declared in {fn.name}", nt.line)
            new = name if depth == 1 else f"{name}${{{self.scope_counter}"
            if scopes is not None:          # None: declarations read alone (ptx/index.py), no scope to resolve
                scopes[-1][name] = new
                if count is not None:
                    for k in range(count):
                        scopes[-1][f"{name}{k}"] = f"{new}{k}"
            fn.regs.append(ir.RegDecl(typ, new, count))
            if self.accept(";"):
                return
            self.expect(",")

    def instruction(self, lookup) -> ir.Instr:
        first = self.peek()
        line = first.line
        guard = None
        if self.accept("@"):
            neg = self.accept("!")
            g = self.next().text
            guard = (lookup(g) or g, neg)
        op_tok = self.next()
        if op_tok.kind != "id":
            raise _err(op_tok.line, f"expected an instruction, found {op_tok.text!r}")
        parts = op_tok.text.split(".")
        opcode, mods = parts[0], tuple(parts[1:])
        if opcode not in KNOWN_OPCODES:
            raise _err(line, f"unknown instruction {op_tok.text!r}")
        ops: list[list[ir.Operand]] = []
        if opcode == "call":
            return self.call(opcode, mods, guard, line, lookup)
        if opcode in VIDEO_OPCODES:
            return self.video(opcode, mods, guard, line, lookup, op_tok.text)
        if not self.accept(";"):
            while True:
                group = [self.operand(lookup)]
                while self.accept("|"):
                    group.append(self.operand(lookup))
                ops.append(group)
                if self.accept(";"):
                    break
                self.expect(",")
        text = f"{op_tok.text} ..."
        no_dst = opcode in _NO_DST or (opcode in ("bar", "barrier") and "red" not in mods)
        if opcode in ("bar", "barrier") and "warp" in mods or opcode == "wmma" and mods[:1] == ("store",):
            no_dst = True
        if opcode == "atom" or not no_dst and ops:
            dsts = ops[0]
            srcs = [o for g in ops[1:] for o in g]
        else:
            dsts = []
            srcs = [o for g in ops for o in g]
        if len(dsts) > 1 and opcode not in ("setp", "shfl", "set", "match", "elect"):
            raise _err(line, f"unexpected '|' in {op_tok.text}")
        return ir.Instr(opcode, mods, list(dsts), list(srcs), guard, line, op_tok.text)

    def video(self, opcode, mods, guard, line, lookup, text) -> ir.Instr:
        """A video instruction: `d{.dsel}, {-}a{.asel}, {-}b{.bsel}{, {-}c}` with each operand's selector (and
        negation) in Instr.sel."""
        ops: list[ir.Operand] = []
        sels: list[str] = []
        while True:
            t = self.peek()
            neg = t is not None and t.text == "-" and self.peek(1) is not None and self.peek(1).kind == "id"
            if neg:
                self.next()
                t = self.peek()
            base, _, sel = t.text.partition(".") if t is not None and t.kind == "id" else ("", "", "")
            if sel and lookup(t.text) is None and lookup(base) is not None:
                if not _VIDEO_SEL.fullmatch(sel):
                    raise _err(line, f"bad operand selector {t.text!r} of {text}")
                self.next()
                o: ir.Operand = ir.Reg(lookup(base))
            else:
                sel = ""
                o = self.operand(lookup)
            ops.append(o)
            sels.append(("-" if neg else "") + sel)
            if self.accept(";"):
                break
            self.expect(",")
        return ir.Instr(opcode, mods, ops[:1], ops[1:], guard, line, text, sel=tuple(sels))

    def call(self, opcode, mods, guard, line, lookup) -> ir.Instr:
        """`call (rets), f, (args);` directly, or `call (rets), %reg, (args), proto;` through a register, where
        proto names a .callprototype or .calltargets directive of the function."""
        rets: list[ir.Operand] = []
        if self.peek().text == "(":
            self.next()
            rets = self.operand_list(lookup)
            self.expect(",")
        fn_tok = self.next()
        target = self.name_operand(fn_tok.text, lookup)
        args: list[ir.Operand] = []
        proto = None
        if self.accept(","):
            if self.accept("("):
                args = self.operand_list(lookup)
                if self.accept(","):
                    proto = self.next().text
            else:
                proto = self.next().text
        self.expect(";")
        if isinstance(target, ir.Reg) and proto is None:
            raise _err(line, f"indirect call through {fn_tok.text} without a prototype")
        return ir.Instr("call", mods, rets, [target, *args], guard, line, f"call {fn_tok.text}", proto)

    def call_directive(self, fn: ir.Function, label: str) -> None:
        """`label: .callprototype (rets) _ (params);`, `label: .calltargets f, g;`, `label: .branchtargets L1, L2;`"""
        kw = self.next()
        if kw.text == ".callprototype":
            rets = self.param_list(kw.line) if self.peek().text == "(" else []
            self.expect("_")
            params = self.param_list(kw.line) if self.peek().text == "(" else []
            while self.peek().text in (".noreturn", ".abi_preserve", ".abi_preserve_control"):
                self.next()
                if self.peek().kind == "num":
                    self.next()
            fn.prototypes[label] = ir.Signature(tuple(rets), tuple(params))
        else:
            names = [self.next().text]
            while self.accept(","):
                names.append(self.next().text)
            (fn.call_targets if kw.text == ".calltargets" else fn.branch_targets)[label] = names
        self.expect(";")

    def operand_list(self, lookup) -> list[ir.Operand]:
        """`a, b, c)` after an opening parenthesis, up to and including the closing one."""
        out: list[ir.Operand] = []
        if not self.accept(")"):
            while True:
                out.append(self.operand(lookup))
                if self.accept(")"):
                    break
                self.expect(",")
        return out

    def operand(self, lookup) -> ir.Operand:
        t = self.peek()
        if t.text == "[":
            self.next()
            base = None
            off = 0
            nt = self.peek()
            if nt.kind == "id":
                self.next()
                base = self.name_operand(nt.text, lookup)
                while self.peek().text in ("+", "-"):
                    sign = -1 if self.next().text == "-" else 1
                    off += sign * self.int_value()
            else:
                off = self.int_value()
            coords = None
            if self.accept(","):                        # [texture, {coordinates}] of tex/tld4/suld/sust
                coords = self.operand(lookup)
                if not isinstance(coords, ir.Vec):
                    raise _err(t.line, "expected {coordinates} after the texture or surface operand")
            self.expect("]")
            return ir.Addr(base, off, coords)
        if t.text == "{":
            self.next()
            elems = []
            while True:
                elems.append(self.operand(lookup))
                if self.accept("}"):
                    break
                self.expect(",")
            return ir.Vec(tuple(elems))
        if t.text == "-":
            self.next()
            nt = self.next()
            if nt.kind != "num":
                raise _err(nt.line, f"unsupported negated operand -{nt.text}")
            v = parse_literal(nt.text, nt.line)
            if v.is_float_bits:
                width = 32 if len(nt.text) == 10 else 64
                return ir.Imm(v.value ^ (1 << (width - 1)), True, "-" + nt.text)
            return ir.Imm(-v.value, False, "-" + nt.text)
        if t.text == "!":
            self.next()
            nt = self.next()
            return ir.Reg("!" + (lookup(nt.text) or nt.text))
        self.next()
        if t.kind == "num":
            return parse_literal(t.text, t.line)
        if t.kind == "id":
            base = self.name_operand(t.text, t.line and lookup)
            if self.peek() is not None and self.peek().text == "+" and isinstance(base, ir.Sym):
                self.next()
                return ir.Addr(base, self.int_value())
            return base
        raise _err(t.line, f"unexpected token {t.text!r} in operand")

    @staticmethod
    def name_operand(name: str, lookup) -> ir.Operand:
        if name == "_":
            return ir.Reg("_")
        if name == "WARP_SZ":         # the predefined constant: an immediate wherever it appears
            return ir.Imm(WARP_SZ, False, name)
        r = lookup(name)
        if r is not None:
            return ir.Reg(r) if not _is_param_scoped(r) else ir.Sym(r)
        if name.startswith("%"):
            return ir.Reg(name)
        return ir.Sym(name)


def _is_param_scoped(name: str) -> bool:
    return False


def parse(src: str, limits: EmuLimits | None = None) -> ir.Module:
    """Parse PTX text; CudaError(cudaErrorInvalidPtx) naming the problem and its line."""
    limits = limits or EmuLimits()
    check_size(len(src), limits)
    p = _Parser(src, limits, tokenize(src))
    mod = p.parse()
    mod.externs -= set(mod.functions)
    for fn in mod.functions.values():
        _fix_operands(fn)
    return mod


def parse_headers(src: str, limits: EmuLimits) -> tuple[ir.Module, dict[str, BodySpan]]:
    """The module without its function bodies: every function of the result has an empty body, whose place in the
    text is its BodySpan (parse_body reads it)."""
    check_size(len(src), limits)
    p = _Parser(src, limits)
    p.bodies = False
    mod = p.parse()
    mod.externs -= set(mod.functions)
    return mod, p.spans


def parse_body(src: str, span: BodySpan, header: ir.Function, limits: EmuLimits) -> ir.Function:
    """One function in full: its header (from parse_headers) and the body at `span`."""
    fn = replace(header, regs=[], locals=[], body=[], prototypes={}, call_targets={}, branch_targets={})
    p = _Parser(src, limits, tokenize(src, span.start, span.end, span.line))
    p.body(fn)
    _fix_operands(fn)
    return fn


def parse_declarations(toks: list[Token], name: str, limits: EmuLimits) -> tuple[list, list]:
    """(registers, variables) declared by a run of declaration statements of function `name` read alone (no
    scopes: names are as written), bounded as in a full parse."""
    fn = ir.Function(name, False, [], [])
    p = _Parser("", limits, toks)
    scopes: list[dict[str, str]] = [{}]
    while p.peek() is not None:
        t = p.peek()
        if t.text == ".reg":
            p.reg_decl(fn, None, 1)
        elif t.text == ";":
            p.next()
        else:
            fn.locals.append(p.scoped_var(t, scopes, 1))
            p._bound(len(fn.locals), limits.max_declarations, f"declarations in {name}", t.line)
    return fn.regs, fn.locals


def parse_statement(toks: list[Token], limits: EmuLimits) -> ir.Instr:
    """One instruction read alone, from its opcode (names are not resolved: registers stay as written)."""
    return _Parser("", limits, toks).instruction(lambda name: None)


def _fix_operands(fn: ir.Function) -> None:
    """Scoped .param names are recorded as renamed; make operands referring to them Syms, registers Regs."""
    regnames = set()
    for r in fn.regs:
        if r.count is None:
            regnames.add(r.name)
        else:
            regnames.update(f"{r.name}{k}" for k in range(r.count))
    params = {p.name for p in fn.params + fn.returns} | {v.name for v in fn.locals}
    for ins in fn.body:
        if isinstance(ins, ir.Instr):
            ins.dsts = [_fix(o, regnames, params) for o in ins.dsts]
            ins.srcs = [_fix(o, regnames, params) for o in ins.srcs]


def _fix(o, regnames, params):
    if isinstance(o, ir.Reg) and o.name in params and o.name not in regnames:
        return ir.Sym(o.name)
    if isinstance(o, ir.Addr) and isinstance(o.base, ir.Reg) and o.base.name in params \
            and o.base.name not in regnames:
        return ir.Addr(ir.Sym(o.base.name), o.offset,
                       _fix(o.coords, regnames, params) if o.coords is not None else None)
    if isinstance(o, ir.Addr) and o.coords is not None:
        return ir.Addr(o.base, o.offset, _fix(o.coords, regnames, params))
    if isinstance(o, ir.Vec):
        return ir.Vec(tuple(_fix(e, regnames, params) for e in o.elems))
    return o


def float_bits_to_value(bits: int, width: int) -> float:
    if width == 32:
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    return struct.unpack("<d", struct.pack("<Q", bits & 0xFFFFFFFFFFFFFFFF))[0]
