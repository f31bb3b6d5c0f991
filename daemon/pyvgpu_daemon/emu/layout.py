"""Memory layout of the emulated device, shared by the translator and the runtime.

- Generic addresses: a global address is itself; shared offset 0 is SH_WIN and local offset 0 is LOC_WIN (cvta
  adds or subtracts the window base; each window spans WIN_SIZE bytes). Kernel parameters have addresses too
  (`mov` of a parameter's name, PTX ISA 7.7+): parameter byte offset 0 is PAR_WIN, both in the .param state space
  and as a generic address (read-only); the .param variables of call sequences live in the local frame, so their
  .param-space address is their local offset (cvta.param adds LOC_WIN to those). Device functions have addresses
  FN_WIN + 16 * index (never dereferenced: only `call` through a register uses them).
- A kernel's layout (`KernelLayout`): kernel parameters at their aligned offsets in the packed launch buffer;
  shared memory = module-level .shared variables the kernel uses, then function-scope ones, then dynamic shared
  memory (extern or `[]` declarations) at a 16-byte boundary; the local frame of each thread = the kernel's local
  depots plus the .param space of call sequences, at least 16 bytes, a multiple of 16.
- `init_bytes`: a variable's initial bytes (short initializers zero-fill the rest; addresses of other variables
  resolved through the module's symbols).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyvgpu_daemon.errors import CudaError

from .limits import EmuLimits
from .ptx import ir
from .ptx.parser import float_bits_to_value
from .ptx.types import BITS, BYTES

SH_WIN = 0x00FF_0000_0000_0000      # generic address of shared offset 0
LOC_WIN = 0x00FE_0000_0000_0000     # generic address of local offset 0
PAR_WIN = 0x00FD_0000_0000_0000     # generic and .param-space address of kernel parameter byte 0
FN_WIN = 0x00FC_0000_0000_0000      # address of the module's first device function
FN_STRIDE = 16
WIN_SIZE = 1 << 40


def align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


FRAME_HEADER = 16      # an out-of-line function's frame starts with the caller's frame base and return block


@dataclass
class Frame:
    """The local memory of one context: the kernel's own (static) or one activation of an out-of-line function
    (on the call stack): variables from 0 (functions: after FRAME_HEADER, formal parameters first), then the
    registers saved around its calls (`save_off`, 8 bytes each), `size` in all (16-byte multiple)."""
    locals_end: int
    save_off: int = 0
    size: int = 0


@dataclass
class KernelLayout:
    kparams: dict[str, int]                   # kernel parameter -> byte offset in the launch buffer
    param_layout: list[tuple[int, int]]       # (offset, size) per kernel parameter
    param_size: int
    shared: dict[str, int]                    # shared variable -> offset in the CTA's shared memory
    dyn_shared_names: set[str]                # extern / [] shared variables (dynamic shared memory)
    static_shared: int
    dyn_shared_base: int
    shared_inits: list[tuple[int, ir.VarDecl]]
    local: dict[str, int]                     # local / call-param variable -> offset in its context's frame
    local_size: int                           # the kernel's own local variables (static frame)
    frame: int                                # per-thread local memory before the call stack
    local_ctx: dict[str, str | None]          # local / call-param variable -> out-of-line function, or None
    frames: dict[str | None, Frame]           # context -> its frame (None: the kernel's static frame)
    has_calls: bool = False                   # out-of-line calls: a call stack follows `frame`

    def finish_frames(self, save_bytes: dict[str | None, int], limits: EmuLimits, kernel: str) -> None:
        """Place each context's register save area (bytes per context) and size the frames."""
        for ctx, fr in self.frames.items():
            fr.save_off = align(fr.locals_end, 8)
            fr.size = align(fr.save_off + save_bytes.get(ctx, 0), 16)
        self.frame = align(max(self.frames[None].size, 16), 16)
        if self.frame > limits.max_local_bytes:
            raise CudaError("cudaErrorInvalidPtx", f"{kernel}: {self.frame} B of local memory per thread")


def kernel_layout(mod: ir.Module, flat, limits: EmuLimits) -> KernelLayout:
    """The layout of a flattened kernel (translator/inline.py FlatKernel); frames are finished by the translator
    once it knows the registers saved around calls (KernelLayout.finish_frames)."""
    entry = flat.entry
    kparams, params, param_size = _param_layout(entry)
    used = _used_symbols(flat.body)
    shared, dyn, static, dyn_base, inits = shared_layout(
        [v for v in mod.variables if v.space == "shared" and v.name in used] +
        [v for v in flat.locals if v.space == "shared"])
    local, frames = _local_layout(flat.locals, flat.local_ctx, flat.formals)
    lay = KernelLayout(kparams, params, param_size, shared, dyn, static, dyn_base, inits, local,
                       frames[None].locals_end, 0, flat.local_ctx, frames, bool(flat.calls))
    lay.finish_frames({}, limits, entry.name)
    return lay


def param_layout(entry: ir.Function) -> list[tuple[int, int]]:
    """[(offset, size)] of a kernel's parameters, what cuFuncGetParamInfo answers (also read by the cuda backend where
    the driver predates that call: backends/cuda_image.py)."""
    return _param_layout(entry)[1]


def _param_layout(entry: ir.Function) -> tuple[dict[str, int], list[tuple[int, int]], int]:
    kparams: dict[str, int] = {}
    layout: list[tuple[int, int]] = []
    off = 0
    for p in entry.params:
        a = p.align or min(p.size, 8) if p.count is None else (p.align or BITS[p.type] // 8)
        a = max(1, a)
        off = align(off, a)
        kparams[p.name] = off
        layout.append((off, p.size))
        off += p.size
    return kparams, layout, off


def _used_symbols(flat_body: list) -> set[str]:
    used = set()
    for ins in flat_body:
        if isinstance(ins, ir.Instr):
            for o in ins.srcs + ins.dsts:
                b = o.base if isinstance(o, ir.Addr) else o
                if isinstance(b, ir.Sym):
                    used.add(b.name)
    return used


def shared_layout(decls: list[ir.VarDecl]):
    """(offset per name, dynamic names, static bytes, dynamic base, initialised variables) of a CTA's shared memory
    holding `decls` in that order."""
    shared: dict[str, int] = {}
    dyn: set[str] = set()
    off = 0
    for v in decls:
        if v.extern or v.count == 0:
            dyn.add(v.name)
            continue
        off = align(off, max(v.align, 1))
        shared[v.name] = off
        off += v.size
    dyn_base = align(off, 16)
    for n in dyn:
        shared[n] = dyn_base
    inits = [(shared[v.name], v) for v in decls if v.init and v.name in shared]
    return shared, dyn, off, dyn_base, inits


def formal_offsets(params) -> list[int]:
    """Offsets of an out-of-line function's formal parameters, then its return values (ir.Param or ir.VarDecl,
    in declaration order), in its frame: after FRAME_HEADER, each at its alignment (natural unless declared).
    Callers place arguments by the callee's declaration or their .callprototype, which must agree."""
    off = FRAME_HEADER
    out = []
    for p in params:
        off = align(off, p.align or BYTES[p.type])
        out.append(off)
        off += p.size
    return out


def local_bytes(decls: list[ir.VarDecl]) -> int:
    """Bytes of `decls` (local / .param variables, names not necessarily unique: call sequences in different scopes
    reuse theirs) laid out one after the other in one frame."""
    unique = [ir.VarDecl(v.space, str(i), v.type, v.align, v.count) for i, v in enumerate(decls)]
    return _local_layout(unique, {}, {})[1][None].locals_end


def _local_layout(flat_locals: list, local_ctx: dict, formals: dict) -> tuple[dict[str, int], dict]:
    """Offsets of local and .param variables in their context's frame (see Frame)."""
    local: dict[str, int] = {}
    frames: dict[str | None, Frame] = {None: Frame(0)}
    by_name = {v.name: v for v in flat_locals if v.space in ("local", "param")}
    for fname, names in formals.items():
        decls = [by_name[n] for n in names]
        offs = formal_offsets(decls)
        local.update(zip(names, offs))
        frames[fname] = Frame(offs[-1] + decls[-1].size if decls else FRAME_HEADER)
    for v in flat_locals:
        if v.space not in ("local", "param") or v.name in local:
            continue
        fr = frames[local_ctx.get(v.name)]
        off = align(fr.locals_end, max(v.align or 1, 1))
        local[v.name] = off
        fr.locals_end = off + v.size
    return local, frames


def init_bytes(v: ir.VarDecl, symbols: dict) -> bytes:
    """The initial bytes of a variable (short initializers zero-fill the rest)."""
    size = v.size
    out = bytearray(size)
    if not v.init:
        return bytes(out)
    esz = BITS[v.type] // 8
    pos = 0
    for e in v.init:
        if pos + esz > size:
            break
        out[pos:pos + esz] = _init_element(v, e, esz, symbols)
        pos += esz
    return bytes(out)


def _init_element(v: ir.VarDecl, e, esz: int, symbols: dict) -> bytes:
    """One initializer element as `esz` little-endian bytes of the variable's type."""
    t = v.type
    mask = (1 << (8 * esz)) - 1
    if isinstance(e, tuple) and e[0] == "bits":
        _, bits, is32 = e
        if t in ("f32", "b32", "u32", "s32") and not is32:
            return np.float32(float_bits_to_value(bits, 64)).tobytes()
        if t == "f64" and is32:
            return np.float64(float_bits_to_value(bits, 32)).tobytes()
        return (bits & mask).to_bytes(esz, "little")
    if isinstance(e, float):
        if t in ("f32", "f64", "f16"):
            return {"f32": np.float32, "f64": np.float64, "f16": np.float16}[t](e).tobytes()
        raise CudaError("cudaErrorInvalidPtx", f"float initializer for .{t} variable {v.name}")
    if isinstance(e, int):
        if t in ("f32", "f64"):
            return {"f32": np.float32, "f64": np.float64}[t](e).tobytes()
        return (e & mask).to_bytes(esz, "little")
    if isinstance(e, str):
        name, _, off = e.partition("+")
        if name not in symbols:
            raise CudaError("cudaErrorInvalidPtx", f"initializer of {v.name} refers to unknown symbol {name}")
        return ((symbols[name] + (int(off) if off else 0)) & mask).to_bytes(esz, "little")
    return bytes(esz)            # any other element kind leaves its bytes zero
