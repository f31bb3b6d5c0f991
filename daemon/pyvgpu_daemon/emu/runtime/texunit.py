"""The chunk's texture and surface instructions (tex, tld4, txq, suld.b, sust.b, suq): operands per lane in, the
sampling of runtime/texture.py, results per selected lane out. A mixin of runtime/chunk.Chunk."""
from __future__ import annotations

import numpy as np

from pyvgpu_daemon.errors import CudaError

from . import texture as tx

_RESULT = {"f32": np.float32, "s32": np.int32, "u32": np.uint32}


class TextureUnit:
    """Needs self.launch (its `resources`), self.mem, self.T and LaneMemory's load/store."""

    def _resources(self) -> tx.Resources:
        res = getattr(self.launch, "resources", None)
        if res is None:
            raise CudaError("cudaErrorInvalidValue", "texture or surface instruction without texture objects")
        return res

    @staticmethod
    def _lanes(v, sel, T: int) -> np.ndarray:
        a = np.asarray(v)
        if a.ndim == 0:
            a = np.full(T if sel is None else len(sel), a)
        elif sel is not None:
            a = a[sel]
        return a

    def tex(self, geom: str, dtype: str, handle, coords: list, gather: int | None, sel) -> list[np.ndarray]:
        """tex / tld4 (gather: the component) over geometry 1d, 2d, 3d, a1d, a2d: the four result components."""
        rt = _RESULT.get(dtype)
        if rt is None:
            raise CudaError("cudaErrorInvalidPtx", f"texture fetch into .{dtype}")
        h = self._lanes(handle, sel, self.T)
        tex = self._resources().texture(h)
        c = [self._lanes(x, sel, self.T) for x in coords]
        layer = None
        if geom in ("a1d", "a2d"):
            layer, c = c[0].view(np.int32) if c[0].dtype == np.uint32 else c[0], c[1:]
            if tex.layered is False:
                raise CudaError("cudaErrorInvalidValue", "layered fetch from a texture that has no layers")
        dims = {"1d": 1, "2d": 2, "3d": 3, "a1d": 1, "a2d": 2}[geom]
        out = tx.fetch(self.mem, tex, c[:dims], layer, rt is np.float32, gather)
        return [o.astype(rt) if rt is np.float32 else o.astype(np.int64).astype(rt) for o in out]

    def txq(self, what: str, handle, sel) -> np.ndarray:
        h = self._lanes(handle, sel, self.T)
        res = self._resources()
        obj = res.surfaces.get(int(h.flat[0])) if what.startswith("su:") else None
        if obj is None:
            obj = res.texture(h) if not what.startswith("su:") else res.surface(h)
        return np.full(h.shape[0], tx.query(obj, what.removeprefix("su:")), np.uint32)

    def _surface_addr(self, geom: str, handle, coords: list, nbytes: int, mode: str, sel):
        h = self._lanes(handle, sel, self.T)
        surf = self._resources().surface(h)
        c = [self._lanes(x, sel, self.T).view(np.int32) if np.asarray(x).dtype == np.uint32
             else self._lanes(x, sel, self.T) for x in coords]
        if geom in ("a1d", "a2d"):
            raise CudaError("cudaErrorInvalidPtx", "layered surface access")
        y = c[1] if len(c) > 1 and geom != "1d" else None
        z = c[2] if len(c) > 2 and geom == "3d" else None
        addr, ok = tx.surface_index(self.mem, surf, c[0], y, z, nbytes, mode)
        full = np.zeros(self.T, np.uint64)
        full[np.arange(self.T) if sel is None else sel] = addr
        return full, ok

    def suld(self, geom: str, dt, nvec: int, mode: str, handle, coords: list, sel) -> list[np.ndarray]:
        size = np.dtype(dt).itemsize
        full, ok = self._surface_addr(geom, handle, coords, size * nvec, mode, sel)
        vals = self.load("global", full, 0, dt, nvec, sel)
        return [np.where(ok, v, 0).astype(dt) for v in vals]

    def sust(self, geom: str, dt, mode: str, handle, coords: list, vals: list, sel) -> None:
        size = np.dtype(dt).itemsize
        full, ok = self._surface_addr(geom, handle, coords, size * len(vals), mode, sel)
        if not ok.all():                                 # .zero: stores outside are dropped
            lanes = np.arange(self.T) if sel is None else np.asarray(sel)
            keep = lanes[ok]
            vals = [np.asarray(v)[ok] if np.ndim(v) and np.asarray(v).shape[0] == len(lanes)
                    else (np.asarray(v)[keep] if np.ndim(v) else v) for v in vals]
            sel = keep
        self.store("global", full, 0, dt, vals, sel)
