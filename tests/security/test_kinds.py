"""Every kind of object a session can make the daemon hold is bounded (issue 21, part 4; kinds.py).

Before, CUDA arrays, texture and surface objects and graphs were counted by nothing: one client made 300,000 arrays
(+297 MB of daemon memory), 300,000 texture objects (+306 MB) or 200,000 graphs (+105 MB), all accepted. Now a
session that creates them in a loop meets each kind's bound as cudaErrorMemoryAllocation (CUDA's error for running
out of a resource), the daemon logs it once naming the session, device, kind and bound, its memory stays within the
figure docs/security.md gives, and another session is served all the while. Session end and cudaDeviceReset share
one teardown: after either, everything is destroyed and the bound is free again.
"""
from __future__ import annotations

import time

from harness import pipelined, rss
from pyvgpu import wire
from pyvgpu.client import Client
from pyvgpu.protocol import ERROR_CODES, OP_BY_NAME
from pyvgpu_daemon.kinds import ARRAY, GRAPH, SURFACE, TEXTURE

OOM = ERROR_CODES["cudaErrorMemoryAllocation"]
# docs/security.md: a session at the bounds of arrays, texture objects and graphs (one small node each) costs the
# daemon < 32 MiB (measured ~12 MiB; bench/kinds_bench.py); the assertion leaves room for allocator noise.
MAX_GROWTH = 48 << 20
UNSIGNED = 1                                  # cudaChannelFormatKindUnsigned
ARRAY_ARGS = (0, 8, 0, 0, 0, UNSIGNED, 16, 0, 0, 2)       # 16 bytes, 1D, surface load/store allowed


def tex_args(array: int) -> tuple:
    # cudaResourceTypeArray, clamp, point filtering, element reads, unnormalized coordinates, no border
    return (0, 0, array, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0)


def at_bound(results: list[tuple[int, int]], bound: int) -> list[int]:
    """The first `bound` succeeded, every later one (if any) is cudaErrorMemoryAllocation → the handles made."""
    errs = [e for e, _ in results]
    assert errs[:bound] == [0] * bound, f"refused before the bound: first error {next(e for e in errs if e)}"
    assert set(errs[bound:]) <= {OOM}, f"past the bound: {set(errs[bound:])}"
    return [r for _, r in results[:bound]]


def test_arrays_textures_graphs_stop_at_their_bounds_while_others_are_served(daemon):
    victim = Client.connect("127.0.0.1", daemon.port)
    vptr = victim.call("MALLOC", 0, 4096)[1]
    victim.call("MEMCPY_HTOD", 0, vptr, 0, payload=b"v" * 4096)
    served = 0

    def serve_victim() -> None:
        nonlocal served
        t0 = time.monotonic()
        err, _, data = victim.call("MEMCPY_DTOH", 0, vptr, 4096, 0)
        assert (err, data) == (0, b"v" * 4096) and time.monotonic() - t0 < 5
        served += 1

    c = Client.connect("127.0.0.1", daemon.port)
    me = next(s["id"] for s in c.status()["sessions"] if s["self"])
    ptr = c.call("MALLOC", 0, 256)[1]
    node = b"".join(bytes(p) for p in wire.encode_request(OP_BY_NAME["MEMSET"].code, 0, [0, ptr, 7, 256, 0], b""))
    time.sleep(0.3)
    before = rss(daemon.proc.pid)

    arrays = at_bound(pipelined(c, "ARRAY_CREATE", ARRAY_ARGS, ARRAY.bound + 50, b"", serve_victim), ARRAY.bound)
    at_bound(pipelined(c, "TEX_CREATE", tex_args(arrays[0]), TEXTURE.bound + 50, b"", serve_victim), TEXTURE.bound)
    at_bound(pipelined(c, "GRAPH_CREATE", (0,), GRAPH.bound + 50, node, serve_victim), GRAPH.bound)
    grown = rss(daemon.proc.pid) - before
    assert grown < MAX_GROWTH, f"the daemon grew {grown >> 20} MiB for a session at its bounds"
    assert served >= 3 * (ARRAY.bound // 1024)

    dev = next(s for s in c.status()["sessions"] if s["self"])["devices"][0]
    assert (dev["arrays"], dev["textures"], dev["graphs"]) == (ARRAY.bound, TEXTURE.bound, GRAPH.bound)
    log = daemon.log_text()
    for kind in (ARRAY, TEXTURE, GRAPH):
        line = f"session {me} dev 0: {kind.bound} live {kind.name}s: the bound per session and device ({kind.bound})"
        assert log.count(line) == 1, f"expected one log line {line!r}"
    c.close()
    victim.close()


def test_device_reset_and_session_end_destroy_every_kind(daemon):
    c = Client.connect("127.0.0.1", daemon.port)
    free0 = c.call("MEM_GET_INFO", 0)[1][0]
    fill = SURFACE.bound
    for _ in range(2):                       # the bound is free again after the reset
        arrays = at_bound(pipelined(c, "ARRAY_CREATE", ARRAY_ARGS, 64, b""), 64)
        at_bound(pipelined(c, "SURF_CREATE", (0, arrays[0]), fill + 10, b""), fill)
        stream = c.call("STREAM_CREATE", 0, 0, 0)[1]
        assert c.call("MEM_GET_INFO", 0)[1][0] < free0          # the arrays hold device memory
        assert c.call("DEVICE_RESET", 0)[0] == 0
        assert c.call("MEM_GET_INFO", 0)[1][0] == free0          # ... given back by the teardown
        assert c.call("STREAM_SYNC", 0, stream)[0] == ERROR_CODES["cudaErrorInvalidResourceHandle"]
        dev = next(s for s in c.status()["sessions"] if s["self"])["devices"][0]
        assert (dev["arrays"], dev["textures"], dev["streams"]) == (0, 0, 0)
    at_bound(pipelined(c, "ARRAY_CREATE", ARRAY_ARGS, 64, b""), 64)
    c.close()
    with Client.connect("127.0.0.1", daemon.port) as other:       # the session's end gave its memory back too
        deadline = time.monotonic() + 10
        while other.call("MEM_GET_INFO", 0)[1][0] != free0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert other.call("MEM_GET_INFO", 0)[1][0] == free0
