"""EmuModule: a loaded fatbin/PTX image on the emulated GPU (see docs/architecture.md, "Emulator contracts").

load: fatbin (fatbin.py) or PTX text -> ptx/index.ModuleIndex: the text outside function bodies is parsed (module
.global/.const variables are allocated in the device's DeviceMemory and initialised), each body only scanned; every
opcode the module uses is checked against what the translator implements (translator/support.py), so PTX the
emulator cannot run is refused at load, by name and line; every .entry gets its KernelInfo (parameter layout,
cudaFuncAttributes) from the scan. A kernel is parsed and translated (translator/Kernel) at its first launch, and
kept while the session's CodeBudget has room (the least recently launched translations are dropped first).
launch: EmuLimits.check_launch and a runtime/LaunchPlan once per configuration (a few kept per module), then
runtime/Launch.

What a module holds is charged to the CodeBudget of its session and device: its PTX text and index from load to
unload, each translation while it is kept (estimated from the kernel's size after inlining: the peak of translating
and compiling it while that runs, TRANSLATION_PEAK_PER_INSTRUCTION, then TRANSLATION_BYTES_PER_INSTRUCTION).

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
from .codebudget import CodeBudget, give_back
from .layout import FN_STRIDE, FN_WIN, init_bytes, local_bytes, param_layout, shared_layout
from .limits import EmuLimits
from .ptx import ir
from .ptx.index import ModuleIndex
from .ptx.parser import check_size
from .runtime import Launch, LaunchPlan
from .translator import Kernel, support


_MAX_PLANS = 16     # launch configurations kept per module (LaunchPlan: small chunks' geometry included)
# Host memory per instruction after inlining that a translated kernel holds (its IR, generated source, bytecode;
# measured 3.0-4.3 KiB), and that translating it takes at its peak (Python compiling the generated source: 22 KiB
# measured); a loaded module's beyond its text, per function (headers, scan: 14 KiB measured). Measured with
# tracemalloc on CuPy's CUB kernels, rounded up.
TRANSLATION_BYTES_PER_INSTRUCTION = 6 << 10
TRANSLATION_PEAK_PER_INSTRUCTION = 28 << 10
INDEX_BYTES_PER_FUNCTION = 16 << 10
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
    def __init__(self, index: ModuleIndex, memory, sm: int, limits: EmuLimits, budget: CodeBudget) -> None:
        self.index = index
        self.memory = memory
        self.sm = sm
        self.limits = limits
        self.budget = budget
        self.variables: dict[str, tuple[int, int]] = {}
        self.kernels: dict[str, KernelInfo] = {}
        self._compiled: dict[str, Kernel] = {}          # translations kept (CodeBudget)
        self._failed: dict[str, CudaError] = {}         # kernels whose translation failed: the same error again
        self._allocs: list[int] = []
        self._launches = 0
        self._plans: dict[tuple, LaunchPlan] = {}   # validated configurations, oldest first
        self.held = 0                               # bytes charged to the budget for the text and index

    @classmethod
    def load(cls, image: bytes, memory, sm: int = 75, limits: EmuLimits | None = None,
             budget: CodeBudget | None = None) -> "EmuModule":
        """`budget`: what the session's modules may hold on this device (a fresh one of EmuLimits.max_code_bytes
        when None)."""
        limits = limits or EmuLimits()
        budget = budget if budget is not None else CodeBudget(limits.max_code_bytes)
        text = _ptx_text(image, sm, limits)
        # The text is charged before anything is read: a module that cannot be held costs nothing more.
        budget.hold(len(text), "module load")
        try:
            index = ModuleIndex(text, limits)
            extra = INDEX_BYTES_PER_FUNCTION * len(index.spans)
            budget.hold(extra, "module load")
        except BaseException:
            budget.release(len(text))
            raise
        self = cls(index, memory, sm, limits, budget)
        self.held = len(text) + extra
        try:
            self._check_instructions()
            self._alloc_variables()
            for name, fn in index.module.functions.items():
                if fn.is_entry:
                    self.kernels[name] = self._info(name)
        except BaseException:
            self.unload()
            raise
        give_back(2 * len(text))                # the image, its decompressed bytes and the text's copies
        return self

    # ---------------------------------------------------------------- load
    def _check_instructions(self) -> None:
        """Refuse, at load, any instruction the translator does not implement: one statement per opcode text the
        module uses (all of them for the opcodes whose operands matter: support.OPERAND_CHECKED). A statement that
        fails is confirmed by parsing its whole function (the scan may take text for a statement that is not one),
        which raises the error with the instruction's line."""
        ix = self.index
        sites = [(fname, off) for fname, off in ix.opcodes.values()] + ix.statements(support.OPERAND_CHECKED)
        confirmed: set[str] = set()
        for fname, off in sites:
            if fname in confirmed:
                continue
            try:
                support.check(ix.statement(off, fname))
            except Exception:  # noqa: BLE001 - whatever stops a statement read alone, its function decides
                self._confirm(fname)
                confirmed.add(fname)

    def _confirm(self, fname: str) -> None:
        for ins in self.index.function(fname).body:
            if isinstance(ins, ir.Instr):
                support.check(ins)

    def _alloc_variables(self) -> None:
        self._symbols: dict[str, int] = {}
        mod = self.index.module
        # Device functions have addresses (function pointers, calls through registers); nothing is stored there.
        funcs = [n for n, f in mod.functions.items() if not f.is_entry]
        for i, name in enumerate(funcs):
            self._symbols[name] = FN_WIN + FN_STRIDE * i
        pending = []
        for v in mod.variables:
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
        for name in list(self._compiled):
            self.budget.forget((id(self), name))
        self._compiled.clear()
        for plan in self._plans.values():
            plan.drop()
        self._plans.clear()
        self.budget.release(self.held)
        self.held = 0

    def _info(self, name: str) -> KernelInfo:
        """A kernel's parameter layout and cudaFuncAttributes, from the scan (nothing is translated): registers,
        shared and local memory are those the kernel and the functions it may call declare (each function once;
        for a kernel without calls exactly what its translation uses)."""
        ix = self.index
        entry = ix.module.functions[name]
        funcs = [name, *ix.reach(name)]
        scans = [ix.scans[f] for f in funcs]
        used = set().union(*(s.shared for s in scans))
        shared = [v for v in ix.module.variables if v.space == "shared" and v.name in used]
        for f, scan in zip(funcs, scans):
            shared += [v if f == name else ir.VarDecl(v.space, f"{f}::{v.name}", v.type, v.align, v.count, v.init,
                                                      v.extern) for v in scan.locals if v.space == "shared"]
        static_shared = shared_layout(shared)[2]
        ool = set().union(*ix.module.facts["out_of_line"])        # functions called out of line (inline.py)
        # the kernel's own frame: its locals and those of the functions inlined into it (out-of-line ones have
        # frames of their own, on the call stack)
        local = local_bytes([v for f, s in zip(funcs, scans) if f not in ool
                             for v in s.locals if v.space in ("local", "param")])
        maxt = self.limits.max_threads_per_block
        if entry.maxntid:
            p = 1
            for d in entry.maxntid:
                p *= d
            maxt = min(maxt, p)
        const_size = sum(v.size for v in ix.module.variables if v.space == "const")
        attrs = {
            "max_threads_per_block": maxt,
            "shared_size_bytes": static_shared,
            "const_size_bytes": const_size,
            "local_size_bytes": local,
            "num_regs": _registers(sum(s.reg_units for s in scans) + (2 if set(funcs) & ool else 0), maxt,
                                   self.limits),
            # cudaFuncAttributes.ptxVersion is the virtual architecture the PTX was generated for (75 for
            # .target sm_75), not the PTX ISA version: CUB picks its tuning policies (and kernels) by it.
            "ptx_version": _target_sm(ix.module.target) or self.sm,
            "binary_version": self.sm,
            "max_dynamic_shared_size_bytes": max(0, self.limits.shared_per_block - static_shared),
        }
        n = ix.inlined_instructions(name)
        if n > self.limits.max_instructions:
            raise CudaError("cudaErrorInvalidPtx", f"{name}: more than {self.limits.max_instructions} "
                                                   f"instructions once its calls are inlined")
        return KernelInfo(name, param_layout(entry), attrs)

    # ---------------------------------------------------------------- translation on first use
    def kernel(self, name: str) -> Kernel:
        """The kernel translated: at its first use (or first use after the budget dropped it), charged to the
        budget while kept."""
        k = self._compiled.get(name)
        key = (id(self), name)
        if k is not None:
            self.budget.touch(key)
            return k
        if name not in self.kernels:
            raise CudaError("cudaErrorInvalidDeviceFunction", f"no kernel named {name!r} in this module")
        failed = self._failed.get(name)
        if failed is not None:
            raise CudaError(failed.code, failed.message)
        n = self.index.inlined_instructions(name)
        self.budget.admit(key, TRANSLATION_PEAK_PER_INSTRUCTION * n, lambda: self._drop(name),
                          f"translation of {name} ({n} instructions)")
        try:
            k = _translate(self.index, name, self._symbols, self.limits)
            k.make                          # compiled now, within the room made for it
        except CudaError as e:
            self.budget.forget(key)
            self._failed[name] = e
            raise
        except BaseException:
            self.budget.forget(key)
            raise
        self.budget.settle(key, TRANSLATION_BYTES_PER_INSTRUCTION * n)
        give_back(TRANSLATION_PEAK_PER_INSTRUCTION * n)
        self._compiled[name] = k
        return k

    def _drop(self, name: str) -> None:
        """The budget needs the room of this kernel's translation: forget it and its launch plans."""
        self._compiled.pop(name, None)
        for key in [key for key in self._plans if key[0] == name]:
            self._plans.pop(key).drop()         # (its translation's entry is gone: nothing is given back)

    def launch(self, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int], shmem: int,
               params: bytes, max_dynamic_shared: int | None = None, resources=None, peers=(),
               cancel: threading.Event | None = None, printf_fifo: int = 1 << 20,
               stack_size: int | None = None, turn=None, cooperative: bool = False, heap=None,
               heap_size: int = 8 << 20) -> LaunchOutput:
        """Run one launch. `max_dynamic_shared`: the function's current cudaFuncAttributeMaxDynamicSharedMemorySize
        (the backend passes the session's value); None checks only the device's opt-in maximum. `resources`: the
        texture and surface objects kernels may name (runtime/texture.Resources); `peers`: the DeviceMemory of
        other devices whose memory kernels may use (peer access). `cancel`: once set (the session's client is
        gone), the launch stops with cudaErrorLaunchTimeout at its next check. `printf_fifo`:
        cudaLimitPrintfFifoSize; printf output past it is dropped (LaunchOutput.dropped counts it). `stack_size`:
        the context's cudaLimitStackSize (None: CUDA's default). `turn`: the session's turn on the device
        (backends.base.DeviceTurn): the launch pauses between steps while other sessions have theirs.
        `cooperative`: cudaLaunchCooperativeKernel: every block resident at once (cudaErrorCooperativeLaunchTooLarge
        beyond the occupancy), a grid workspace for grid-wide synchronization (a plain launch of a kernel that reads
        %envreg1:%envreg2 gets one too, as on a GPU: cg::this_grid().is_valid() is true there). `heap`: the
        context's DeviceHeap (emu/device_heap.py), reserved with `heap_size` bytes (cudaLimitMallocHeapSize) before the first launch of a
        kernel that calls malloc or free; None: such a kernel fails to launch."""
        plan = self.plan_for(kernel, grid, block, shmem, max_dynamic_shared, stack_size, cooperative)
        return self.run_plan(plan, kernel, params, resources, peers, cancel, printf_fifo, turn, heap, heap_size)

    def plan_for(self, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int], shmem: int,
                 max_dynamic_shared: int | None = None, stack_size: int | None = None,
                 cooperative: bool = False) -> LaunchPlan:
        """The launch plan of a configuration (launch's arguments of the same names), made and validated at its
        first launch (its CUDA error otherwise), kept among the module's last _MAX_PLANS. A run of launches of one
        configuration gets it once and runs each launch with run_plan (backends/emu.py: EmuContext.run_fast)."""
        key = (kernel, tuple(grid), tuple(block), shmem, max_dynamic_shared, stack_size, cooperative)
        plan = self._plans.get(key)
        if plan is not None:
            self.budget.touch((id(self), kernel))
        else:
            plan = self._plan(kernel, grid, block, shmem, max_dynamic_shared, stack_size, cooperative)
            if len(self._plans) >= _MAX_PLANS:
                self._plans.pop(next(iter(self._plans))).drop()       # the oldest: a few configurations repeat
            self._plans[key] = plan
        return plan

    def run_plan(self, plan: LaunchPlan, kernel: str, params: bytes, resources=None, peers=(),
                 cancel: threading.Event | None = None, printf_fifo: int = 1 << 20, turn=None, heap=None,
                 heap_size: int = 8 << 20, checked: bool = False) -> LaunchOutput:
        """One launch of `plan` (plan_for's, of the function named `kernel`), the rest of launch's arguments as
        launch takes them. `checked`: this context's previous launch just ended, its checks made (Launch.run)."""
        if len(params) < plan.kernel.layout.param_size:
            raise CudaError("cudaErrorInvalidValue",
                            f"{kernel}: parameter buffer of {len(params)} B, the kernel needs "
                            f"{plan.kernel.layout.param_size} B")
        if plan.kernel.calls_heap:
            if heap is None:
                raise CudaError("cudaErrorNotSupported", f"{kernel}: device malloc/free needs a context's heap")
            heap.ensure(heap_size)
        self._launches += 1
        workspace = 0
        if plan.workspace:                    # cooperative_groups' grid_workspace: {wsSize = 8, barrier = 0}
            workspace = self.memory.alloc(_GRID_WORKSPACE.size)
            self.memory.write(workspace, _GRID_WORKSPACE.pack(_GRID_WORKSPACE.size, 0))
        spare = plan.spare
        run = spare.pop() if spare else Launch(plan, self.memory, self._symbols, self.limits)
        run.start(params, self._launches, resources, peers, cancel, printf_fifo, turn, workspace, heap)
        try:
            stdout = run.run(checked)
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
        k = self.kernel(kernel)
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
        key = (id(self), kernel)
        return LaunchPlan(k, grid, block, shmem, self.limits, stack_size, cooperative,
                          charge=lambda n: self.budget.charge(key, n))


def _ptx_text(image: bytes, sm: int, limits: EmuLimits) -> str:
    """The PTX text of an image: the fatbin's best PTX for `sm` (fatbin.select_ptx: PTX for a newer target than
    the device, the only PTX an image may hold, is translated like any other), or the image itself."""
    if fatbin.is_fatbin(image):
        return fatbin.select_ptx(bytes(image), sm, limits.max_image_bytes)
    check_size(len(image), limits)                     # before anything is decoded or copied
    try:
        text = bytes(image).rstrip(b"\0").decode("utf-8")
    except UnicodeDecodeError:
        raise CudaError("cudaErrorInvalidKernelImage", "image is neither a fatbin nor PTX text") from None
    if ".version" not in text and ".entry" not in text:
        raise CudaError("cudaErrorInvalidKernelImage", "image is neither a fatbin nor PTX text")
    return text


def _translate(index: ModuleIndex, name: str, symbols: dict, limits: EmuLimits) -> Kernel:
    """Parse the kernel and the functions it may call, and translate it."""
    try:
        mod = index.view(name)
        return Kernel(mod, mod.functions[name], symbols, limits, ptx=index.digest)
    except CudaError:
        raise
    except Exception as e:  # noqa: BLE001 - a translator bug: the kernel fails, naming it and the cause
        raise CudaError("cudaErrorInvalidPtx", f"{name}: internal emulator error in translation: "
                                               f"{_describe(e)}") from e


def _registers(declared: int, max_threads: int, limits: EmuLimits) -> int:
    """cudaFuncAttributes.numRegs of a kernel declaring `declared` 32-bit register units (the frame base of
    out-of-line calls included). PTX registers are virtual and often thousands; like ptxas, report no more than
    lets a block of the kernel's maximum size fit a multiprocessor (allocated 8 at a time per thread), so that an
    occupancy query never answers 0 blocks for a launch the kernel allows (CUB divides by it)."""
    warps = -(-max_threads // limits.warp_size)
    fit = limits.regs_per_multiprocessor // (warps * limits.warp_size) // 8 * 8
    return max(1, min(255, declared, fit))


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
