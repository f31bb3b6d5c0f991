"""Loading a large framework module on the emulated GPU: time and host memory of the load, and what the first
launch of one of its kernels costs.

    python bench/emu_load_bench.py [--image PATH] [--baseline DIR] [--json OUT]

The module is CuPy's prebuilt CUB module (cupy-cuda13x: the fatbin inside `cupy/cuda/cub*.so`, PTX for compute_120
only, 21 MB, 383 kernels) unless --image names another file (a fatbin, PTX text, or a shared object whose largest
embedded fatbin is taken). Each tree runs in a fresh process of its own, directly through `EmuModule` (no daemon):
this tree, and with --baseline another checkout (e.g. `git archive 49be270 | tar -x -C /tmp/emu-eager`, the eager
loader), run in the same invocation. The baseline gets PYVGPU_EMU_MAX_PTX_BYTES raised to 1 GiB (its default bound
refuses the module); this tree runs with its defaults.

Per tree: load seconds; host memory the process holds after the load and its peak during it (RSS above what it had
before, MiB); then the first launch of `cub::EmptyKernel` (1 thread), and the first use of the median-size and of
the largest kernel (translation and bytecode: what their first launch costs before running; the eager loader paid
the translation at load, so its figure is the bytecode alone).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTAINER_MAGIC = 0xBA55ED50

CHILD = r"""
import json, resource, sys, time
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
from pyvgpu_daemon.emu.memory import DeviceMemory
from pyvgpu_daemon.emu.module import EmuModule
image = open(sys.argv[1], "rb").read()
mem = DeviceMemory(1 << 40, 1 << 30)
r0 = rss()
t = time.perf_counter()
m = EmuModule.load(image, mem)
out = {"load_s": time.perf_counter() - t, "held_mib": rss() - r0,
       "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - r0, "kernels": len(m.kernels)}
empty = [n for n in m.kernels if "EmptyKernel" in n]
if empty:
    t = time.perf_counter()
    m.launch(empty[0], (1, 1, 1), (1, 1, 1), 0, b"")
    out["empty_first_launch_s"] = time.perf_counter() - t
lazy = hasattr(m, "kernel")
size = (lambda n: m.index.scans[n].statements) if lazy else (lambda n: len(m.ptx.functions[n].body))
names = sorted(m.kernels, key=size)
for what, name in (("median", names[len(names) // 2]), ("largest", names[-1])):
    t = time.perf_counter()
    k = m.kernel(name) if lazy else m._compiled[name]
    k.make
    out[what + "_first_use_s"] = time.perf_counter() - t
    out[what + "_instructions"] = size(name)
out["held_after_mib"] = rss() - r0
print(json.dumps(out))
"""


def cupy_cub() -> Path:
    spec = importlib.util.find_spec("cupy")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("cupy is not installed (pip install cupy-cuda13x), and no --image was given")
    found = sorted(Path(spec.submodule_search_locations[0], "cuda").glob("cub*.so"))
    if not found:
        sys.exit("no cupy/cuda/cub*.so in the installed cupy")
    return found[0]


def largest_fatbin(blob: bytes) -> bytes:
    """The biggest fatbin container embedded in a shared object (containers: magic, version, header size, size)."""
    best = b""
    pos = blob.find(struct.pack("<I", CONTAINER_MAGIC))
    while pos >= 0:
        _magic, _version, hsize, psize = struct.unpack_from("<IHHQ", blob, pos)
        end = pos + hsize + psize
        if end <= len(blob) and end - pos > len(best):
            best = blob[pos:end]
        pos = blob.find(struct.pack("<I", CONTAINER_MAGIC), max(end, pos + 4))
    if not best:
        sys.exit("no fatbin in that file")
    return best


def run(tree: Path, image: Path, env_extra: dict[str, str]) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{tree}:{tree / 'daemon'}", **env_extra)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(image)], env=env, capture_output=True, text=True)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", type=Path, help="fatbin, PTX or shared object (default: CuPy's CUB module)")
    ap.add_argument("--baseline", type=Path, help="another tree (the eager loader) to run in the same invocation")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    src = args.image or cupy_cub()
    blob = src.read_bytes()
    image = Path("/tmp") / f"emu_load_bench_{os.getpid()}.bin"
    image.write_bytes(largest_fatbin(blob) if blob[:4] == b"\x7fELF" else blob)
    try:
        results = {}
        if args.baseline:
            results["baseline"] = run(args.baseline.resolve(), image, {"PYVGPU_EMU_MAX_PTX_BYTES": str(1 << 30)})
        results["this tree"] = run(ROOT, image, {})
    finally:
        image.unlink()
    print(f"module: {src} ({len(blob)} bytes)")
    cols = [("load_s", "load s", "{:.2f}"), ("held_mib", "held MiB", "{:.0f}"), ("peak_mib", "peak MiB", "{:.0f}"),
            ("empty_first_launch_s", "EmptyKernel 1st launch s", "{:.3f}"),
            ("median_first_use_s", "median kernel 1st use s", "{:.2f}"),
            ("largest_first_use_s", "largest kernel 1st use s", "{:.2f}"),
            ("held_after_mib", "held after MiB", "{:.0f}")]
    print("| tree | " + " | ".join(c[1] for c in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for tree, r in results.items():
        if "error" in r:
            print(f"| {tree} | {r['error']} |")
            continue
        print(f"| {tree} | " + " | ".join(f.format(r[k]) if k in r else "" for k, _, f in cols) + " |")
    for tree, r in results.items():
        if "median_instructions" in r:
            print(f"{tree}: {r['kernels']} kernels; median kernel {r['median_instructions']} instructions, largest "
                  f"{r['largest_instructions']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
