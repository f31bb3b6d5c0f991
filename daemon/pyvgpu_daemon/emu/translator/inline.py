"""Inlining: an .entry and every .func it calls become one flat instruction list (FlatKernel).

Each call site of an ordinary function gets its own copy of the callee, with registers, labels and local variables
renamed under a unique prefix (`callee@N:`); the callee's .param names are bound to the caller's argument and
return variables, `ret` becomes a branch to the copy's end label, and a guarded call branches around the copy.
Function-scope .shared variables exist once per function (`func::name`), as in CUDA. Call chains deeper than
EmuLimits.max_call_depth, and a flat kernel above EmuLimits.max_instructions / max_registers (copies multiply:
each call site inlines its callee again) are cudaErrorInvalidPtx; calls to functions without a body (vprintf,
__assertfail) stay `call` instructions for the code generator.

Functions that cannot be inlined are compiled once, out of line (`out_of_line`): those on a cycle of direct calls
(recursion) and those whose address is taken (calls through a register may reach them). Their bodies follow the
kernel's own body (after an `exit`), each starting at the label `F@ool:$ENTRY`, registers and labels prefixed
`F@ool:`. Their .local variables and .param variables (formal parameters, call sequences) live in a frame per
activation on the thread's call stack (layout.py); every name declared while expanding a function records that
context in `local_ctx` (None: the kernel's own, static local memory). A call to them becomes three
pseudo-instructions the code generator knows:

    ocall     (terminates its block) push a frame, copy the arguments, save the caller's live registers, jump
    oreturn   (first instruction of the next block) restore the registers, copy the return values back
    oret      (a `ret` in an out-of-line function) pop the frame and jump back

Each carries a CallSite in `Instr.meta`. The call stack is bounded by EmuLimits (cudaErrorHardwareStackError).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pyvgpu_daemon.errors import CudaError

from ..limits import EmuLimits
from ..ptx import ir
from ..ptx.types import BYTES

FP = "%__fp"                     # hidden register: the frame base (local offset) of the running activation


@dataclass
class CallSite:
    """One call of an out-of-line function (annotation of its ocall / oreturn pseudo-instructions)."""
    ctx: str | None               # the calling context: an out-of-line function, or None for the kernel body
    target: object                # ir.Sym (direct call of an out-of-line function) or ir.Reg (function address)
    sig: ir.Signature             # the callee's parameter lists (the prototype's for calls through a register)
    args: list[str]               # the caller's .param variables holding the arguments
    rets: list[str]               # the caller's .param variables receiving the return values
    index: int = 0                # the call site's number in the kernel


@dataclass
class FlatKernel:
    name: str
    body: list                    # Instr | label
    regs: dict                    # name -> decl type
    locals: list                  # VarDecl (local, param, shared) with final names
    entry: ir.Function | None     # the .entry (dropped by the Kernel once laid out)
    local_ctx: dict[str, str | None] = field(default_factory=dict)   # local/param variable -> its context
    formals: dict[str, list[str]] = field(default_factory=dict)      # out-of-line function -> formal .params
    out_of_line: list[str] = field(default_factory=list)             # out-of-line functions compiled here
    calls: list[CallSite] = field(default_factory=list)


def inline(mod: ir.Module, entry: ir.Function, limits: EmuLimits) -> FlatKernel:
    inl = _Inliner(mod, limits, entry.name)
    inl.expand(entry, "", {}, None, (entry.name,))
    inl.expand_out_of_line()
    return FlatKernel(entry.name, inl.body, inl.regs, inl.locals, entry, inl.local_ctx, inl.formals, inl.done,
                      inl.calls)


def out_of_line(mod: ir.Module) -> tuple[set[str], set[str]]:
    """(functions on a cycle of direct calls, functions whose address is taken) of a module (computed once)."""
    if "out_of_line" not in mod.facts:
        mod.facts["out_of_line"] = _out_of_line(mod)
    return mod.facts["out_of_line"]


def _out_of_line(mod: ir.Module) -> tuple[set[str], set[str]]:
    funcs = {n for n, f in mod.functions.items() if not f.is_entry}
    callees: dict[str, set[str]] = {n: set() for n in mod.functions}
    taken: set[str] = set()

    def refs(o):
        if isinstance(o, ir.Sym) and o.name in funcs:
            taken.add(o.name)
        elif isinstance(o, ir.Addr) and o.base is not None:
            refs(o.base)
        elif isinstance(o, ir.Vec):
            for e in o.elems:
                refs(e)

    for name, fn in mod.functions.items():
        for ins in fn.body:
            if isinstance(ins, str):
                continue
            ops = ins.srcs
            if ins.opcode == "call":
                if isinstance(ins.srcs[0], ir.Sym) and ins.srcs[0].name in funcs:
                    callees[name].add(ins.srcs[0].name)
                ops = ins.srcs[1:]
            for o in list(ops) + list(ins.dsts):
                refs(o)
    for v in mod.variables:
        for e in v.init or ():
            if isinstance(e, str) and e.partition("+")[0] in funcs:
                taken.add(e.partition("+")[0])
    recursive = {f for f in funcs if _reaches(callees, f, f)}
    return recursive, taken


def _reaches(callees: dict[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = list(callees.get(start, ()))
    while todo:
        f = todo.pop()
        if f == goal:
            return True
        if f not in seen:
            seen.add(f)
            todo.extend(callees.get(f, ()))
    return False


@dataclass
class _Scope:
    """The names of one inlined copy of a function."""
    prefix: str
    regs: dict[str, str]          # the function's own registers (unprefixed) -> type
    params: dict[str, str]        # .param name -> the caller's argument/return variable
    labels: set[str]
    locals: dict[str, str]        # local/shared variable -> its final name

    def rename(self, o):
        if isinstance(o, ir.Reg):
            neg = o.name.startswith("!")
            n = o.name[1:] if neg else o.name
            if n in self.regs:
                n = self.prefix + n
            return ir.Reg(("!" if neg else "") + n)
        if isinstance(o, ir.Sym):
            n = o.name
            if n in self.params:
                return ir.Sym(self.params[n])
            if n in self.locals:
                return ir.Sym(self.locals[n])
            if n in self.labels:
                return ir.Sym(self.prefix + n)
            return o
        if isinstance(o, ir.Addr):
            return ir.Addr(self.rename(o.base) if o.base is not None else None, o.offset,
                           self.rename(o.coords) if o.coords is not None else None)
        if isinstance(o, ir.Vec):
            return ir.Vec(tuple(self.rename(e) for e in o.elems))
        return o

    def guard(self, guard: tuple[str, bool] | None) -> tuple[str, bool] | None:
        if guard is None:
            return None
        g, neg = guard
        return (self.prefix + g if g in self.regs else g, neg)


def _regset(fn: ir.Function) -> dict[str, str]:
    out = {}
    for r in fn.regs:
        if r.count is None:
            out[r.name] = r.type
        else:
            for k in range(r.count):
                out[f"{r.name}{k}"] = r.type
    return out


def entry_label(fname: str) -> str:
    return f"{fname}@ool:$ENTRY"


class _Inliner:
    def __init__(self, mod: ir.Module, limits: EmuLimits, body_name: str) -> None:
        self.mod = mod
        self.limits = limits
        self.body_name = body_name
        self.body: list = []
        self.regs: dict[str, str] = {}
        self.locals: list[ir.VarDecl] = []
        self.local_ctx: dict[str, str | None] = {}
        self.formals: dict[str, list[str]] = {}
        self.sites = 0
        self.recursive, self.taken = out_of_line(mod)
        self.ool = self.recursive | self.taken
        self.ctx: str | None = None            # the context being expanded (None: the kernel body)
        self.queue: deque[str] = deque()
        self.done: list[str] = []
        self.calls: list[CallSite] = []

    def expand(self, fn: ir.Function, prefix: str, pmap: dict, end_label: str | None, stack: tuple) -> None:
        rs = _regset(fn)
        for n, t in rs.items():
            self.regs[prefix + n] = t
        if len(self.regs) > self.limits.max_registers:
            raise CudaError("cudaErrorInvalidPtx", f"{self.body_name}: more than {self.limits.max_registers} "
                                                   f"registers once its calls are inlined")
        labels = {x for x in fn.body if isinstance(x, str)}
        scope = _Scope(prefix, rs, pmap, labels, self._declare_locals(fn, prefix))
        for item in fn.body:
            if isinstance(item, str):
                self.body.append(prefix + item)
            else:
                self._instr(item, fn, scope, end_label, stack)

    # ---------------------------------------------------------------- out-of-line functions
    def _want(self, fname: str) -> None:
        if fname not in self.done and fname not in self.queue:
            self.queue.append(fname)

    def expand_out_of_line(self) -> None:
        """Append the body of every out-of-line function the kernel may call (transitively)."""
        if not self.calls:
            return
        self.body.append(ir.Instr("exit", (), [], [], None, 0, "end of the kernel body"))
        self.regs[FP] = "b64"
        while self.queue:
            fname = self.queue.popleft()
            self.done.append(fname)
            fn = self.mod.functions[fname]
            prefix = f"{fname}@ool:"
            self.ctx = fname
            pmap = {}
            for p in fn.params + fn.returns:
                nm = prefix + p.name
                self.locals.append(ir.VarDecl("param", nm, p.type, p.align or BYTES[p.type], p.count))
                self.local_ctx[nm] = fname
                pmap[p.name] = nm
            self.formals[fname] = [pmap[p.name] for p in fn.params + fn.returns]
            self.body.append(entry_label(fname))
            self.expand(fn, prefix, pmap, None, (fname,))
            # falling off the end of a function returns
            self.body.append(ir.Instr("oret", (), [], [], None, 0, f"end of {fname}", meta=fname))
        self.ctx = None

    # ---------------------------------------------------------------- one function's body
    def _declare_locals(self, fn: ir.Function, prefix: str) -> dict[str, str]:
        names = {}
        for v in fn.locals:
            if v.space == "shared":
                nm = v.name if fn.is_entry else f"{fn.name}::{v.name}"
                if not any(lv.name == nm for lv in self.locals):
                    self.locals.append(ir.VarDecl(v.space, nm, v.type, v.align, v.count, v.init, v.extern))
            else:
                nm = prefix + v.name
                self.locals.append(ir.VarDecl(v.space, nm, v.type, v.align, v.count, v.init, v.extern))
                self.local_ctx[nm] = self.ctx
            names[v.name] = nm
        return names

    def _instr(self, ins: ir.Instr, fn: ir.Function, scope: _Scope, end_label: str | None, stack: tuple) -> None:
        if len(self.body) > self.limits.max_instructions:
            raise CudaError("cudaErrorInvalidPtx", f"{self.body_name}: more than {self.limits.max_instructions} "
                                                   f"instructions once its calls are inlined")
        rn = scope.rename
        guard = scope.guard(ins.guard)
        if ins.opcode == "ret" and not fn.is_entry:
            if end_label is None:        # the out-of-line function's own ret
                self.body.append(ir.Instr("oret", (), [], [], guard, ins.line, "ret", meta=self.ctx))
            else:
                self.body.append(ir.Instr("bra", ("uni",) if guard is None else (), [], [ir.Sym(end_label)],
                                          guard, ins.line, "ret"))
            return
        if ins.opcode == "call":
            tgt = ins.srcs[0]
            callee = self.mod.functions.get(tgt.name) if isinstance(tgt, ir.Sym) else None
            if isinstance(tgt, ir.Reg) or (callee is not None and callee.name in self.ool):
                self._call_out_of_line(ins, fn, callee, guard, scope)
                return
            if callee is not None and not callee.is_entry:
                self._inline_call(ins, callee, guard, scope, stack)
                return
            self.body.append(ir.Instr("call", ins.mods, [rn(d) for d in ins.dsts],
                                      [ins.srcs[0]] + [rn(s) for s in ins.srcs[1:]], guard, ins.line, ins.text))
            return
        if ins.opcode == "brx":
            self.body.append(self._brx(ins, fn, scope, guard))
            return
        self.body.append(ir.Instr(ins.opcode, ins.mods, [rn(d) for d in ins.dsts], [rn(s) for s in ins.srcs],
                                  guard, ins.line, ins.text, sel=ins.sel))

    @staticmethod
    def _brx(ins: ir.Instr, fn: ir.Function, scope: _Scope, guard) -> ir.Instr:
        """brx.idx index, tlist: the target list (a .branchtargets label) becomes a vector of renamed labels."""
        if len(ins.srcs) != 2 or not isinstance(ins.srcs[1], ir.Sym) or \
                ins.srcs[1].name not in fn.branch_targets:
            raise CudaError("cudaErrorInvalidPtx", f"brx at line {ins.line}: the target list must name a "
                                                   f".branchtargets directive of {fn.name}")
        targets = ir.Vec(tuple(scope.rename(ir.Sym(lb)) for lb in fn.branch_targets[ins.srcs[1].name]))
        return ir.Instr("brx", ins.mods, [], [scope.rename(ins.srcs[0]), targets], guard, ins.line, ins.text)

    def _call_out_of_line(self, ins: ir.Instr, fn: ir.Function, callee: ir.Function | None, guard,
                          scope: _Scope) -> None:
        tgt = scope.rename(ins.srcs[0])
        if callee is not None:
            sig = callee.signature
            self._want(callee.name)
        else:
            sig, targets = self._prototype(ins, fn)
            for f in targets:
                self._want(f)
        args = [scope.rename(a) for a in ins.srcs[1:]]
        rets = [scope.rename(a) for a in ins.dsts]
        if len(args) != len(sig.params) or len(rets) != len(sig.returns):
            raise CudaError("cudaErrorInvalidPtx", f"call at line {ins.line}: argument count does not match "
                                                   f"the callee's declaration")
        if not all(isinstance(a, ir.Sym) for a in args + rets):
            raise CudaError("cudaErrorInvalidPtx",
                            f"call at line {ins.line}: arguments must be .param variables")
        self.sites += 1
        site = CallSite(self.ctx, tgt, sig, [a.name for a in args], [r.name for r in rets], len(self.calls))
        self.calls.append(site)
        skip = f"$ocall{self.sites}$SKIP"
        if guard is not None:
            self.body.append(ir.Instr("bra", (), [], [ir.Sym(skip)], (guard[0], not guard[1]), ins.line,
                                      "call guard"))
        self.body.append(ir.Instr("ocall", (), [], [tgt] if isinstance(tgt, ir.Reg) else [], None, ins.line,
                                  ins.text, meta=site))
        self.body.append(ir.Instr("oreturn", (), [], [], None, ins.line, ins.text, meta=site))
        if guard is not None:
            self.body.append(skip)

    def _prototype(self, ins: ir.Instr, fn: ir.Function) -> tuple[ir.Signature, list[str]]:
        """(signature, possible targets) of a call through a register: a .callprototype (any function whose
        address was taken may be called), or a .calltargets list (those functions; the first one's signature)."""
        if ins.proto in fn.prototypes:
            return fn.prototypes[ins.proto], sorted(self.taken)
        names = fn.call_targets.get(ins.proto)
        if names and all(n in self.mod.functions for n in names):
            return self.mod.functions[names[0]].signature, names
        raise CudaError("cudaErrorInvalidPtx", f"call at line {ins.line}: {ins.proto} names no .callprototype "
                                               f"or .calltargets of defined functions")

    def _inline_call(self, ins: ir.Instr, callee: ir.Function, guard, scope: _Scope, stack: tuple) -> None:
        target = ins.srcs[0].name
        if len(stack) > self.limits.max_call_depth:
            raise CudaError("cudaErrorInvalidPtx", f"call depth above {self.limits.max_call_depth}")
        self.sites += 1
        cprefix = f"{target}@{self.sites}:"
        cmap = self._bind_params(ins, callee, [scope.rename(a) for a in ins.srcs[1:]],
                                 [scope.rename(a) for a in ins.dsts])
        end = f"{cprefix}$END"
        skip = None
        if guard is not None:
            skip = f"{cprefix}$SKIP"
            self.body.append(ir.Instr("bra", (), [], [ir.Sym(skip)], (guard[0], not guard[1]), ins.line,
                                      "call guard"))
        self.expand(callee, cprefix, cmap, end, stack + (target,))
        self.body.append(end)
        if skip:
            self.body.append(skip)

    @staticmethod
    def _bind_params(ins: ir.Instr, callee: ir.Function, args: list, rets: list) -> dict[str, str]:
        target = ins.srcs[0].name
        if len(args) != len(callee.params) or len(rets) != len(callee.returns):
            raise CudaError("cudaErrorInvalidPtx", f"call to {target} at line {ins.line}: "
                                                   f"argument count does not match its declaration")
        cmap = {}
        for p, a in zip(callee.params + callee.returns, args + rets):
            if not isinstance(a, ir.Sym):
                raise CudaError("cudaErrorInvalidPtx",
                                f"call to {target} at line {ins.line}: register arguments unsupported")
            cmap[p.name] = a.name
        return cmap

