"""Device-side calls: printf (vprintf), assert (__assertfail), trap and the heap's malloc/free (ChunkAPI.vprintf,
assertfail, trap, malloc, free).

malloc, __nv_aligned_device_malloc (PTX: __cuda_syscall_aligned_malloc) and free (C++ new and delete lower to them)
work on the launch's DeviceHeap (emu/device_heap.py), one lane after another in lane order.

printf text and assertion messages go to the launch's stdout buffer (returned to the client with the next
synchronizing reply; once it passes the printf FIFO size further records are dropped); a failed assert is cudaErrorAssert and a trap cudaErrorLaunchFailure, both sticky on the
device. Formatting is printf.py's.

Uses the chunk state described in chunk.py (launch, kernel, T, cta0, ctasize) and LaneMemory (load,
read_cstring).
"""
from __future__ import annotations

import numpy as np

from pyvgpu_daemon.errors import CudaError

from .printf import format_printf


class DeviceCalls:
    def vprintf(self, fmt_off, args_off, sel):
        fmts = self.load("local", None, fmt_off, np.uint64, 1, sel)[0]
        argps = self.load("local", None, args_off, np.uint64, 1, sel)[0]
        lanes = np.arange(self.T) if sel is None else sel
        nargs = np.zeros(len(lanes), np.int32)
        launch = self.launch
        for k, lane in enumerate(lanes.tolist()):
            text, na = format_printf(self, lane, int(fmts[k]), int(argps[k]))
            if len(launch.stdout) <= launch.printf_cap:       # a full FIFO drops records, as on a GPU
                launch.stdout += text
            else:
                launch.stdout_dropped += len(text)
            nargs[k] = na
        return nargs if sel is None else _expand(nargs, sel, self.T)

    def assertfail(self, offs, sel):
        lanes = np.arange(self.T) if sel is None else sel
        if len(lanes) == 0:
            return
        # __assertfail(message, file, line, function, charSize): pointers, then the 32-bit line and size
        vals = [self.load("local", None, o, np.uint64 if k != 2 and k != 4 else np.uint32, 1, sel)[0]
                for k, o in enumerate(offs)]
        first = None
        for k, lane in enumerate(lanes.tolist()):
            text = self._assert_message(lane, *(int(v[k]) for v in vals[:4]))
            self.launch.stdout += text.encode()
            if first is None:
                first = text.strip()
        raise CudaError("cudaErrorAssert", f"device-side assert in {self.kernel.name}: {first}")

    def _assert_message(self, lane: int, msg_addr: int, file_addr: int, line: int, func_addr: int) -> str:
        """CUDA's assertion line for one lane: file:line: function: block: [x,y,z], thread: [x,y,z] ..."""
        msg = self.read_cstring(lane, msg_addr).decode("utf-8", "replace")
        fil = self.read_cstring(lane, file_addr).decode("utf-8", "replace")
        func = self.read_cstring(lane, func_addr).decode("utf-8", "replace")
        L = self.launch
        bx, by, _ = L.block
        gx, gy, _ = L.grid
        cta = self.cta0 + lane // self.ctasize
        t = lane % self.ctasize
        return (f"{fil}:{line}: {func}: block: [{cta % gx},{(cta // gx) % gy},{cta // (gx * gy)}], "
                f"thread: [{t % bx},{(t // bx) % by},{t // (bx * by)}] Assertion `{msg}` failed.\n")

    def malloc(self, offs, sel):
        heap = self._heap()
        lanes = np.arange(self.T) if sel is None else sel
        sizes = self.load("local", None, offs[0], np.uint64, 1, sel)[0]
        aligns = self.load("local", None, offs[1], np.uint64, 1, sel)[0] if len(offs) > 1 else None
        out = np.zeros(len(lanes), np.uint64)
        for k in range(len(lanes)):
            out[k] = heap.malloc(int(sizes[k])) if aligns is None else heap.malloc(int(sizes[k]), int(aligns[k]))
        return out if sel is None else _expand(out, sel, self.T)

    def free(self, off, sel):
        heap = self._heap()
        for p in self.load("local", None, off, np.uint64, 1, sel)[0].tolist():
            heap.free(int(p))

    def _heap(self):
        heap = self.launch.heap
        if heap is None or not heap.reserved:
            raise CudaError("cudaErrorLaunchFailure", f"{self.kernel.name}: device malloc/free without a heap")
        return heap

    def trap(self, sel, line):
        if sel is None or len(sel):
            raise CudaError("cudaErrorLaunchFailure", f"{self.kernel.name}: trap executed (PTX line {line})")


def _expand(vals, sel, T):
    out = np.zeros(T, vals.dtype)
    out[sel] = vals
    return out
