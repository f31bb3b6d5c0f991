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
from .ptx.types import BITS

SH_WIN = 0x00FF_0000_0000_0000      # generic address of shared offset 0
LOC_WIN = 0x00FE_0000_0000_0000     # generic address of local offset 0
PAR_WIN = 0x00FD_0000_0000_0000     # generic and .param-space address of kernel parameter byte 0
FN_WIN = 0x00FC_0000_0000_0000      # address of the module's first device function
FN_STRIDE = 16
WIN_SIZE = 1 << 40


def align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


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
    local: dict[str, int]                     # local / call-param variable -> offset in the thread's frame
    local_size: int
    frame: int


def kernel_layout(mod: ir.Module, entry: ir.Function, flat_body: list, flat_locals: list,
                  limits: EmuLimits) -> KernelLayout:
    kparams, param_layout, param_size = _param_layout(entry)
    shared, dyn, static, dyn_base, inits = _shared_layout(mod, flat_body, flat_locals)
    local, local_size = _local_layout(flat_locals)
    frame = align(max(local_size, 16), 16)
    if frame > limits.max_local_bytes:
        raise CudaError("cudaErrorInvalidPtx", f"{entry.name}: {frame} B of local memory per thread")
    return KernelLayout(kparams, param_layout, param_size, shared, dyn, static, dyn_base, inits, local, local_size,
                        frame)


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


def _shared_layout(mod: ir.Module, flat_body: list, flat_locals: list):
    used = _used_symbols(flat_body)
    decls = [v for v in mod.variables if v.space == "shared" and v.name in used] + \
            [v for v in flat_locals if v.space == "shared"]
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


def _local_layout(flat_locals: list) -> tuple[dict[str, int], int]:
    local: dict[str, int] = {}
    off = 0
    for v in flat_locals:
        if v.space in ("local", "param"):
            off = align(off, max(v.align, 1))
            local[v.name] = off
            off += v.size
    return local, off


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
