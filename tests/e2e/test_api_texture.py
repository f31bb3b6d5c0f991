"""CUDA arrays, texture and surface objects through libvcudart on the emulated GPU (tests/cuda/api_texture.cu, whose
host reference implements the CUDA Programming Guide's sampling rules): copies of every form, fetches with every
filter/address/read mode and geometry, surfaces and their boundary modes, graphs with array copies; and a surface read
outside its surface with cudaBoundaryModeTrap is a sticky cudaErrorIllegalAddress."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.chain


def test_arrays_textures_surfaces(cuda_build, daemon, run):
    proc = run(cuda_build("api_texture.cu"), [daemon], timeout=600)
    assert re.search(r"^OK \d+$", proc.stdout, re.M), proc.stdout + proc.stderr


def test_surface_trap(cuda_build, daemon, run):
    proc = run(cuda_build("api_texture.cu"), [daemon], "trap", timeout=600)
    assert "trap cudaErrorIllegalAddress" in proc.stdout, proc.stdout + proc.stderr
    if daemon.backend != "cuda":
        # the emulator says which access it refused; a GPU's driver says only the CUDA error
        assert "surface access of 4 B" in daemon.log_text()
