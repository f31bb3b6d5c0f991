"""Differential check (real-GPU check): the kernels of diff_kernels.cu on the emulated GPU and on the real one, through
pyvgpu, compared group by group (docs/gpu-check.md: PYVGPU_GPU_CHECK_EMU / _HOSTS name the two daemons): bit for bit,
except the slots whose results NVIDIA documents only within an error bound (isa_bounds.py): there both devices must be
within the bound of a float64 reference, with the ISA's special inputs bit for bit and canonical NaNs.
Exit 0 when every group passes, 1 otherwise; the summary names each failing group and its first failure, and
diff_kernels.json (in PYVGPU_GPU_CHECK_OUT) holds every slot's counts and first failures, and diff_kernels_all.json
every differing result of each group (up to ALL_CAP: [index, emu, gpu] in hex), so a rule can be checked against
all of a run's data, not only the first failures."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(HERE)]

import isa_bounds  # noqa: E402
from harness import NVCC, cached_build  # noqa: E402

SRC = HERE / "diff_kernels.cu"
ALL_CAP = 20000          # differing results kept per group in diff_kernels_all.json


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


def compare(on_gpu: list[tuple[str, bytes]], on_emu: list[tuple[str, bytes]]) -> tuple[list[str], dict, bool]:
    """(one line per group, the JSON report, whether everything passed)."""
    if [n for n, _ in on_gpu] != [n for n, _ in on_emu]:
        return [f"kernels: different groups: gpu {[n for n, _ in on_gpu]} emu {[n for n, _ in on_emu]}"], {}, False
    emu = dict(on_emu)
    gpu = dict(on_gpu)
    inputs = {n: np.frombuffer(b, np.uint64 if "f64" in n else np.uint32) for n, b in on_emu if n.startswith("input_")}
    lines, report, ok = [], {}, True
    same = within = 0
    firsts = []
    names = [n for n, _ in on_emu if not n.startswith("input_")]
    for n in inputs:
        if emu[n] != gpu[n]:
            lines.append(f"{n}: inputs DIFFER")
            ok = False
    for n in names:
        gc = isa_bounds.check_group(n, emu[n], gpu[n], inputs)
        report[n] = [vars(s) for s in gc.slots]
        if gc.identical:
            same += 1
            lines.append(f"{n}: identical ({len(gpu[n])} bytes)")
        elif gc.passed:
            within += 1
            counts = ", ".join(f"{s.name} {s.identical}/{s.n} identical" for s in gc.slots if s.identical < s.n)
            lines.append(f"{n}: within the ISA's bounds ({counts})")
        else:
            ok = False
            lines.append(f"{n}: DIFFERENT ({gc.first_failure()})")
            firsts.append(gc.first_failure())
    summary = f"kernels: {same} of {len(names)} groups bit-identical"
    if within:
        summary += f", {within} within the ISA's error bounds"
    if firsts:
        summary += f"; {'; '.join(firsts)}"
    return lines + [summary], report, ok


def all_differences(on_gpu: list[tuple[str, bytes]], on_emu: list[tuple[str, bytes]]) -> dict:
    """{group: {"n": results, "differ": count, "first": [[index, emu hex, gpu hex], ...]}} for each group that
    differs anywhere (raw words, whatever the group's bounds allow)."""
    gpu = dict(on_gpu)
    out = {}
    for name, eb in on_emu:
        gb = gpu.get(name, b"")
        if eb == gb or len(eb) != len(gb):
            continue
        ut = np.uint64 if isa_bounds.WIDTH.get(name, 4) == 8 else np.uint32
        e, g = np.frombuffer(eb, ut), np.frombuffer(gb, ut)
        idx = np.flatnonzero(e != g)
        w = 16 if ut is np.uint64 else 8
        out[name] = {"n": len(e), "differ": len(idx),
                     "first": [[int(i), f"{int(e[i]):0{w}x}", f"{int(g[i]):0{w}x}"] for i in idx[:ALL_CAP]]}
    return out


def main() -> int:
    gpu, emu = os.environ["PYVGPU_GPU_CHECK_HOSTS"], os.environ["PYVGPU_GPU_CHECK_EMU"]
    out = Path(os.environ.get("PYVGPU_GPU_CHECK_OUT", "."))
    t0 = time.monotonic()
    budget = float(os.environ.get("PYVGPU_GPU_CHECK_SECONDS", "120"))
    prog = build(timeout=budget / 2)
    left = max(5.0, budget - (time.monotonic() - t0))
    with ThreadPoolExecutor(2) as ex:          # both devices at once: the time is the slower one's
        gpu_run = ex.submit(run, prog, gpu, out / "gpu.bin", left)
        emu_run = ex.submit(run, prog, emu, out / "emu.bin", left)
        on_gpu, on_emu = gpu_run.result(), emu_run.result()
    if [n for n, _ in on_gpu] != [n for n, _ in on_emu]:
        print(f"kernels: different groups: gpu {[n for n, _ in on_gpu]} emu {[n for n, _ in on_emu]}")
        return 1
    lines, report, ok = compare(on_gpu, on_emu)
    (out / "diff_kernels.json").write_text(json.dumps(report, indent=1))
    (out / "diff_kernels_all.json").write_text(json.dumps(all_differences(on_gpu, on_emu)))
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
