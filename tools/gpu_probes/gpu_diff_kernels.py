"""Differential check (real-GPU check): the kernels of diff_kernels.cu on the emulated GPU and on the real one, through
pyvgpu, compared bit for bit group by group (docs/gpu-check.md: PYVGPU_GPU_CHECK_EMU / _HOSTS name the two daemons).
Exit 0 when every group is identical, 1 when one differs (the summary names each and its first differing result)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import NVCC, cached_build  # noqa: E402

SRC = HERE / "diff_kernels.cu"
ITEM = {"f64_arith": 8}          # result width in bytes per group (4 otherwise)


def build(timeout: float | None = 300) -> Path:
    """diff_kernels, nvcc -cudart shared -O3 (cached; tools/gpu_check.py builds it ahead of its stage)."""
    return cached_build(ROOT / "build" / "gpu-check" / "programs", "diff_kernels", [SRC],
                        lambda o: [NVCC, "-cudart", "shared", "-O3", "-o", str(o), str(SRC)], timeout=timeout)


def run(prog: Path, hosts: str, out: Path, timeout: float) -> list[tuple[str, bytes]]:
    """The program through `pyvgpu run --hosts HOSTS`; → [(group, its raw results)]."""
    proc = subprocess.run([sys.executable, "-m", "pyvgpu.cli", "run", "--hosts", hosts, "--", str(prog), str(out)],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"diff_kernels against {hosts} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    data = out.read_bytes()
    groups, pos = [], 0
    for line in proc.stdout.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "group":
            size = int(words[2])
            groups.append((words[1], data[pos:pos + size]))
            pos += size
    return groups


def first_difference(name: str, emu: bytes, gpu: bytes) -> str:
    width = ITEM.get(name, 4)
    diffs = [i for i in range(0, min(len(emu), len(gpu)), width) if emu[i:i + width] != gpu[i:i + width]]
    if not diffs:
        return f"{name}: lengths {len(emu)} / {len(gpu)}"
    i = diffs[0]
    emu_v = int.from_bytes(emu[i:i + width], "little")
    gpu_v = int.from_bytes(gpu[i:i + width], "little")
    return (f"{name}: {len(diffs)} of {len(emu) // width} differ, first #{i // width}: "
            f"emu 0x{emu_v:0{2 * width}x} gpu 0x{gpu_v:0{2 * width}x}")


def main() -> int:
    gpu, emu = os.environ["PYVGPU_GPU_CHECK_HOSTS"], os.environ["PYVGPU_GPU_CHECK_EMU"]
    out = Path(os.environ.get("PYVGPU_GPU_CHECK_OUT", "."))
    t0 = time.monotonic()
    budget = float(os.environ.get("PYVGPU_GPU_CHECK_SECONDS", "120"))
    prog = build(timeout=budget / 2)
    left = lambda: max(5.0, budget - (time.monotonic() - t0))   # noqa: E731
    on_gpu = run(prog, gpu, out / "gpu.bin", left() / 2)
    on_emu = run(prog, emu, out / "emu.bin", left())
    if [n for n, _ in on_gpu] != [n for n, _ in on_emu]:
        print(f"kernels: different groups: gpu {[n for n, _ in on_gpu]} emu {[n for n, _ in on_emu]}")
        return 1
    differ = [first_difference(n, e, g) for (n, g), (_, e) in zip(on_gpu, on_emu) if g != e]
    for (n, g), (_, e) in zip(on_gpu, on_emu):
        print(f"{n}: {'identical' if g == e else 'DIFFERENT'} ({len(g)} bytes)")
    same = len(on_gpu) - len(differ)
    print(f"kernels: {same} of {len(on_gpu)} groups bit-identical" + (f"; {'; '.join(differ)}" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
