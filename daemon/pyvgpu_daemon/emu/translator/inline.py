"""Inlining: an .entry and every .func it calls become one flat instruction list (FlatKernel).

Each call site gets its own copy of the callee, with registers, labels and local variables renamed under a
unique prefix (`callee@N:`); the callee's .param names are bound to the caller's argument and return variables,
`ret` becomes a branch to the copy's end label, and a guarded call branches around the copy. Function-scope
.shared variables exist once per function (`func::name`), as in CUDA. Recursion, call chains deeper than
EmuLimits.max_call_depth, and a flat kernel above EmuLimits.max_instructions / max_registers (copies multiply:
each call site inlines its callee again) are cudaErrorInvalidPtx; calls to functions without a body (vprintf,
__assertfail) stay `call` instructions for the code generator.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyvgpu_daemon.errors import CudaError

from ..limits import EmuLimits
from ..ptx import ir


@dataclass
class FlatKernel:
    name: str
    body: list                    # Instr | label
    regs: dict                    # name -> decl type
    locals: list                  # VarDecl (local, param, shared) with final names
    entry: ir.Function


def inline(mod: ir.Module, entry: ir.Function, limits: EmuLimits) -> FlatKernel:
    inl = _Inliner(mod, limits, entry.name)
    inl.expand(entry, "", {}, None, (entry.name,))
    return FlatKernel(entry.name, inl.body, inl.regs, inl.locals, entry)


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


class _Inliner:
    def __init__(self, mod: ir.Module, limits: EmuLimits, body_name: str) -> None:
        self.mod = mod
        self.limits = limits
        self.body_name = body_name
        self.body: list = []
        self.regs: dict[str, str] = {}
        self.locals: list[ir.VarDecl] = []
        self.sites = 0

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
            names[v.name] = nm
        return names

    def _instr(self, ins: ir.Instr, fn: ir.Function, scope: _Scope, end_label: str | None, stack: tuple) -> None:
        if len(self.body) > self.limits.max_instructions:
            raise CudaError("cudaErrorInvalidPtx", f"{self.body_name}: more than {self.limits.max_instructions} "
                                                   f"instructions once its calls are inlined")
        rn = scope.rename
        guard = scope.guard(ins.guard)
        if ins.opcode == "ret" and not fn.is_entry:
            self.body.append(ir.Instr("bra", ("uni",) if guard is None else (), [], [ir.Sym(end_label)], guard,
                                      ins.line, "ret"))
            return
        if ins.opcode == "call":
            callee = self.mod.functions.get(ins.srcs[0].name)
            if callee is not None and not callee.is_entry:
                self._inline_call(ins, callee, guard, scope, stack)
                return
            self.body.append(ir.Instr("call", ins.mods, [rn(d) for d in ins.dsts],
                                      [ins.srcs[0]] + [rn(s) for s in ins.srcs[1:]], guard, ins.line, ins.text))
            return
        self.body.append(ir.Instr(ins.opcode, ins.mods, [rn(d) for d in ins.dsts], [rn(s) for s in ins.srcs],
                                  guard, ins.line, ins.text))

    def _inline_call(self, ins: ir.Instr, callee: ir.Function, guard, scope: _Scope, stack: tuple) -> None:
        target = ins.srcs[0].name
        if target in stack:
            raise CudaError("cudaErrorInvalidPtx", f"recursive call to {target} at line {ins.line} is not supported")
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
