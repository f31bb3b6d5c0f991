"""EmuModule: a loaded fatbin/PTX image on the emulated GPU (see docs/architecture.md, "Emulator contracts").

load: fatbin (fatbin.py) or PTX text -> ir.Module (ptx/parser.py); module .global/.const variables are allocated in
the device's DeviceMemory and initialised; every .entry is translated once (translator/Kernel) and described by a
KernelInfo (parameter layout, cudaFuncAttributes). launch: EmuLimits.check_launch and a runtime/LaunchPlan once per
configuration (a few kept per module), then runtime/Launch.

An internal fault of the emulator (any exception that is not a CudaError: a bug) never reaches a program as
cudaErrorUnknown: in a launch it becomes cudaErrorLaunchFailure (sticky, as a crashed kernel is on a GPU), in a
translation cudaErrorInvalidPtx, each with a message naming the kernel, the exception and where it was raised,
which the daemon logs on one line with the session and device.
"""
from __future__ import annotations

import struct
import threading
import traceback
from dataclasses import dataclass, field

from pyvgpu_daemon.errors import CudaError

from . import fatbin
from .layout import FN_STRIDE, FN_WIN, init_bytes
from .limits import EmuLimits
from .ptx import ir
from .ptx.parser import parse
from .runtime import Launch, LaunchPlan
from .translator import Kernel


_MAX_PLANS = 16     # launch configurations kept per module (LaunchPlan: small chunks' geometry included)
_GRID_WORKSPACE = struct.Struct("<II")     # cooperative_groups' grid_workspace: wsSize, barrier


@dataclass
class KernelInfo:
    name: str
    params: list[tuple[int, int]]
    attrs: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchOutput:
    stdout: bytes
    dropped: int = 0          # printf bytes the full FIFO dropped


_QUIET = LaunchOutput(b"")     # what most launches return


class EmuModule:
    def __init__(self, ptx: ir.Module, memory, sm: int, limits: EmuLimits) -> None:
        self.ptx = ptx
        self.memory = memory
        self.sm = sm
        self.limits = limits
        self.variables: dict[str, tuple[int, int]] = {}
        self.kernels: dict[str, KernelInfo] = {}
        self._compiled: dict[str, Kernel] = {}
        self._allocs: list[int] = []
        self._launches = 0
        self._plans: dict[tuple, LaunchPlan] = {}   # validated configurations, oldest first
        self.source_bytes = 0                  # PTX text size (what the module's host-side structures scale with)

    @classmethod
    def load(cls, image: bytes, memory, sm: int = 75, limits: EmuLimits | None = None) -> "EmuModule":
        image = bytes(image)
        limits = limits or EmuLimits()
        if fatbin.is_fatbin(image):
            text = fatbin.select_ptx(image, sm, limits.max_image_bytes)
        else:
            try:
                text = image.rstrip(b"\0").decode("utf-8")
            except UnicodeDecodeError:
                raise CudaError("cudaErrorInvalidKernelImage", "image is neither a fatbin nor PTX text") from None
            if ".version" not in text and ".entry" not in text:
                raise CudaError("cudaErrorInvalidKernelImage", "image is neither a fatbin nor PTX text")
        # PTX for a newer target than the device (the only PTX an image holds: fatbin.select_ptx) is translated
        # like any other; what the emulator does not implement is refused below, by instruction and line.
        mod = parse(text, limits)
        self = cls(mod, memory, sm, limits)
        self.source_bytes = len(text)
        try:
            self._alloc_variables()
            for name, fn in mod.functions.items():
                if fn.is_entry:
                    k = _translate(mod, fn, self._symbols, self.limits)
                    self._compiled[name] = k
                    self.kernels[name] = self._info(k)
        except BaseException:
            self.unload()
            raise
        return self

    def _alloc_variables(self) -> None:
        self._symbols: dict[str, int] = {}
        # Device functions have addresses (function pointers, calls through registers); nothing is stored there.
        funcs = [n for n, f in self.ptx.functions.items() if not f.is_entry]
        for i, name in enumerate(funcs):
            self._symbols[name] = FN_WIN + FN_STRIDE * i
        pending = []
        for v in self.ptx.variables:
            if v.space not in ("global", "const"):
                continue
            if v.extern:
                raise CudaError("cudaErrorInvalidPtx",
                                f"extern .{v.space} variable {v.name} needs separate compilation (-rdc), "
                                f"which the emulator does not link")
            size = max(v.size, 1)
            addr = self.memory.alloc(size)
            self._allocs.append(addr)
            self._symbols[v.name] = addr
            self.variables[v.name] = (addr, v.size)
            pending.append(v)
        for v in pending:
            data = init_bytes(v, self._symbols)
            if data:
                self.memory.write(self._symbols[v.name], data)

    def unload(self) -> None:
        for a in self._allocs:
            try:
                self.memory.free(a)
            except CudaError:
                pass
        self._allocs.clear()

    def _info(self, k: Kernel) -> KernelInfo:
        maxt = self.limits.max_threads_per_block
        if k.maxntid:
            p = 1
            for d in k.maxntid:
                p *= d
            maxt = min(maxt, p)
        const_size = sum(v.size for v in self.ptx.variables if v.space == "const")
        static_shared = k.layout.static_shared
        attrs = {
            "max_threads_per_block": maxt,
            "shared_size_bytes": static_shared,
            "const_size_bytes": const_size,
            "local_size_bytes": k.layout.local_size,
            "num_regs": k.num_regs,
            # cudaFuncAttributes.ptxVersion is the virtual architecture the PTX was generated for (75 for
            # .target sm_75), not the PTX ISA version: CUB picks its tuning policies (and kernels) by it.
            "ptx_version": _target_sm(self.ptx.target) or self.sm,
            "binary_version": self.sm,
            "max_dynamic_shared_size_bytes": max(0, self.limits.shared_per_block - static_shared),
        }
        return KernelInfo(k.name, list(k.layout.param_layout), attrs)

    def launch(self, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int], shmem: int,
               params: bytes, max_dynamic_shared: int | None = None, resources=None, peers=(),
               cancel: threading.Event | None = None, printf_fifo: int = 1 << 20,
               stack_size: int | None = None, turn=None, cooperative: bool = False) -> LaunchOutput:
        """Run one launch. `max_dynamic_shared`: the function's current cudaFuncAttributeMaxDynamicSharedMemorySize
        (the backend passes the session's value); None checks only the device's opt-in maximum. `resources`: the
        texture and surface objects kernels may name (runtime/texture.Resources); `peers`: the DeviceMemory of
        other devices whose memory kernels may use (peer access). `cancel`: once set (the session's client is
        gone), the launch stops with cudaErrorLaunchTimeout at its next check. `printf_fifo`:
        cudaLimitPrintfFifoSize; printf output past it is dropped (LaunchOutput.dropped counts it). `stack_size`:
        the context's cudaLimitStackSize (None: CUDA's default). `turn`: the session's turn on the device
        (backends.base.DeviceTurn): the launch pauses between steps while other sessions have theirs.
        `cooperative`: cudaLaunchCooperativeKernel: every block resident at once (cudaErrorCooperativeLaunchTooLarge
        beyond the occupancy), a grid workspace for grid-wide synchronization."""
        key = (kernel, tuple(grid), tuple(block), shmem, max_dynamic_shared, stack_size, cooperative)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plan(kernel, grid, block, shmem, max_dynamic_shared, stack_size, cooperative)
            if len(self._plans) >= _MAX_PLANS:
                del self._plans[next(iter(self._plans))]       # the oldest: a few configurations repeat
            self._plans[key] = plan
        if len(params) < plan.kernel.layout.param_size:
            raise CudaError("cudaErrorInvalidValue",
                            f"{kernel}: parameter buffer of {len(params)} B, the kernel needs "
                            f"{plan.kernel.layout.param_size} B")
        self._launches += 1
        workspace = 0
        if plan.cooperative:                  # cooperative_groups' grid_workspace: {wsSize = 8, barrier = 0}
            workspace = self.memory.alloc(_GRID_WORKSPACE.size)
            self.memory.write(workspace, _GRID_WORKSPACE.pack(_GRID_WORKSPACE.size, 0))
        spare = plan.spare
        run = spare.pop() if spare else Launch(plan, self.memory, self._symbols, self.limits)
        run.start(params, self._launches, resources, peers, cancel, printf_fifo, turn, workspace)
        try:
            stdout = run.run()
        except CudaError:
            raise
        except Exception as e:  # noqa: BLE001 - an emulator bug: a sticky launch failure, never cudaErrorUnknown
            err = CudaError("cudaErrorLaunchFailure", f"{kernel}: internal emulator error: {_describe(e)}")
            err.stdout = bytes(run.stdout)
            raise err from e
        finally:
            if workspace:
                self.memory.free(workspace)
        if plan.reusable and not spare:
            spare.append(run)                  # (a launch that failed is not kept)
        return LaunchOutput(stdout, run.stdout_dropped) if stdout or run.stdout_dropped else _QUIET

    def tiny(self, kernel: str, grid, block, shmem: int, max_dynamic_shared: int | None = None,
             stack_size: int | None = None) -> bool:
        """Whether a launch with these arguments is certain to be short (LaunchPlan.tiny; False for a configuration
        not launched yet)."""
        plan = self._plans.get((kernel, tuple(grid), tuple(block), shmem, max_dynamic_shared, stack_size, False))
        return plan is not None and plan.tiny

    def _plan(self, kernel: str, grid, block, shmem: int, max_dynamic_shared: int | None,
              stack_size: int | None, cooperative: bool = False) -> LaunchPlan:
        """A validated launch configuration (EmuLimits.check_launch, and check_cooperative for a cooperative one);
        raises its CUDA error otherwise."""
        k = self._compiled.get(kernel)
        if k is None:
            raise CudaError("cudaErrorInvalidDeviceFunction", f"no kernel named {kernel!r} in this module")
        grid = tuple(int(x) for x in grid)
        block = tuple(int(x) for x in block)
        self.limits.check_launch(kernel, grid, block, shmem,
                                 kernel_max_threads=self.kernels[kernel].attrs["max_threads_per_block"],
                                 static_shared=k.layout.static_shared, max_dynamic_shared=max_dynamic_shared)
        if cooperative:
            info = self.kernels[kernel].attrs
            self.limits.check_cooperative(kernel, grid, block, regs=info["num_regs"],
                                          shared=k.layout.static_shared + shmem,
                                          kernel_max_threads=info["max_threads_per_block"])
        return LaunchPlan(k, grid, block, shmem, self.limits, stack_size, cooperative)


def _translate(mod: ir.Module, fn: ir.Function, symbols: dict, limits: EmuLimits) -> Kernel:
    try:
        return Kernel(mod, fn, symbols, limits)
    except CudaError:
        raise
    except Exception as e:  # noqa: BLE001 - a translator bug: the module fails to load, naming kernel and cause
        raise CudaError("cudaErrorInvalidPtx", f"{fn.name}: internal emulator error in translation: "
                                               f"{_describe(e)}") from e


def _describe(e: BaseException) -> str:
    """One line for the daemon log: the exception and where it was raised (innermost frame; for generated block
    code that is the kernel's block function and its line in the generated source)."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
    return f"{type(e).__name__}: {e}{where}"


def _target_sm(target: str) -> int:
    """75 for 'sm_75' (also 'sm_90a', 'compute_80'); 0 if the target names no architecture."""
    digits = "".join(ch for ch in target.partition("_")[2] if ch.isdigit())
    return int(digits) if digits else 0
