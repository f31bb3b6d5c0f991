"""The PTX ISA's predefined identifiers: every special register (read-only, per thread) with its type, and the
predefined constant WARP_SZ.

The parser turns WARP_SZ into the immediate 32; the code generator reads special registers through
ChunkAPI.special, which returns a lane vector of the register's type here (runtime/special.py computes them).
Values on the emulated sm_75 device (no clusters, no performance counters, no driver environment registers):
every CTA is a cluster of one (%clusterid = %ctaid, %cluster_ctaid = 0, %cluster_nctaid = 1, ranks 0 of 1,
%is_explicit_cluster false), %pm* are 0, %envreg* 0 but for %envreg1:%envreg2 of a cooperative launch (the grid
workspace's address, runtime/special.py), no shared memory is reserved (%reserved_smem_offset_* 0),
%aggr_smem_size = %total_smem_size, %current_graph_exec 0.
"""
from __future__ import annotations

WARP_SZ = 32


def _xyz(name: str, t: str = "u32") -> dict[str, str]:
    return {f"%{name}.{axis}": t for axis in "xyz"}


SPECIAL_REGISTERS: dict[str, str] = {
    **_xyz("tid"), **_xyz("ntid"), **_xyz("ctaid"), **_xyz("nctaid"),
    **_xyz("clusterid"), **_xyz("nclusterid"), **_xyz("cluster_ctaid"), **_xyz("cluster_nctaid"),
    "%cluster_ctarank": "u32", "%cluster_nctarank": "u32", "%is_explicit_cluster": "pred",
    "%laneid": "u32", "%warpid": "u32", "%nwarpid": "u32", "%smid": "u32", "%nsmid": "u32", "%gridid": "u64",
    "%lanemask_eq": "u32", "%lanemask_le": "u32", "%lanemask_lt": "u32", "%lanemask_ge": "u32",
    "%lanemask_gt": "u32",
    "%clock": "u32", "%clock_hi": "u32", "%clock64": "u64",
    "%globaltimer": "u64", "%globaltimer_lo": "u32", "%globaltimer_hi": "u32",
    "%total_smem_size": "u32", "%aggr_smem_size": "u32", "%dynamic_smem_size": "u32",
    "%reserved_smem_offset_begin": "u32", "%reserved_smem_offset_end": "u32", "%reserved_smem_offset_cap": "u32",
    "%reserved_smem_offset_0": "u32", "%reserved_smem_offset_1": "u32",
    "%current_graph_exec": "u64",
    **{f"%pm{i}": "u32" for i in range(8)}, **{f"%pm{i}_64": "u64" for i in range(8)},
    **{f"%envreg{i}": "u32" for i in range(32)},
}

# Registers that change while a thread runs: read at every use, never cached.
CLOCKS = frozenset({"%clock", "%clock_hi", "%clock64", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi"})
