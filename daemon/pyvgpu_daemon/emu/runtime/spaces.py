"""Memory spaces as the chunk's lanes see them: loads, stores and atomics (ChunkAPI.load/store/atom/isspace).

`resolve` turns an access (space, address lane vector or absolute offset, selected lanes) into (buffer, byte
offsets, positions) parts after checking it: global addresses through DeviceMemory.check_access, shared and
local offsets against the CTA's shared window and the thread's frame, kernel parameters (read-only) against the
launch's parameter buffer (cudaErrorIllegalAddress, cudaErrorMisalignedAddress). Generic addresses are split by
window (emu/layout.py) into their global, shared, local and parameter parts; .param addresses in registers into
kernel-parameter and local (call sequence) parts. Converged shared/local accesses through a register take a cached
fast path (`_window_index`). Atomics are applied by ops/atomic.py, in lane order.

Also the byte-level reads device-side calls need (byte_span, read_bytes, read_cstring).

Native runs that load (translator/cgen.py) get the same spaces as one C struct (`memctx`), checked the same way.

Uses the chunk state described in chunk.py (T, mem, peer_mems, pbuf, smem, shared_size, cta_off, lmem, frame, lane_off,
views, _acache, _memctx).
"""
from __future__ import annotations

import ctypes

import numpy as np

from pyvgpu_daemon.errors import CudaError

from ..layout import LOC_WIN, PAR_WIN, SH_WIN, WIN_SIZE
from ..ops.atomic import apply_atomic
from ..translator.cgen import MemCtx


class LaneMemory:
    # ---------------------------------------------------------------- addresses
    def _view(self, buf: np.ndarray, dt) -> np.ndarray:
        key = (id(buf), dt)
        v = self.views.get(key)
        if v is None:
            isz = np.dtype(dt).itemsize
            n = buf.size - buf.size % isz
            v = buf[:n].view(dt)
            self.views[key] = v
        return v

    def resolve(self, space: str, addr, off: int, size: int, write: bool, sel, vsize: int, picked: bool = False):
        """-> list of (buffer, byte offsets, positions) covering the accessed lanes; checks bounds/alignment.
        positions: indices into the accessed-lane list (None = all, in order). picked: addr holds the selected
        lanes' addresses only (one per entry of sel: runtime/sparse.py)."""
        a = self._lane_addresses(space, addr, off, sel, picked)
        if space == "global":
            return self._global(a.astype(np.uint64, copy=False), vsize, write, None)
        if space == "shared" or space == "local":
            buf, boff = self._window_part(space, a, write, vsize, sel)
            return [(buf, boff, None)]
        if space == "generic":
            a = a.astype(np.uint64, copy=False)
            sh, lo, pa = _windows(a)
            if not (sh.any() or lo.any() or pa.any()):
                return self.resolve("global", a, 0, size, write, None, vsize)
            kinds = (("global", ~(sh | lo | pa), 0), ("shared", sh, SH_WIN), ("local", lo, LOC_WIN),
                     ("param", pa, PAR_WIN))
            return self._parts(a, kinds, write, sel, vsize)
        if space == "param":
            # A .param address in a register: a kernel parameter's (PAR_WIN + offset) or a call sequence's .param
            # variable (its local offset).
            a = a.astype(np.uint64, copy=False)
            pa = _in_window(a, PAR_WIN)
            return self._parts(a, (("param", pa, PAR_WIN), ("local", ~pa, 0)), write, sel, vsize)
        raise CudaError("cudaErrorInvalidPtx", f"memory space {space} not supported")

    def _global(self, a, vsize: int, write: bool, pos) -> list:
        """Parts of a global access: this device's memory (its heap and its reserved ranges, `mem.regions`), or,
        with peer access enabled, other devices' of the session (`peer_mems`, DeviceMemory each, with their
        reserved ranges) for the addresses inside them. (A reserved range another device's worker frees while a
        kernel here reads it is a program's race, as on a GPU.)"""
        mem = self.mem
        if (self.peer_mems or mem.regions) and a.size:
            lo, hi = int(a.min()), int(a.max())
            if lo < mem.base or hi >= mem.base + mem.capacity:
                m = mem.region_at(lo)
                if m is mem or hi >= m.base + m.capacity:
                    return self._global_split(a, vsize, write, pos, lo, hi)
                mem = m                             # all in one reserved range
        mem.check_access(a, vsize, write)
        return [(mem.heap, (a - np.uint64(mem.base)).view(np.int64), pos)]

    def _global_split(self, a, vsize: int, write: bool, pos, lo: int, hi: int) -> list:
        out = []
        left = np.ones(len(a), bool)
        for m in (self.mem, *self.mem.regions_between(lo, hi),
                  *(r for p in self.peer_mems for r in (p, *p.regions_between(lo, hi)))):
            msk = (a >= np.uint64(m.base)) & (a < np.uint64(m.base + m.capacity))
            if not msk.any():
                continue
            idx = np.flatnonzero(msk)
            sub = a[idx]
            m.check_access(sub, vsize, write)
            out.append((m.heap, (sub - np.uint64(m.base)).view(np.int64), idx if pos is None else pos[idx]))
            left &= ~msk
        if left.any():
            self.mem.check_access(a[left], vsize, write)    # outside every window: the fault names the address
        return out

    def _lane_addresses(self, space: str, addr, off: int, sel, picked: bool = False):
        """The address each accessing lane uses: addr + off, or off itself when addr is None."""
        if addr is None:
            n = self.T if sel is None else len(sel)
            return np.full(n, off, np.int64).view(np.uint64) if space in ("generic", "global", "param") \
                else np.full(n, off, np.int64)
        a = addr if sel is None or picked else addr[sel]
        if off:
            a = a + a.dtype.type(off & ((1 << (a.dtype.itemsize * 8)) - 1))
        return a

    def _parts(self, a, kinds, write: bool, sel, vsize: int):
        """Split addresses `a` (uint64, one per accessing lane) by the lane masks of `kinds` ((space, mask, window
        base) each) into checked parts."""
        lanes = np.arange(len(a)) if sel is None else sel
        out = []
        for kind, msk, win in kinds:
            if not msk.any():
                continue
            pos = np.flatnonzero(msk)
            sub = a[pos] - np.uint64(win)
            if kind == "global":
                out += self._global(sub, vsize, write, pos)
            else:
                buf, boff = self._window_part(kind, sub, write, vsize, lanes[pos])
                out.append((buf, boff, pos))
        return out

    def _window_part(self, kind: str, off, write: bool, vsize: int, lanes):
        """(buffer, byte offsets) of offsets into one space as `lanes` (None: every lane, in order) see them;
        checked against the space's bounds (shared, local, param)."""
        s = off.view(np.int64) if off.dtype == np.uint64 else off.astype(np.int64, copy=False)
        if kind == "param":
            if write:
                raise CudaError("cudaErrorIllegalAddress",
                                f"store to kernel parameter memory at parameter offset {int(s[0]):#x}")
            self._check_window(s, vsize, self.pbuf.size, "kernel parameter", write)
            return self.pbuf, s
        limit = self.shared_size if kind == "shared" else self.frame
        self._check_window(s, vsize, limit, kind, write)
        base = self.cta_off if kind == "shared" else self.lane_off
        return (self.smem if kind == "shared" else self.lmem), (base if lanes is None else base[lanes]) + s

    def _check_window(self, a, size, limit, what, write):
        if a.size == 0:
            return
        lo = int(a.min())
        hi = int(a.max())
        if lo < 0 or hi + size > limit:
            bad = int(a[(a < 0) | (a + size > limit)][0])
            raise CudaError("cudaErrorIllegalAddress",
                            f"out-of-range {size}-byte {what} {'store' if write else 'load'} at {what} offset "
                            f"{bad:#x} (window is {limit} bytes)")
        if size > 1 and (a & (size - 1)).any():
            bad = int(a[(a & (size - 1)) != 0][0])
            raise CudaError("cudaErrorMisalignedAddress",
                            f"misaligned {size}-byte {what} {'store' if write else 'load'} at {what} offset {bad:#x}")

    def _window_index(self, space, addr, off, isz, vsize):
        """Fast path for converged shared/local accesses through a register: per address array (registers are
        immutable) remember its int64 form, range and low bits, so each further access with another constant
        offset costs one add. Returns (element indices into the space's buffer, the constant offset in elements,
        which may be negative), or None to take the slow path."""
        key = (addr.__array_interface__["data"][0], addr.dtype, space)
        ent = self._acache.get(key)
        if ent is None or ent[0].shape != addr.shape:
            a64 = addr.astype(np.int64)
            if space == "shared" and addr.dtype == np.uint64:
                a64 = addr.view(np.int64)
            base = self.cta_off if space == "shared" else self.lane_off
            ent = (addr, int(a64.min()), int(a64.max()), int(np.bitwise_or.reduce(a64 & 15)), base + a64, {})
            self._cache_put(key, ent)
        _, lo, hi, low, bb, q = ent
        limit = self.shared_size if space == "shared" else self.frame
        if lo + off < 0 or hi + off + vsize > limit or off % vsize or (low & (vsize - 1)):
            return None
        sh = isz.bit_length() - 1
        qa = q.get(sh)
        if qa is None:
            qa = q[sh] = bb >> sh
        return qa, off >> sh

    def _param_index(self, addr, off, isz, vsize):
        """Fast path for converged loads of kernel parameters through a register (`ld.param [%rd+off]`, a struct
        parameter indexed at run time): per address array remember whether every lane's address lies in the
        parameter window and whether they are all equal (the usual case: parameters are the same for every thread).
        Returns the element index (int: one address) or indices into the parameter buffer, or None for the slow
        path (call-sequence .param variables, faults)."""
        key = (addr.__array_interface__["data"][0], addr.dtype, addr.strides, "param")
        ent = self._acache.get(key)
        if ent is None or ent[0].shape != addr.shape:
            a = addr.astype(np.uint64, copy=False)
            lo, hi = int(a.min()), int(a.max())
            ent = (addr, lo, hi, int(np.bitwise_or.reduce(a & np.uint64(15))),
                   None if lo == hi else (a - np.uint64(PAR_WIN)).view(np.int64))
            self._cache_put(key, ent)
        _, lo, hi, low, rel = ent
        start = lo + off - PAR_WIN
        if lo < PAR_WIN or hi + off + vsize > PAR_WIN + self.pbuf.size or start < 0 or off % vsize or \
                (low & (vsize - 1)):
            return None
        sh = isz.bit_length() - 1
        return start >> sh if rel is None else (rel + off) >> sh

    def _global_slices(self, addr, off, isz, nvec, write):
        """Fast path for converged global accesses through a register: per address array (registers are
        immutable) remember its range, alignment and whether the lanes' addresses are evenly spaced (coalesced
        accesses: stride = element or vector size; every lane the same address: stride 0). Returns, for each
        vector element, a slice of the heap viewed as the access type, with that heap (the device's, or a reserved
        range's) (None: take the general path, which also reports any fault)."""
        key = (addr.__array_interface__["data"][0], addr.dtype, addr.strides, "global")
        ent = self._acache.get(key)
        if ent is None or ent[0].shape != addr.shape:
            ent = (addr, *self._stride_of(addr), {})
            self._cache_put(key, ent)
        _, lo, hi, low, stride, q = ent
        vsize = isz * nvec
        if stride is None or stride % isz or off % vsize or (low & (vsize - 1)):
            return None
        hit = q.get((off, isz, nvec))
        if hit is None:
            start = lo + off
            mem = self.mem.region_at(start)             # the heap, or the reserved range holding the addresses
            if not mem.contains(start, hi + off + vsize - start):
                return None
            i0 = (start - mem.base) // isz
            step = stride // isz
            if step == 0:
                hit = [i0 + k for k in range(nvec)]                         # one address: an element each
            else:
                n = step * (addr.size - 1) + 1
                hit = [slice(i0 + k, i0 + k + n, step) for k in range(nvec)]
            hit = (mem.heap, hit)
            q[(off, isz, nvec)] = hit
        return hit

    def _stride_of(self, addr) -> tuple:
        """(lowest, highest address, low bits, stride) of evenly spaced lane addresses (stride 0: all equal);
        stride None when they are not (then the other fields do not matter). Evenly spaced addresses are found
        from the first and last lane and checked in two passes; the range and alignment follow from them."""
        a = addr.astype(np.uint64, copy=False)
        T = a.size
        first, last = int(a[0]), int(a[-1])
        if T == 1 or (addr.strides == (0,)):
            return first, first, first & 63, 0
        if last < first or (last - first) % (T - 1):
            return 0, 0, 0, None
        s = (last - first) // (T - 1)
        if s == 0:
            ok = bool((a == np.uint64(first)).all())
        else:
            ok = np.array_equal(a - np.uint64(first), _strided_iota(T, s))
        return (first, last, (first | s) & 63, s) if ok else (0, 0, 0, None)

    def _cache_put(self, key, ent) -> None:
        """Add an address-cache entry, dropping the oldest beyond 64 (the entries keep their arrays alive, so a
        cached data pointer cannot be reused by another array)."""
        if len(self._acache) >= 64:
            del self._acache[next(iter(self._acache))]
        self._acache[key] = ent

    # ---------------------------------------------------------------- loads, stores, atomics
    def load(self, space, addr, off, dt, nvec, sel, picked=False):
        isz = np.dtype(dt).itemsize
        if sel is None and addr is not None and space == "global":
            hit = self._global_slices(addr, off, isz, nvec, False)
            if hit is not None:
                heap, hit = hit
                v = self._view(heap, dt)
                if isinstance(hit[0], slice):
                    return [v[h].copy() for h in hit]
                return [np.full(self.T, v[h]) for h in hit]
        if sel is None and addr is not None and (space == "shared" or space == "local") and isz > 1:
            hit = self._window_index(space, addr, off, isz, isz * nvec)
            if hit is not None:
                idx, c = hit
                v = self._view(self.smem if space == "shared" else self.lmem, dt)
                return [v[c + k:].take(idx) if c + k >= 0 else v.take(idx + (c + k)) for k in range(nvec)]
        if sel is None and addr is not None and space == "param":
            hit = self._param_index(addr, off, isz, isz * nvec)
            if hit is not None:
                v = self._view(self.pbuf, dt)
                if isinstance(hit, int):
                    return [np.full(self.T, v[hit + k]) for k in range(nvec)]
                return [v.take(hit + k) for k in range(nvec)]
        parts = self.resolve(space, addr, off, isz, False, sel, isz * nvec, picked)
        n = self.T if sel is None else len(sel)
        if len(parts) == 1 and parts[0][2] is None:
            buf, boff, _ = parts[0]
            v = self._view(buf, dt)
            idx = boff >> (isz.bit_length() - 1) if isz > 1 else boff
            if nvec == 1:
                return [v.take(idx)]
            return [v.take(idx + k) for k in range(nvec)]
        outs = [np.empty(n, dt) for _ in range(nvec)]
        for buf, boff, pos in parts:
            v = self._view(buf, dt)
            idx = boff >> (isz.bit_length() - 1) if isz > 1 else boff
            for k in range(nvec):
                outs[k][pos] = v.take(idx + k)
        return outs

    def store(self, space, addr, off, dt, vals, sel, picked=False):
        isz = np.dtype(dt).itemsize
        if sel is None and addr is not None and space == "global":
            hit = self._global_slices(addr, off, isz, len(vals), True)
            if hit is not None:
                heap, hit = hit
                v = self._view(heap, dt)
                for h, x in zip(hit, vals):
                    x = np.asarray(x)
                    if x.dtype != dt:
                        x = x.astype(dt) if x.ndim == 0 or x.dtype.itemsize != isz else x.view(dt)
                    # one address for every lane: the last lane's store is the one that stays
                    v[h] = x if isinstance(h, slice) or x.ndim == 0 else x[-1]
                return
        if sel is None and addr is not None and (space == "shared" or space == "local") and isz > 1:
            hit = self._window_index(space, addr, off, isz, isz * len(vals))
            if hit is not None:
                idx, c = hit
                v = self._view(self.smem if space == "shared" else self.lmem, dt)
                for k, x in enumerate(vals):
                    x = np.asarray(x)
                    if x.dtype != dt:
                        x = x.astype(dt) if x.ndim == 0 or x.dtype.itemsize != isz else x.view(dt)
                    if c + k >= 0:
                        v[c + k:][idx] = x       # a slice saves adding the constant offset to every index
                    else:
                        v[idx + (c + k)] = x     # a negative offset (`[%r+-2]`) cannot slice
                return
        parts = self.resolve(space, addr, off, isz, True, sel, isz * len(vals), picked)
        for buf, boff, pos in parts:
            v = self._view(buf, dt)
            idx = boff >> (isz.bit_length() - 1) if isz > 1 else boff
            for k, x in enumerate(vals):
                x = np.asarray(x)
                if x.ndim == 0:
                    vv = x.astype(dt)
                else:
                    vv = x if sel is None or picked else x[sel]
                    if pos is not None:
                        vv = vv[pos]
                    if vv.dtype != dt:
                        vv = vv.astype(dt) if vv.dtype.itemsize != isz else vv.view(dt)
                v[idx + k] = vv

    def memctx(self) -> int:
        """translator/cgen.py's MemCtx of this chunk, rebuilt when the allocations or the parameter buffer (a reused
        chunk's next launch) changed; the chunk keeps every array it points into alive."""
        bounds = self.mem.bounds()
        pbuf = self.pbuf
        c = self._memctx
        if c is not None and c[0] is bounds and c[1] is pbuf:
            return c[2]
        starts, ends = bounds
        cta_off = np.ascontiguousarray(self.cta_off, np.int64)
        lane_off = np.ascontiguousarray(self.lane_off, np.int64)
        mem = self.mem
        ctx = MemCtx(heap=mem.heap.ctypes.data, base=mem.base, cap=mem.capacity, starts=starts.ctypes.data,
                     ends=ends.ctypes.data, nalloc=starts.size, pbuf=pbuf.ctypes.data, psize=pbuf.size,
                     smem=self.smem.ctypes.data, shsize=self.shared_size, cta_off=cta_off.ctypes.data,
                     lmem=self.lmem.ctypes.data, frame=self.frame, lane_off=lane_off.ctypes.data)
        addr = ctypes.addressof(ctx)
        self._memctx = (bounds, pbuf, addr, ctx, cta_off, lane_off)
        return addr

    def isspace(self, space, a):
        sh, lo, pa = _windows(a.astype(np.uint64, copy=False))
        if space == "shared":
            return sh
        if space == "local":
            return lo
        if space == "param":
            return pa
        return ~(sh | lo | pa)          # global, const

    def atom(self, space, op, dt, addr, off, b, c, sel, live, picked=False):
        isz = np.dtype(dt).itemsize
        parts = self.resolve(space, addr, off, isz, True, sel, isz, picked)
        n = self.T if sel is None else len(sel)
        nb = n if picked else self.T            # picked: b and c hold the selected lanes' operands only
        b = np.broadcast_to(np.asarray(b, dtype=dt) if np.ndim(b) == 0 else b, (nb,))
        b = b if sel is None or picked else b[sel]
        if c is not None:
            c = np.broadcast_to(np.asarray(c, dtype=dt) if np.ndim(c) == 0 else c, (nb,))
            c = c if sel is None or picked else c[sel]
        old = np.empty(n, dt) if live else None
        for buf, boff, pos in parts:
            v = self._view(buf, dt)
            idx = boff >> (isz.bit_length() - 1)
            bb = b if pos is None else b[pos]
            cc = None if c is None else (c if pos is None else c[pos])
            res = apply_atomic(v, idx, op, bb.astype(dt, copy=False), cc, live)
            if live:
                if pos is None:
                    old = res
                else:
                    old[pos] = res
        return old

    # ---------------------------------------------------------------- byte-level reads (printf, assert)
    def read_cstring(self, lane: int, addr: int, limit: int = 1 << 16) -> bytes:
        buf, off = self.byte_span(lane, addr, 1)
        n = buf.size
        stop = min(n, off + limit)
        chunk = buf[off:stop].tobytes()
        z = chunk.find(b"\0")
        if z < 0:
            if stop >= n:
                raise CudaError("cudaErrorIllegalAddress", f"unterminated string at {addr:#x}")
            z = len(chunk)
        return chunk[:z]

    def byte_span(self, lane: int, addr: int, size: int):
        """(uint8 buffer, offset) for a generic address seen by one lane; checked."""
        a = np.array([addr], np.uint64)
        parts = self.resolve("generic", a, 0, 1, False, None, 1)
        buf, boff, _ = parts[0]
        o = int(boff[0])
        if buf is self.smem:
            o = o - int(self.cta_off[0]) + int(self.cta_off[lane])
        elif buf is self.lmem:
            o = o - int(self.lane_off[0]) + int(self.lane_off[lane])
        return buf, o

    def read_bytes(self, lane: int, addr: int, size: int) -> bytes:
        buf, o = self.byte_span(lane, addr, size)
        if o + size > buf.size:
            raise CudaError("cudaErrorIllegalAddress", f"read past the end of memory at {addr:#x}")
        return buf[o:o + size].tobytes()



def _in_window(a: np.ndarray, win: int) -> np.ndarray:
    return (a >= np.uint64(win)) & (a < np.uint64(win + WIN_SIZE))


def _windows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which generic addresses (uint64) lie in the shared, the local and the kernel-parameter window."""
    return _in_window(a, SH_WIN), _in_window(a, LOC_WIN), _in_window(a, PAR_WIN)


# 0, s, 2s, ... (uint64) per (lanes, stride): shared by every chunk of every launch (a chunk's LaneMemory lives for
# one chunk, and building the array costs as much as the check that uses it). Read-only; cleared when full (a dict
# clear is atomic, so the launch threads need no lock).
_IOTAS: dict[tuple[int, int], np.ndarray] = {}
_IOTAS_MAX = 32


def _strided_iota(lanes: int, s: int) -> np.ndarray:
    io = _IOTAS.get((lanes, s))
    if io is None:
        if len(_IOTAS) >= _IOTAS_MAX:
            _IOTAS.clear()
        io = np.arange(lanes, dtype=np.uint64) * np.uint64(s)
        io.flags.writeable = False
        _IOTAS[(lanes, s)] = io
    return io
