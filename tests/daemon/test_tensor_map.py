"""The emulated GPU's tensor maps (daemon/pyvgpu_daemon/tensor_map.py) by the driver API's documented rules, without
a daemon: each rule refuses what cuda.h 13.0 says it refuses (cudaErrorInvalidValue) and accepts its edge; the
descriptor records the arguments and cuTensorMapReplaceAddress's equivalent changes only the address. The same calls
through libvcuda, on the emulated GPU and on a chain: tests/driver/test_driver.py::test_driver_api_tensor_maps."""
from __future__ import annotations

import struct

import pytest

from pyvgpu.protocol import ERROR_CODES, TENSOR_MAP_BYTES, TENSOR_MAP_IM2COL, TENSOR_MAP_IM2COL_WIDE, TENSOR_MAP_TILED
from pyvgpu_daemon import tensor_map as tm
from pyvgpu_daemon.errors import CudaError

F32, F16, U8, U4_ALIGN16B = 7, 6, 0, 14


def req(kind=TENSOR_MAP_TILED, dtype=F32, rank=2, addr=0x10000, dims=(64, 32), strides=(256,), box=(16, 8),
        steps=(1, 1), lower=(), upper=(), channels=0, pixels=0, interleave=0, mode=0, swizzle=0, l2=0, oob=0):
    pack = lambda fmt, v: struct.pack(f"<{len(v)}{fmt}", *v)   # noqa: E731
    return tm.request(kind, dtype, rank, addr, pack("Q", dims), pack("Q", strides), pack("I", box), pack("I", steps),
                      pack("i", lower), pack("i", upper), channels, pixels, interleave, mode, swizzle, l2, oob)


def test_a_valid_tiled_map_records_its_arguments():
    r = req(l2=2, oob=1)
    assert tm.refusal(r) is None
    out = tm.emulated(r)
    assert len(out) == TENSOR_MAP_BYTES and out[:4] == b"PVTM"
    assert tm.emulated(r) == out                                     # repeatable
    moved = tm.emulated_replace_address(out, 0x20000)
    assert moved == tm.emulated(req(addr=0x20000, l2=2, oob=1)) != out
    assert tm.emulated_replace_address(moved, 0x10000) == out


@pytest.mark.parametrize("change, why", [
    ({"dtype": 16}, "tensorDataType"),
    ({"addr": 0x10008}, "16-byte aligned"),
    ({"dims": (64, 0)}, "globalDim"),
    ({"dims": (64, (1 << 32) + 1)}, "globalDim"),
    ({"strides": (264,)}, "globalStrides"),
    ({"strides": (1 << 40,)}, "globalStrides"),
    ({"box": (16, 257)}, "boxDim"),
    ({"box": (3, 8)}, "multiple of 16 bytes"),
    ({"steps": (1, 9)}, "elementStrides"),
    ({"box": (32, 8), "swizzle": 1}, "swizzle span"),
    ({"rank": 2, "interleave": 1, "dtype": F16}, "interleaved layout"),
    ({"swizzle": 7}, "enumeration"),
    ({"dtype": U8, "box": (16, 8), "oob": 1}, "NaN fill"),
    ({"dtype": U4_ALIGN16B, "addr": 0x10010}, "32-byte aligned"),
])
def test_refused_as_documented(change, why):
    r = req(**change)
    assert why in (tm.refusal(r) or "")
    with pytest.raises(CudaError) as exc:
        tm.check(r)
    assert exc.value.code == ERROR_CODES["cudaErrorInvalidValue"]


def test_rank_outside_1_to_5_is_refused_before_the_arrays_are_read():
    for rank in (0, 6):
        with pytest.raises(CudaError, match="tensorRank"):
            req(rank=rank, dims=(1,) * rank, strides=(16,) * max(rank - 1, 0), box=(4,) * rank, steps=(1,) * rank)


def test_edges_are_accepted():
    assert tm.refusal(req(dims=(64, 1 << 32))) is None                # 2^32 is allowed
    assert tm.refusal(req(box=(64, 256), steps=(1, 8))) is None
    assert tm.refusal(req(box=(32, 8), swizzle=3)) is None            # 128 bytes in the 128-byte span
    three = dict(rank=3, dims=(64, 32, 4), strides=(256, 8192), box=(16, 8, 2), steps=(1, 1, 1), dtype=F16)
    assert tm.refusal(req(**three, interleave=2, swizzle=1, addr=0x10020)) is None
    assert tm.refusal(req(**three, interleave=2, swizzle=0, addr=0x10020)) is None     # as an H100's driver 580
    assert tm.refusal(req(**three, interleave=2, swizzle=2, addr=0x10020)) is None     # as an H200's driver 580
    assert "SWIZZLE_32B" in tm.refusal(req(**three, interleave=2, swizzle=3, addr=0x10020))


def test_im2col_rules():
    base = dict(kind=TENSOR_MAP_IM2COL, dtype=F16, rank=4, dims=(16, 8, 8, 2), strides=(32, 256, 2048), box=(),
                steps=(1, 1, 1, 1), lower=(-1, -1), upper=(-1, -1), channels=16, pixels=64)
    assert tm.refusal(req(**base)) is None
    out = tm.emulated(req(**base))
    assert out[:4] == b"PVTM" and len(out) == TENSOR_MAP_BYTES
    assert "corners" in tm.refusal(req(**{**base, "lower": (-129, -1)}))
    assert "channelsPerPixel" in tm.refusal(req(**{**base, "channels": 257}))
    assert "pixelsPerColumn" in tm.refusal(req(**{**base, "pixels": 1025}))
    with pytest.raises(CudaError):          # rank 2 has no pixel dimensions: the arrays cannot match
        req(**{**base, "rank": 2, "dims": (16, 8), "strides": (32,), "steps": (1, 1)})
    wide = {**base, "kind": TENSOR_MAP_IM2COL_WIDE, "lower": (-1,), "upper": (-1,), "swizzle": 3}
    assert tm.refusal(req(**wide)) is None
    assert "im2col-wide" in tm.refusal(req(**{**wide, "swizzle": 0}))
    assert tm.refusal(req(**{**wide, "mode": 1, "pixels": 5000})) is None     # W128 ignores pixelsPerColumn


def test_other_formats_are_not_replaced():
    with pytest.raises(CudaError):
        tm.emulated_replace_address(bytes(TENSOR_MAP_BYTES), 0x10000)
    with pytest.raises(CudaError):
        tm.emulated_replace_address(tm.emulated(req()), 0x10008)
