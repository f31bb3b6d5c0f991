"""Modules and launches: loading and unloading a module image (its kernels get function ids, its globals become
memory of the session), kernel launches and function attributes."""
from __future__ import annotations

import logging
from typing import Any

from pyvgpu import protocol as P
from pyvgpu_daemon.errors import CudaError
from pyvgpu_daemon.backends.base import FastOp
from pyvgpu_daemon.handlers.registry import Call, fast_handler, handler
from pyvgpu_daemon.session import ModuleEntry

log = logging.getLogger("pyvgpu.daemon")

MAX_PARAM_BYTES = 1 << 20         # kernel parameter buffer (CUDA's own limit is 32 KiB)
MAX_MODULE_BYTES = 1 << 30
KERNEL_ATTR_SET = frozenset(P.KERNEL_ATTR_KEYS)


@handler("MODULE_LOAD")
def module_load(c: Call, module_id: int) -> dict[str, Any]:
    st = c.st
    entry = st.modules.get(module_id)
    if entry is not None:
        # A client may ship the same registration twice (e.g. after losing a reply); answer the same ids.
        return entry.reply
    if not c.payload:
        raise CudaError("cudaErrorInvalidValue", "module load without an image")
    if len(c.payload) > MAX_MODULE_BYTES:
        raise CudaError("cudaErrorInvalidValue", f"module image of {len(c.payload)} bytes is too large")
    st.charge(st.modules)
    loaded = c.ctx.module_load(c.payload)
    new_vars = sum(int(size) for addr, size in loaded.variables.values()
                   if int(addr) not in st.variables and int(addr) not in st.allocations)
    try:
        st.check_quota(new_vars, f"module {module_id} globals")
        st.charge(st.functions, len(loaded.kernels))
    except CudaError:
        c.ctx.module_unload(loaded)
        raise
    kernels: dict[str, Any] = {}
    ids: list[int] = []
    for name, k in loaded.kernels.items():
        unknown = set(k.attrs) - KERNEL_ATTR_SET
        if unknown:   # a backend bug: the client would not understand these keys
            raise CudaError("cudaErrorUnknown", f"kernel {name}: attributes {sorted(unknown)} are not in the spec")
        fid = st.new_handle()
        st.functions[fid] = (loaded, k)
        ids.append(fid)
        kernels[name] = {P.KERNEL_ID: fid, P.KERNEL_PARAMS: [[int(o), int(sz)] for o, sz in k.params],
                         P.KERNEL_ATTRS: {str(key): int(v) for key, v in k.attrs.items()}}
    for addr, size in loaded.variables.values():
        st.add_variable(int(addr), int(size))
    reply = {P.MODULE_KERNELS: kernels,
             P.MODULE_VARS: {n: [int(addr), int(size)] for n, (addr, size) in loaded.variables.items()}}
    st.modules[module_id] = ModuleEntry(loaded, reply, ids)
    log.info("%s: module %d loaded: %d kernels, %d variables", c.session.tag(st.ordinal), module_id,
             len(kernels), len(loaded.variables))
    return reply


@handler("MODULE_UNLOAD")
def module_unload(c: Call, module_id: int) -> None:
    st = c.st
    entry = st.modules.pop(module_id, None)
    if entry is None:
        raise CudaError("cudaErrorInvalidResourceHandle", f"unload of unknown module {module_id}")
    for fid in entry.function_ids:
        st.functions.pop(fid, None)
    for addr, _ in entry.loaded.variables.values():
        st.remove_variable(int(addr))
    c.ctx.module_unload(entry.loaded)
    log.info("%s: module %d unloaded", c.session.tag(st.ordinal), module_id)


def check_params(c: Call, kernel: Any) -> None:
    """A launch's parameter buffer (the payload): at most MAX_PARAM_BYTES, at least what the layout needs."""
    if len(c.payload) > MAX_PARAM_BYTES:
        raise CudaError("cudaErrorInvalidValue", f"parameter buffer of {len(c.payload)} bytes")
    need = kernel.param_bytes
    if len(c.payload) < need:
        raise CudaError("cudaErrorInvalidValue",
                        f"kernel {kernel.name}: parameter buffer has {len(c.payload)} bytes, layout needs {need}")


@fast_handler("LAUNCH")
def launch(c: Call, func: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shmem: int,
           stream: Any) -> FastOp:
    module, kernel = func
    check_params(c, kernel)
    return FastOp("launch", (module, kernel, grid, block, shmem, c.payload, stream))


@handler("FUNC_SET_ATTR")
def func_set_attr(c: Call, func: Any, attr: int, value: int) -> None:
    module, kernel = func
    if not -(1 << 31) <= value < (1 << 31):
        raise CudaError("cudaErrorInvalidValue", f"{kernel.name}: attribute value {value} is not an int")
    c.ctx.func_set_attr(module, kernel, attr, value)
