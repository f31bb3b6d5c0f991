"""The daemon's memory for one session at the bound of each kind of object (issue 21, part 4; daemon kinds.py).

    python bench/kinds_bench.py [kind ...]        # default: every kind

For each kind: a fresh emulated-GPU daemon on loopback (tests/harness.py), one session that creates objects of the
kind as fast as the protocol allows (pipelined) until one past its bound, and the daemon's resident-memory growth
(VmRSS) at the bound. Prints one line per kind: bound, objects accepted, the error past the bound, growth, time.
These are the figures of docs/security.md's table of kinds.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "daemon"), str(ROOT)]

from harness import PUT_PTX, pipelined, rss, start_daemon  # noqa: E402
from pyvgpu import wire  # noqa: E402
from pyvgpu.client import Client  # noqa: E402
from pyvgpu.protocol import ERROR_NAMES, OP_BY_NAME  # noqa: E402
from pyvgpu_daemon import kinds  # noqa: E402

MiB = 1 << 20
ARRAY_ARGS = (0, 8, 0, 0, 0, 1, 16, 0, 0, 2)           # 16 unsigned bytes, 1D, surface load/store


def tex_args(array: int) -> tuple:
    return (0, 0, array, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0)


def graph_node(c: Client) -> bytes:
    ptr = c.call("MALLOC", 0, 256)[1]
    return b"".join(bytes(p) for p in wire.encode_request(OP_BY_NAME["MEMSET"].code, 0, [0, ptr, 7, 256, 0], b""))


def one_array(c: Client) -> int:
    return c.call("ARRAY_CREATE", *ARRAY_ARGS)[1]


# kind -> (op, arguments (a tuple, or a function of the index), payload) given a connected client
Case = Callable[[Client], tuple[str, object, bytes]]
CASES: dict[str, tuple[kinds.Kind, Case]] = {
    "allocation": (kinds.ALLOCATION, lambda c: ("MALLOC", (0, 1), b"")),
    "stream": (kinds.STREAM, lambda c: ("STREAM_CREATE", (0, 0, 0), b"")),
    "event": (kinds.EVENT, lambda c: ("EVENT_CREATE", (0, 0), b"")),
    "module": (kinds.MODULE, lambda c: ("MODULE_LOAD", lambda i: (0, 1 + i), PUT_PTX)),
    "array": (kinds.ARRAY, lambda c: ("ARRAY_CREATE", ARRAY_ARGS, b"")),
    "texture": (kinds.TEXTURE, lambda c: ("TEX_CREATE", tex_args(one_array(c)), b"")),
    "surface": (kinds.SURFACE, lambda c: ("SURF_CREATE", (0, one_array(c)), b"")),
    "graph": (kinds.GRAPH, lambda c: ("GRAPH_CREATE", (0,), graph_node(c))),
    "blas": (kinds.BLAS_HANDLE, lambda c: ("BLAS_CREATE", (0,), b"")),
}


def measure(work: Path, name: str) -> None:
    kind, case = CASES[name]
    d = start_daemon(work)
    try:
        with Client.connect("127.0.0.1", d.port) as c:
            op, args, payload = case(c)
            time.sleep(0.3)
            before = rss(d.proc.pid)
            t0 = time.monotonic()
            results = pipelined(c, op, args, kind.bound + 1, payload)
            took = time.monotonic() - t0
            ok = sum(1 for e, _ in results if e == 0)
            past = ERROR_NAMES.get(results[-1][0], str(results[-1][0]))
            print(f"{kind.name:<16} bound {kind.bound:>8}  accepted {ok:>8}  past it: {past:<26} "
                  f"+{(rss(d.proc.pid) - before) / MiB:6.1f} MiB  {took:6.1f} s", flush=True)
    finally:
        d.stop()


def main() -> None:
    names = sys.argv[1:] or list(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            measure(Path(tmp), name)


if __name__ == "__main__":
    main()
