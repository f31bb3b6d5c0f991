"""The emulator's texture unit (emu/runtime/texture.py) against numbers a real GPU gave outside diff_kernels.cu:
tests/cuda/api_texture.cu's 3D trilinear fetches of a 6 x 5 x 4 float array under clamp addressing, as recorded by
real-GPU run 3 (2026-11-26 17:31 UTC, NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA 13.0, pyvgpu f7009e1,
`scripts/gpu-check.sh`, programs-pytest.log: the first 40 fetches where the H100 differed from the host model of the
day, 'got' printed with %.9g; each is a whole number of 1/256). They need clamp addressing to clamp the coordinate,
not only the texel indices (most of these fetches lie partly outside the array), and the two-stage 3D weights.
The fetches run on texture.fetch directly (no CUDA program, no daemon)."""
from __future__ import annotations

import numpy as np

from pyvgpu_daemon.emu.runtime.texture import EmuTexture, fetch
from pyvgpu_daemon.resources import CLAMP, ELEMENT, FLOAT, LINEAR, ChannelFormat, Sampler

# result index i → the H100's result times 256
GPU_API_TEXTURE_3D = {
    2: 768, 6: 768, 9: 768, 10: 768, 14: 768, 16: 1195, 19: 2256, 21: 2856, 22: 2955, 23: 2930, 24: 2799, 25: 2576,
    26: 2058, 27: 1582, 29: 920, 30: 766, 39: 2656, 41: 964, 42: 420, 43: -30, 45: 274, 46: 438, 49: 955, 50: 1126,
    51: 1298, 52: 1469, 53: 1644, 54: 1815, 57: 2325, 63: 3356, 64: 3527, 65: 3702, 68: 3968, 69: 4007, 71: 4082,
    75: 4238, 76: 4274, 77: 4313, 82: 4352, 84: 4352}


class _Heap:
    """The one range a texture reads, as the emulator's device memory hands it out (mem.view)."""

    def __init__(self, data: bytes) -> None:
        self.data = np.frombuffer(data, np.uint8)

    def view(self, addr: int, size: int) -> np.ndarray:
        assert 0 <= addr and addr + size <= len(self.data)
        return self.data[addr:addr + size]


def test_api_texture_3d_fetches_replay_the_gpu():
    # api_texture.cu: texel i = (i * 7) % 23 - 4; x = -2.3f + 0.19f i, y = 9.1f - 0.13f i, z = 0.05f i - 0.4f
    w, h, d = 6, 5, 4
    texels = (np.arange(w * h * d) * 7 % 23 - 4).astype(np.float32)
    tex = EmuTexture(0, ChannelFormat.of(32, 0, 0, 0, FLOAT), w, h, d, False, w * 4, h,
                     Sampler.of((CLAMP, CLAMP, CLAMP), LINEAR, ELEMENT, 0, 0, (0.0, 0.0, 0.0, 0.0)))
    i = np.array(sorted(GPU_API_TEXTURE_3D))
    f = i.astype(np.float32)
    xs = np.float32(-2.3) + np.float32(0.19) * f
    ys = np.float32(9.1) - np.float32(0.13) * f
    zs = np.float32(0.05) * f - np.float32(0.4)
    assert xs.dtype == ys.dtype == zs.dtype == np.float32
    got = fetch(_Heap(texels.tobytes()), tex, [xs, ys, zs], None, True)[0]
    want = np.array([GPU_API_TEXTURE_3D[k] for k in i], np.float32) / np.float32(256)
    bad = np.flatnonzero(got != want)
    assert not len(bad), [(int(i[b]), float(got[b]), float(want[b])) for b in bad]
