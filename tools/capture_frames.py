"""Capture the request frames of CUDA test programs into tests/daemon/frames/ (the differential corpus of
tests/daemon/test_framepath.py): each program is built (tests/cuda, nvcc, cached under build/), run through the
interposer against an emulated daemon started with PYVGPU_DAEMON_CAPTURE, and each session's received bytes are kept,
zlib-compressed, as <program>[-<args>].frames.z. Run once when the corpus should change (it is kept small: programs
whose modules are small PTX):

    PYTHONPATH=$PWD:$PWD/daemon python tools/capture_frames.py [PROGRAM[:ARG,...] ...]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from harness import CUDA_SRC, build_cuda, run_cuda, start_daemon  # noqa: E402

from pyvgpu.protocol import ENV_DAEMON_CAPTURE  # noqa: E402

DEFAULT = ("wire_async.cu", "api_kernels.cu", "api_memory.cu:4096", "api_graph.cu", "api_device.cu", "emu_warp.cu")
OUT = ROOT / "tests" / "daemon" / "frames"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="*", default=list(DEFAULT), help="tests/cuda programs, ARGS after a colon")
    opts = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for item in opts.programs:
        name, _, args = item.partition(":")
        argv = [a for a in args.split(",") if a]
        program = build_cuda(CUDA_SRC / name)
        with tempfile.TemporaryDirectory() as tmp:
            capture = Path(tmp) / "capture"
            d = start_daemon(Path(tmp), env={ENV_DAEMON_CAPTURE: str(capture)})
            try:
                run_cuda(program, [d], *argv, timeout=600)
            finally:
                d.stop()
            sessions = [f for f in sorted(capture.glob("*.frames")) if f.stat().st_size]   # not the port probe
            stem = Path(name).stem + (f"-{'-'.join(argv)}" if argv else "")
            for i, f in enumerate(sessions):
                data = f.read_bytes()
                out = OUT / (f"{stem}.frames.z" if len(sessions) == 1 else f"{stem}-{i}.frames.z")
                out.write_bytes(zlib.compress(data, 9))
                print(f"{out.relative_to(ROOT)}: {len(data)} bytes received, {out.stat().st_size} kept")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
