"""Fixtures of the libvcuda/libvnvml tests."""
from __future__ import annotations

from pathlib import Path

import pytest

import pyvgpu


@pytest.fixture(scope="session")
def lib_dir() -> Path:
    """The directory `pyvgpu run` puts on LD_LIBRARY_PATH (libcuda.so.1, libnvidia-ml.so.1, ...)."""
    return pyvgpu.lib_dir()
