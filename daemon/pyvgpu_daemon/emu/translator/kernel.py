"""Kernel: one .entry translated, once, at its first launch (emu/module.py). The translator's pipeline in order:

    inline.py   .entry + the .funcs it calls -> one flat body (out-of-line functions after it)
    layout.py   parameter offsets, shared and local memory layout, call frames (emu/layout.py)
    cfg.py      flat body -> basic blocks
    liveness.py registers live across out-of-line calls (saved in the caller's frame)
    codegen.py  + instrs.py + control.py: each block -> a converged and a masked Python function, and where the
                block needs nothing but its own lanes' memory, a sparse one (`_sparse_source`)
    (here)      the block functions assembled into `make(S)`, compiled and exec'd once

The runtime then calls `kernel.make(chunk)` once per chunk (see codegen.py for the generated code's shape).
"""
from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections import OrderedDict
from typing import Callable

from pyvgpu_daemon.errors import CudaError

from .. import native
from ..layout import PAR_WIN, kernel_layout
from ..limits import EmuLimits
from ..ptx import ir
from . import bytecode_cache, control, ctaatomic, ctagen, ctasplit, instrs, pycompile, threadgen
from .cfg import BRANCHES, Block, is_bar, is_warp, shares_across_ctas, split_blocks
from .cgen import PRELUDE, PURE_OPCODES, NativeRun, NoC, c_body, function_source, plan_runs
from .codegen import Codegen, err_ptx
from .inline import FP, entry_label, inline
from .liveness import AnyRegister, live_in, reads_writes


# A launch waiting for its kernel's build (native_make's patience) checks its cancellation and turn this often.
PATIENCE_SLICE_S = 0.05
# A quick tier's full build starts once what the quick tier's launches would have saved running it pays for it, as a
# JIT with a persistent cache would: its rent is its estimated compile time (ctagen.compile_seconds: the source's size
# x its level's OptLevel.s_per_mb) x FULL_RENT_FACTOR; each launch of the quick tier pays its own time (the daemon's
# CPU seconds while it ran, at most its wall time: runtime/launch.py) x (1 - FULL_LAUNCH_SHARE), what the full build
# would have saved of it; what was paid is kept across daemon runs beside the cache (native.rent_paid: keyed by the
# full library's key, written at most every RENT_SAVE_S and when paid), so a program that launches a kernel often
# builds it on the run where its launches paid for it, and a short one never. CUB's onesweep: 2.4 MB at -O1's 7 s/MB,
# 17 s; its -Og launches 0.092 s of CPU against -O1's 0.089-0.090 (bench/README.md, "fifteenth step: tier policy").
FULL_RENT_FACTOR = 1.0
FULL_LAUNCH_SHARE = 0.95        # the full build's launch time, a share of the quick tier's (ctagen.QUICK's level)
RENT_SAVE_S = 2.0


class Kernel:
    """One .entry compiled for the interpreter."""

    def __init__(self, mod: ir.Module, entry: ir.Function, symbols: dict[str, int], limits: EmuLimits,
                 ptx: str = ""):
        """`ptx`: an identity of the module's PTX text (ModuleIndex.digest), which with the kernel's name, symbols
        and limits determines its translation: its native code's record (native.record) is kept by it; "" (unknown):
        no record, the C is generated to find the library."""
        self.externs = mod.externs             # (the IR itself is not kept: `flat` holds what the kernel runs)
        self.limits = limits
        self.ptx = ptx
        self.symbols = symbols                 # module .global/.const variable -> device address
        self.flat = inline(mod, entry, limits)
        self.name = entry.name
        self.layout = kernel_layout(mod, self.flat, limits)
        self.flat.entry = None                 # its parsed body: flat.body holds the kernel
        self.maxntid = entry.maxntid
        self.read_regs = _read_registers(self.flat.body)   # atom results nobody reads take the fast path
        self.independent_ctas = _independent_ctas(self.flat.body)
        self.writes_local = _writes_local(self.flat.body)  # else a chunk's local memory stays zero (Chunk.reuse)
        self.calls_heap = _calls_heap(self.flat.body)     # the launch needs the device heap (emu/device_heap.py)
        self.blocks, self.labels = split_blocks(self.flat.body)
        self.live = live_in(self.blocks, self.labels, self.flat.regs)
        self.straight = _straight(self.blocks, self.labels)
        # registers live across blocks (variables of `make`); the rest are local to one block function
        self.global_regs: set[str] = set().union(*self.live) | {FP} | {
            b.term.dsts[0].name for b in self.blocks
            if b.kind == "bar" and b.term.dsts and isinstance(b.term.dsts[0], ir.Reg)}   # bar.red results
        self.saved = self._saved_registers()   # CallSite.index -> registers saved around that call
        # function address -> entry block, for calls through a register
        self.fn_entry = {symbols[f]: self.labels[entry_label(f)] for f in self.flat.out_of_line}
        self.bar_kinds: list[str] = []         # reduction of each diverged bar.red site ('popc', 'and', 'or')
        # some barrier is not barrier 0 for all threads (ids, counts, bar.arrive, guards): runtime/barriers.py
        self.named_barriers = any(b.kind == "bar" and not control.plain_barrier(b.term) for b in self.blocks)
        self._compile()

    def _saved_registers(self) -> dict[int, list[str]]:
        """The registers live across each out-of-line call (restored by its oreturn), and the frames sized for
        them."""
        if not self.flat.calls:
            return {}
        live = self.live
        saved: dict[int, list[str]] = {}
        need: dict[str | None, int] = {}
        for b in self.blocks:
            if b.term is not None and b.term.opcode == "ocall":
                site = b.term.meta
                regs = sorted(live[b.index + 1] - {FP})
                saved[site.index] = regs
                need[site.ctx] = max(need.get(site.ctx, 0), 8 * len(regs))
        self.layout.finish_frames(need, self.limits, self.name)
        return saved

    def frame_of(self, name: str) -> str | None:
        """The out-of-line function whose frame holds local/.param variable `name` (None: static or not local)."""
        return self.layout.local_ctx.get(name) if name in self.layout.local else None

    def sym_address(self, name: str, ins: ir.Instr) -> int:
        """The address of a symbol operand: a module variable's device address, or the offset of a shared or
        local variable in its window."""
        if name in self.symbols:
            return self.symbols[name]
        if name in self.layout.shared:
            return self.layout.shared[name]
        if name in self.layout.local:
            if self.frame_of(name) is not None:
                raise err_ptx(ins, f"{name} lives in a call frame: its address is not a constant")
            return self.layout.local[name]
        if name in self.layout.kparams:
            return PAR_WIN + self.layout.kparams[name]
        if name in self.externs:
            raise err_ptx(ins, f"the address of external function {name} (there is no device linker)")
        raise err_ptx(ins, f"unknown symbol {name}")

    def _compile(self) -> None:
        """Generate the kernel's source now (unsupported PTX fails the module load, as a JIT would); compile it to
        Python bytecode at the first launch (`make`): a module often holds many kernels a program never runs."""
        g = Codegen(self)
        self.source = _make_source(g, self.blocks, *_block_funcs(g, self.blocks))
        self.namespace = g.ns
        self.specials = frozenset(g.specials_used)      # special registers make(S) reads once per chunk
        self._make = None
        self._native = None          # None: not tried yet; False: no native code; else its make(S)
        self._native_thread: threading.Thread | None = None
        self._native_lock = threading.Lock()
        self._native_key: str | None = None
        self._wanted: bool | None = None
        self._pending: _FullBuild | None = None  # the build after a quick tier's (_build_whole), until it is ready
        self._full: _FullBuild | None = None     # that build, waiting for the quick tier's launches (native_ran)
        self._full_rent = 0.0                    # seconds its launches must still save before it starts
        self._rent_saved = 0.0                   # (when the rent record was last written, time.monotonic())
        self._quick_lib = None                   # the quick tier's library, loaded while its code may run
        self._native_source: str | None = None   # the C of its native code (None: not generated)
        self._regenerate: Callable[[], str] | None = None   # (its C made again on demand: a build from a record)

    @property
    def instructions(self) -> int:
        """Its instructions and blocks (the vector instructions of one step over every block: LaunchPlan.sizes), what
        its C's compile time grows with."""
        return sum(len(b.instrs) + 1 for b in self.blocks)

    @property
    def make(self):
        """make(S): the block functions bound to a chunk (see codegen.py)."""
        if self._make is None:
            try:
                code = _bytecode(self.source, self.name)
            except SyntaxError as e:  # a bug in the generator, not in the user's PTX
                raise CudaError("cudaErrorInvalidPtx", f"{self.name}: internal code generation error: {e}") from e
            exec(code, self.namespace)
            self._make = self.namespace["make"]
        return self._make


    def native_make(self, wait: bool = True, patience: float = 0.0, check: Callable[[], None] | None = None):
        """The kernel's threadgen.ThreadCode where it can run a thread at a time (Kernel._build_thread_code), else
        make(S) with every run of ALU instructions in converged block code replaced by one call of compiled C
        (translator/cgen.py, emu/native.py); None when the kernel has no runs or no native code can be built
        (the NumPy make then serves, with the same results). wait=False starts the build on a background thread
        and answers None until it is done, so a launch never waits for the compiler; the call that starts it waits
        up to `patience` seconds for it (a kernel built here before: its library is cached, the build is only the
        source's generation, shorter than a launch of the kernel's NumPy code), calling `check()` every
        PATIENCE_SLICE_S meanwhile (the launch's check_time: its cancellation and the session's turn are served
        while it waits, as while it runs; check may raise). A background build of a large CTA-at-a-time kernel whose
        library is not cached answers a quick tier's code first (ctagen.quick_flags), then, from a later launch on,
        the code at its size's level (_build_full, started by native_ran once the quick tier's launches, in this
        daemon run and earlier ones, paid its rent: FULL_RENT_FACTOR): the same C, the same results."""
        started = False
        with self._native_lock:
            if self._native is None and self._native_thread is None:
                if wait:                # (the full build at once: no quick tier)
                    self._native = self._build_native_or_false()
                else:
                    self._native_thread = threading.Thread(target=self._background_build, daemon=True,
                                                           name=f"emu-native {self.name[:40]}")
                    self._native_thread.start()
                    started = True
            thread = self._native_thread
        if wait and thread is not None:
            thread.join()
        elif started and patience > 0:
            end = time.monotonic() + patience
            while True:
                thread.join(max(0.0, min(PATIENCE_SLICE_S, end - time.monotonic())))
                if not thread.is_alive() or self._native or time.monotonic() >= end:
                    break           # (a quick tier ready: its full build goes on in the background)
                if check is not None:
                    check()
        return self._native or None

    def _background_build(self) -> None:
        code = self._build_native_or_false(quick=True)
        with self._native_lock:
            self._native = code
            full, self._pending = self._pending, None
            if full is not None and code:   # a quick tier: its launches start the full build (native_ran)
                self._full_rent = full.rent - native.rent_paid(full.record)
                self._rent_saved = time.monotonic()
                self._full = full
        if code:                        # (only the launch policy builds in the background: it found it worth it)
            native.mark_wanted(self.native_key)

    @property
    def rent_due(self) -> bool:
        """Whether a quick tier's launches are paying its full build's rent (native_ran)."""
        return self._full is not None

    def native_ran(self, code, seconds: float) -> None:
        """A launch ran `code` (what native_make answered it) for `seconds`: a quick tier's launches start its full
        build in the background once what they would have saved running it paid its rent (FULL_RENT_FACTOR, kept
        across daemon runs: native.rent_paid); later launches take it when it is ready."""
        if self._full is None or code is not self._native:
            return
        with self._native_lock:
            full = self._full
            if full is None or code is not self._native:
                return
            self._full_rent -= seconds * (1.0 - FULL_LAUNCH_SHARE)
            now = time.monotonic()
            if self._full_rent > 0 and now - self._rent_saved < RENT_SAVE_S:
                return
            # (bounded: at most the rent, so that a record says "paid" and no more)
            native.save_rent(full.record, max(0.0, min(full.rent, full.rent - self._full_rent)))
            self._rent_saved = now
            if self._full_rent > 0:
                return
            self._full = None
            self._native_thread = threading.Thread(target=self._upgrade, args=(full, code), daemon=True,
                                                   name=f"emu-native {self.name[:40]}")
            self._native_thread.start()

    def _upgrade(self, full: _FullBuild, quick) -> None:
        self._native = self._build_full(full, quick)

    def _build_full(self, full: _FullBuild, quick):
        """The code of `full` (the build at its size's level after a quick tier's), or `quick` where it fails (the
        same C: the same results, slower); the quick tier's library leaves the cache once the full one is in it."""
        t0 = time.monotonic()
        lib = native.load(full.units, extra=full.flags, name=self.name, jobs=full.jobs)
        if lib is None:
            native.log.info("emulated GPU: kernel %s keeps its quick build (its full build failed)", self.name[:80])
            return quick
        try:
            code = full.code_class(lib.fn, self.name, full.state, full.extra)
        except Exception as e:  # noqa: BLE001 - (as _build_native_or_false: the quick tier serves)
            native.log.warning("emulated GPU: %s: full build unusable (%s: %s)", self.name, type(e).__name__, e)
            return quick
        code.unfit = quick.unfit        # (the kernel's memory, not its code, made it unfit)
        self._quick_lib, self._native_lib = self._native_lib, lib
        if full.kernel_record:
            _save_record(full.kernel_record, full.code_class, native.library_of(full.units, extra=full.flags),
                         full.state, full.extra)
        native.log.info("emulated GPU: kernel %s runs its full build from now on (%.1f s)", self.name[:80],
                        time.monotonic() - t0)
        native.discard(full.units, extra=full.quick)
        native.drop_rent(full.record)
        return code

    @property
    def native_source(self) -> str | None:
        """The source of its native code (None: none built): a library found by its record (native.record) was
        not generated in this process, and is generated again here when asked (tests read it)."""
        if self._native_source is None and self._regenerate is not None:
            self._native_source = self._regenerate()
        return self._native_source

    @native_source.setter
    def native_source(self, source: str) -> None:
        self._native_source = source

    @property
    def native_key(self) -> str:
        """The key of this kernel's record of native code wanted here (emu/native.py: `wanted`)."""
        if self._native_key is None:
            self._native_key = native.kernel_key(self.name, self.source,
                                                 f"threadgen={self.limits.threadgen} ctagen={self.limits.ctagen}")
        return self._native_key

    def native_wanted(self) -> bool:
        """Whether the launch policy built this kernel's native code on this machine before (the next daemon then
        builds it at the first launch, in the background)."""
        if self._wanted is None:
            self._wanted = native.compiler() is not None and native.wanted(self.native_key)
        return self._wanted

    def _build_native_or_false(self, quick: bool = False):
        t0 = time.monotonic()
        try:
            code = self._build_native(quick) or False
        except Exception as e:  # noqa: BLE001 - native code is an optimisation: a generator bug costs only speed
            native.log.warning("emulated GPU: no native code for %s (%s: %s); it runs as NumPy code", self.name,
                               type(e).__name__, e)
            return False
        # one line a build: which path the kernel's launches take from now on, and what getting there cost (a
        # large kernel's build takes minutes under load, its launches run as NumPy code meanwhile)
        kind = {ctagen.CtaCode: "a CTA at a time", threadgen.ThreadCode: "a thread at a time"}.get(
            type(code), "lockstep with native runs" if code else "NumPy code (no native code)")
        native.log.info("emulated GPU: kernel %s runs %s from now on (build %.1f s)", self.name[:80], kind,
                        time.monotonic() - t0)
        return code

    def tries_cta_code(self) -> bool:
        """Whether its native build tries a CTA at a time first (translator/ctagen.py)."""
        return self.limits.ctagen and ctagen.eligible_reason(self) is None and \
            ctagen.preferred_reason(self, self.limits.threadgen) is None

    def _build_native(self, quick: bool = False):
        if self.tries_cta_code():
            code = self._build_cta_code(quick)
            if code is not None:
                return code
        if self.limits.threadgen and threadgen.eligible_reason(self) is None and threadgen.slower_reason(self) is None:
            code = self._build_thread_code()
            if code is not None:
                return code
        g = Codegen(self)
        regs = g.reg_width
        addr = g.address
        plans = {b.index: plan_runs(b.instrs, b.term, regs, g.imm, self.global_regs, addr)
                 for b in self.blocks}
        if not any(plans.values()):
            return None
        c_funcs = []
        for bi, runs in plans.items():
            for start, end, run in runs:
                e = c_body(run.instrs, regs, g.imm, addr)
                run.choose_lanes(e)
                c_funcs.append(function_source(run, e, regs, f"nr{bi}_{run.index}"))
        lib = native.load(PRELUDE + "\n".join(c_funcs), name=self.name)
        if lib is None:
            return None
        self.native_runs: list[NativeRun] = []
        for bi, runs in plans.items():
            for start, end, run in runs:
                fn = getattr(lib, f"nr{bi}_{run.index}")
                nr = NativeRun(fn, [regs[r] for r in run.inputs], [regs[r] for r in run.outputs], run.mem,
                               run.scratch)
                self.native_runs.append(nr)
                run.source = g.const(nr, "nr")
        source = _make_source(g, self.blocks, *_block_funcs(g, self.blocks, plans))
        try:
            code = _bytecode(source, self.name)
        except SyntaxError as e:
            raise CudaError("cudaErrorInvalidPtx", f"{self.name}: internal code generation error: {e}") from e
        exec(code, g.ns)
        self._native_lib = lib              # keeps the library loaded as long as the kernel
        self.native_source = source
        return g.ns["make"]

    def _record_key(self, code_class: type) -> str | None:
        """The key of this kernel's record for code of `code_class` (native.record_key: from the PTX, not the C),
        None without the PTX's identity or a compiler."""
        if not self.ptx or native.compiler() is None:
            return None
        return native.record_key(code_class.__name__, self.name, self.ptx, repr(sorted(self.symbols.items())),
                                 repr(self.limits))

    def _from_record(self, key: str, code_class: type, kernel_source):
        """The code of the library this kernel's record names, when the record is of this version and key, its
        fields are well formed and the library is cached (no C generated); else None (a miss: the caller
        generates the C, finds or builds its library by the C's key, and writes the record again)."""
        rec = native.record(key)
        if rec is None or rec.get("class") != code_class.__name__:
            return None
        state, extra = rec.get("state"), _extra_from_json(rec.get("extra"))
        if type(state) is not int or not 0 < state < 1 << 20 or extra is None:
            return None
        lib = native.load_cached(rec["library"])
        if lib is None:
            return None
        try:
            code = code_class(lib.fn, self.name, state, extra)
        except Exception:  # noqa: BLE001 - (a library without its function: generate the C as without a record)
            return None
        self._native_lib = lib
        self._regenerate = lambda: _joined(kernel_source(self, Codegen(self), "fn")[0])
        return code

    def _build_cta_code(self, quick: bool = False):
        """The kernel as one CTA-at-a-time C function (translator/ctagen.py), or None when some instruction has no C
        form there (thread mode or the lockstep native runs then serve). quick: a large kernel whose library is not
        cached is built at a quick tier's level first (ctagen.quick_flags; its full build then in _pending)."""
        return self._build_whole(ctagen.kernel_source, ctagen.PRELUDE_C, ctagen.flags, ctagen.CtaCode,
                                 "CTA-at-a-time", "on the other paths",
                                 (lambda source: ctagen.quick_flags(self.instructions, source)) if quick else None)

    def _build_thread_code(self):
        """The kernel as one thread-at-a-time C function (translator/threadgen.py), or None when some instruction
        has no C form there (the lockstep native runs then serve)."""
        return self._build_whole(threadgen.kernel_source, threadgen.PRELUDE_T, threadgen.FLAGS,
                                 threadgen.ThreadCode, "thread-at-a-time", "in lockstep")

    def _build_whole(self, kernel_source, prelude: str, flags, code_class, what: str, instead: str,
                     quick: Callable[[object], tuple[str, ...] | None] | None = None):
        """The kernel as one C function `fn` of a whole-kernel generator (kernel_source(kernel, g, "fn") -> (source,
        state words, its extra array's size)), wrapped in code_class; None where it has no C form. flags: the
        compiler's extra flags, or a function of the source answering them (ctagen.flags: by its size). quick: a
        function of the source answering the flags of a quick tier or None (ctagen.quick_flags); a quick tier is
        built instead when the library of `flags` is not cached (the build at `flags` then left in self._pending:
        `_background_build` hands it to the quick tier's launches, native_ran)."""
        record = self._record_key(code_class)
        code = self._from_record(record, code_class, kernel_source) if record else None
        if code is not None:
            return code
        try:
            source, state, extra = kernel_source(self, Codegen(self), "fn")
        except NoC:
            return None
        except Exception as e:  # noqa: BLE001 - a generator bug costs this code only: the other paths serve
            native.log.warning("emulated GPU: no %s code for %s (%s: %s); it runs %s", what, self.name,
                               type(e).__name__, e, instead)
            return None
        # (several translation units: ctasplit.py's region functions, built ctasplit.JOBS at once)
        units = prelude + source if isinstance(source, str) else [prelude + s for s in source]
        full = flags if isinstance(flags, tuple) else flags(source)
        quick = quick(source) if quick is not None else None
        jobs = 1 if isinstance(source, str) else ctasplit.JOBS
        lib = None
        if quick is not None and quick != full and not native.cached(units, extra=full):
            lib = native.load(units, extra=quick, name=self.name, jobs=jobs)
            if lib is not None:
                self._pending = _FullBuild(units, full, quick, jobs, code_class, state, extra,
                                           FULL_RENT_FACTOR * ctagen.compile_seconds(units),
                                           native.rent_path(units, extra=full), record)
        if lib is None:
            lib = native.load(units, extra=full, name=self.name, jobs=jobs)
            if lib is not None and record:
                _save_record(record, code_class, native.library_of(units, extra=full), state, extra)
        if lib is None:
            return None
        self._native_lib = lib              # keeps the library loaded as long as the kernel
        self.native_source = _joined(source)
        return code_class(lib.fn, self.name, state, extra)


@dataclasses.dataclass(frozen=True)
class _FullBuild:
    """What a kernel's build at its full level needs after its quick tier's (Kernel._build_whole)."""
    units: str | list[str]
    flags: tuple[str, ...]
    quick: tuple[str, ...]          # (the quick tier's flags: its library leaves the cache after)
    jobs: int
    code_class: type
    state: int
    extra: object
    rent: float                     # seconds the quick tier's launches must save before it starts (its estimated cost)
    record: object                  # where what they saved is kept across daemon runs (native.rent_path; None: nowhere)
    kernel_record: str | None = None    # the key of the kernel's record, written once it is built (Kernel._record_key)


def _joined(source: str | list[str]) -> str:
    return source if isinstance(source, str) else "\n".join(source)


def _extra_to_json(extra) -> object:
    """A code class's extra argument as a record holds it (ThreadCode's barrier words, CtaCode's register layout),
    or None (not one a record can hold)."""
    if type(extra) is int:
        return {"int": extra}
    if isinstance(extra, ctaatomic.CtaRegisters):
        return {"cta": {"nbytes": extra.nbytes, "arrays": [list(a) for a in extra.arrays], "talking": extra.talking,
                        "instructions": extra.instructions, "once": [list(a) for a in extra.once]}}
    return None


def _extra_from_json(value) -> object:
    """_extra_to_json's inverse, or None where `value` is not well formed (a record that is not: a miss)."""
    def count(x) -> bool:
        return type(x) is int and 0 <= x < 1 << 40

    def pairs(x) -> bool:
        return isinstance(x, list) and all(isinstance(p, list) and len(p) == 2 and all(map(count, p)) for p in x)

    if not isinstance(value, dict) or len(value) != 1:
        return None
    if "int" in value:
        return value["int"] if count(value["int"]) else None
    c = value.get("cta")
    if not isinstance(c, dict) or set(c) != {"nbytes", "arrays", "talking", "instructions", "once"} or \
            not (count(c["nbytes"]) and pairs(c["arrays"]) and type(c["talking"]) is bool and
                 count(c["instructions"]) and pairs(c["once"])):
        return None
    return ctaatomic.CtaRegisters(c["nbytes"], [tuple(p) for p in c["arrays"]], c["talking"], c["instructions"],
                                  [tuple(p) for p in c["once"]])


def _save_record(key: str, code_class: type, library: str | None, state: int, extra) -> None:
    """Keep what `code_class(lib.fn, name, state, extra)` needs beside the library of key `library` (native.record)."""
    value = _extra_to_json(extra)
    if library is not None and value is not None and type(state) is int:
        native.save_record(key, {"class": code_class.__name__, "library": library, "state": state, "extra": value})


_BYTECODE: OrderedDict[tuple[str, str], object] = OrderedDict()
_BYTECODE_SOURCE_BYTES = 8 << 20      # daemon-wide: the code of the most recently compiled kernels, by source size
_bytecode_held = 0
_bytecode_lock = threading.Lock()


def _bytecode(source: str, name: str):
    """Compiled block code, shared by every load of the same kernel (the source names its constants, whose
    values, e.g. variable addresses, live in each load's own namespace). The cache is shared by all sessions, so it
    is bounded by bytes (a code object is about 6 times its source), not by a count of kernels of any size. A large
    source's code also comes from, and goes to, the disk cache of bytecode_cache.py (across daemon runs)."""
    global _bytecode_held
    key = (source, name)
    with _bytecode_lock:
        code = _BYTECODE.get(key)
        if code is not None:
            _BYTECODE.move_to_end(key)
            return code
    filename = f"<ptx {name}>"
    disk = bytecode_cache.shared() if len(source) >= bytecode_cache.MIN_SOURCE else None
    code = disk.get(source, filename) if disk is not None else None
    if code is None:
        code = pycompile.compile_source(source, filename)      # (a large one off the GIL)
        if disk is not None:
            disk.put(source, filename, code)
    with _bytecode_lock:
        if key not in _BYTECODE and len(source) <= _BYTECODE_SOURCE_BYTES:
            _BYTECODE[key] = code
            _bytecode_held += len(source)
            while _bytecode_held > _BYTECODE_SOURCE_BYTES:
                (old, _), _ = _BYTECODE.popitem(last=False)
                _bytecode_held -= len(old)
    return code


def _independent_ctas(body: list) -> bool:
    """Whether no CTA of a launch can see what another does (CUDA gives unsynchronised data races no meaning):
    no atomics or fences, no volatile (but of the CTA's shared memory) or memory-model-scoped accesses, no
    device-side calls (printf output and assert order follow the threads)."""
    return not any(isinstance(ins, ir.Instr) and shares_across_ctas(ins) for ins in body)


# Spaces a store or atomic may name and still not reach a thread's local memory (the .param space does: the
# parameters of call sequences live in the local frame, emu/layout.py; no space is generic: any window).
_NOT_LOCAL_SPACES = frozenset({"global", "shared", "shared::cta", "shared::cluster"})


def _writes_local(body: list) -> bool:
    """Whether some thread may write its local memory, conservatively: every instruction does but pure arithmetic
    (cgen.PURE_OPCODES), loads, branches, barriers, warp operations, and stores and atomics that name the global or
    shared space (not local, param or none)."""
    for ins in body:
        if not isinstance(ins, ir.Instr):
            continue
        op = ins.opcode
        if op in PURE_OPCODES or op in ("ld", "ldu") or op in BRANCHES or is_bar(ins) or is_warp(ins):
            continue
        if op in ("st", "atom", "red") and any(m in _NOT_LOCAL_SPACES for m in ins.mods) and \
                not any(m in ("local", "param") for m in ins.mods):
            continue
        return True
    return False


def _calls_heap(body: list) -> bool:
    """Whether some call goes to device malloc or free."""
    return any(isinstance(ins, ir.Instr) and ins.opcode == "call" and ins.srcs and isinstance(ins.srcs[0], ir.Sym)
               and (ins.srcs[0].name in instrs.MALLOCS or ins.srcs[0].name == "free") for ins in body)


def _straight(blocks: list, labels: dict[str, int]) -> bool:
    """Whether every thread runs each block at most once: branches only forward, no indirect branch, no call out
    of line or into the runtime (printf, malloc, ...), no trap, no (bulk) cp. Such a kernel's cost is bounded by its size times
    its threads, whatever its arguments (LaunchPlan.tiny)."""
    for b in blocks:
        if any(ins.opcode in ("call", "trap", "brkpt", "cp") for ins in b.instrs):      # cp: bulk copies
            return False
        t = b.term
        if t is None or t.opcode in ("ret", "exit") or b.kind != "plain":
            continue
        if t.opcode != "bra" or not t.srcs or not isinstance(t.srcs[0], ir.Sym) or \
                labels.get(t.srcs[0].name, -1) <= b.index:
            return False
    return True


def _read_registers(body: list) -> set[str]:
    """Every register some instruction reads (sources, address bases, guards)."""
    regs: set[str] = set()
    everything = AnyRegister()
    for ins in body:
        if isinstance(ins, ir.Instr):
            regs.update(reads_writes(ins, everything, False)[0])
    return regs


def _block_lines(g: Codegen, b: Block, masked: bool, runs=None) -> list[str]:
    """The body of block function c<index>() (converged) or m<index>(m) (masked); `runs`: (start, end, Run) of the
    instructions that become native calls (cgen.plan_runs). Leaves in g what the body writes and reads."""
    g.written = set()
    g.local_defined = set()
    g.touched = set()
    lines: list[str] = []
    at = {start: (end, run) for start, end, run in runs or ()}
    i = 0
    while i < len(b.instrs):
        if i in at:
            end, run = at[i]
            _emit_run(g, run, lines, masked)
            i = end
            continue
        instrs.emit(g, b.instrs[i], lines, masked)
        i += 1
    control.emit_terminator(g, b, lines, masked)
    return lines


def _block_source(g: Codegen, b: Block, masked: bool, runs=None) -> str:
    """One block function: c<index>() (converged) or m<index>(m) (masked)."""
    return _function(g, f"{'m' if masked else 'c'}{b.index}", "m" if masked else "", _block_lines(g, b, masked, runs))


def _function(g: Codegen, name: str, args: str, lines: list[str]) -> str:
    """A function of `make` with body `lines`, declaring the variables of `make` it assigns (g.written)."""
    body = []
    if g.written:
        body.append("nonlocal " + ", ".join(sorted(g.written)))
    body.extend(lines)
    return f"    def {name}({args}):\n" + "\n".join("        " + ln for ln in body)


def _block_funcs(g: Codegen, blocks: list[Block], plans=None) -> tuple[list[str], list[str], set[int]]:
    """(the block functions of `make`, the sparse bodies defined beside it, the blocks that have them)."""
    funcs: list[str] = []
    tops: list[str] = []
    sparse: set[int] = set()
    gvars = {f"r{g.reg_index[n]}" for n in g.k.global_regs if n in g.reg_index}
    for b in blocks:
        funcs.append(_block_source(g, b, False, plans[b.index] if plans else None))
        lines = _block_lines(g, b, True, _masked_runs(plans[b.index]) if plans else None)
        funcs.append(_function(g, f"m{b.index}", "m", lines))
        sp = _sparse_source(g, b, lines, gvars)
        if sp is not None:
            tops.append(sp[0])
            funcs.append(sp[1])
            sparse.add(b.index)
    return funcs, tops, sparse


def _masked_runs(runs):
    """The native runs a masked block takes too: those without stores. They compute every lane of the chunk, as in
    converged code (the inactive lanes' values are bits like any other to them, and a load has no effect but its
    value), and the block keeps their results for its own lanes only (_emit_run). A load the run cannot serve, an
    inactive lane's stale address included, declines the whole run: its masked NumPy form then runs, which serves
    the block's own lanes or raises their error."""
    return [(start, end, run) for start, end, run in runs if not run.scratch]


# ChunkAPI members a sparse block may use: what a chunk of the block's active lanes alone serves as the whole chunk
# would (runtime/sparse.py). Warp operations, barriers that count, call frames, textures and device calls see other
# lanes or the whole chunk: such blocks run masked.
SPARSE_MEMBERS = frozenset({"load", "store", "atom", "isspace", "param", "special", "memctx"})
_RETURN = re.compile(r"\breturn\b")
_MEMBER = re.compile(r"\bS\.(\w+)")           # (Codegen.rt writes every use of the chunk so)


def _sparse_source(g: Codegen, b: Block, lines: list[str], gvars: set[str]):
    """The sparse variant of masked block m<index> (lines: its body, just emitted, with g's record of it), or None.
    It runs the same body over the block's active lanes only (the runtime picks it when they are few: chunk.py):
    `_sparse<index>(S, T, m, pcv, stv, ...)` at module level gets S = those lanes as a chunk of their own
    (ChunkAPI.sparse), T = their count, m all true, and the lanes' own pc, state, zeros, special registers and the
    registers the block reads or writes gathered; it returns pc, state and the registers it wrote, which the
    wrapper s<index>(_i) inside make scatters back. Same instructions, same order, same lanes: the same bits."""
    if b.kind == "warp" or any(_RETURN.search(ln) or not SPARSE_MEMBERS.issuperset(_MEMBER.findall(ln))
                               for ln in lines):
        return None
    written = sorted(g.written)
    zs = sorted(v for v in g.touched if v.startswith("_z"))
    lanes = sorted(v for v in g.touched if v.startswith("sp_")) + sorted(v for v in g.touched if v in gvars)
    params = ", ".join(["S", "T", "m", "pcv", "stv", *zs, *lanes])
    top = f"def _sparse{b.index}({params}):\n" + "".join(f"    {ln}\n" for ln in lines) + \
        f"    return pcv, stv{''.join(', ' + v for v in written)}"
    args = ", ".join(["_L", "_L.T", "_L.ones", "pcv[_i]", "stv[_i]", *(f"{z}[:_L.T]" for z in zs),
                      *(f"{v}[_i]" for v in lanes)])
    body = [f"_L = {g.rt('sparse')}(_i)", f"_o = _sparse{b.index}({args})", "pcv[_i] = _o[0]", "stv[_i] = _o[1]"]
    body += [f"{v} = _scatter({v}, _i, _o[{k + 2}])" for k, v in enumerate(written)]
    g.written = set(written)
    return top, _function(g, f"s{b.index}", "_i", body)


def _emit_run(g: Codegen, run, lines: list, masked: bool = False) -> None:
    """A native run: inputs are the registers' current arrays, outputs become the registers' new arrays (in masked
    code those live after the block only in the block's lanes, `m`, as a masked write keeps them). A run that
    loads gets the chunk's memory (S.memctx()); when one of its accesses needs the NumPy code (a fault, a reserved
    range: cgen's docstring), its instructions run as NumPy code instead, which serves it or raises its error."""
    first, last = run.instrs[0].line, run.instrs[-1].line
    lines.append(f"# {first}-{last}: {len(run.instrs)} instructions as native code")
    ins = ", ".join(g._old(r) for r in run.inputs)
    ctx = f", {g.rt('memctx')}()" if run.mem else ""
    conds = []
    if run.max_lanes is not None:          # over more lanes the NumPy code is the faster (cgen.Run.choose_lanes)
        conds.append(f"T <= {run.max_lanes}")
    if run.mem and masked:                 # (a sparse block's lanes have no MemCtx: 0, its NumPy form serves)
        lines.append(f"_mc = {g.rt('memctx')}()")
        ctx = ", _mc"
        conds.append("_mc")
    call = f"{run.source}(T{ctx}{', ' if ins else ''}{ins})"
    if conds:
        call = f"{call} if {' and '.join(conds)} else None"
    lines.append(f"_o = {call}")
    indent = ""
    if run.mem:
        defined = set(g.local_defined)
        slow: list[str] = []
        for i in run.instrs:
            instrs.emit(g, i, slow, masked)
        g.local_defined = defined        # what only the NumPy code assigns is read by nothing after the run
        lines.append("if _o is None:")
        lines.extend("    " + ln for ln in slow)
        lines.append("else:")
        indent = "    "
    for k, r in enumerate(run.outputs):
        if masked and g._is_global(r):
            lines.append(f"{indent}{g.rvar(r)} = _where(m, _o[{k}], {g.rvar(r)})")
        else:
            lines.append(f"{indent}{g.rvar(r)} = _o[{k}]")
        g._assigned(r)
    if run.mem and not run.outputs:
        lines.append("    pass")


def _bar_handlers(g: Codegen) -> list[str]:
    """The release handler of each diverged bar.red site: writes the CTA's reduction to the destination."""
    handlers = []
    for site, (dst, t) in enumerate(g.bar_sites):
        lines: list[str] = []
        g.write(lines, dst, t, "v", "mm", None)
        var = g.rvar(dst.name)
        handlers.append(f"    def h{site}(mm, v):\n        nonlocal {var}\n        " + "\n        ".join(lines))
    return handlers


def _make_source(g: Codegen, blocks: list[Block], funcs: list[str], tops: list[str], sparse: set[int]) -> str:
    S = g.rt
    src = [*tops, "def make(S):", f"    T = {S('T')}", f"    pcv = {S('pc')}", f"    stv = {S('st')}"]
    for name in sorted(g.specials_used):
        src.append(f"    sp_{name.strip('%').replace('.', '_')} = {S('special')}({name!r})")
    for w in (1, 16, 32, 64):
        src.append(f"    _z{w} = {S('zeros')}[{w}]")
    for name, w in g.reg_width.items():
        if name in g.k.global_regs:
            src.append(f"    {g.rvar(name)} = _z{w}")
    src.extend(funcs)
    src.extend(_bar_handlers(g))
    src.extend(_reset_source(g))
    blist = ", ".join(f"(c{b.index}, m{b.index}, {f's{b.index}' if b.index in sparse else None})" for b in blocks)
    hlist = ", ".join(f"h{i}" for i in range(len(g.bar_sites)))
    src.append(f"    return [{blist}], [{hlist}], reset")
    return "\n".join(src)


def _reset_source(g: Codegen) -> list[str]:
    """reset(): the registers live across blocks back to their initial zeros, so that a chunk reused by the next
    launch of a plan (runtime/launch.py) starts as a freshly bound one."""
    regs = sorted((g.rvar(name), w) for name, w in g.reg_width.items() if name in g.k.global_regs)
    if not regs:
        return ["    def reset():", "        pass"]
    return ["    def reset():", "        nonlocal " + ", ".join(v for v, _ in regs),
            *(f"        {v} = _z{w}" for v, w in regs)]
