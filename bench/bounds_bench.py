"""Measured bounds of issue 11: what a hostile or careless peer can make the daemon spend, and how long waits last.

    python bench/bounds_bench.py

Starts emulated-GPU daemons on loopback (tests/harness.py), attacks them as tests/security does, and prints one
line per case: the daemon's resident-memory growth (VmRSS) or the time until the bound took effect, and what TLS
costs on loopback. The tests assert the bounds; this prints the numbers behind docs/security.md's table.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "daemon"), str(ROOT)]

import zstandard  # noqa: E402

from harness import CUDA_SRC, build_cuda, frame, interposer_env, raw_session, rss, start_daemon  # noqa: E402
from pyvgpu import wire  # noqa: E402
from pyvgpu.client import Client  # noqa: E402
from pyvgpu.protocol import OP_BY_NAME  # noqa: E402

MiB = 1 << 20


def op_frame(op: str, req_id: int, *args, payload_len: int = 0) -> bytes:
    return frame([OP_BY_NAME[op].code, req_id, payload_len, *args])


def report(case: str, value: str, note: str = "") -> None:
    print(f"{case:<52} {value:>14}  {note}", flush=True)


def grown(pid: int, before: int) -> str:
    return f"+{(rss(pid) - before) / MiB:.0f} MiB"


def memory_cases(work: Path) -> None:
    d = start_daemon(work, "--emu-memory", "1G")
    pid = d.proc.pid
    try:
        socks = []
        time.sleep(0.3)
        before = rss(pid)
        for _ in range(4):
            s = raw_session(d.port)
            s.sendall(op_frame("MEMCPY_HTOD", 0, 0, 0, 0, payload_len=512 * MiB) + b"x" * 1024)
            socks.append(s)
        time.sleep(1.0)
        report("4 sessions announce 512 MiB payloads, send 1 KiB", grown(pid, before))
        for s in socks:
            s.close()

        c = Client.connect("127.0.0.1", d.port)
        ptr = c.call("MALLOC", 0, 16 * MiB)[1]
        c.call("MEMSET", 0, ptr, 1, 16 * MiB, 0)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        time.sleep(0.3)
        before = rss(pid)
        c.sock.sendall(b"".join(op_frame("MEMCPY_DTOH", 100 + i, 0, ptr, 16 * MiB, 0) for i in range(64)))
        time.sleep(3.0)
        report("64 x 16 MiB device-to-host replies never read", grown(pid, before), "(reply bound 64 MiB)")
        c.close(goodbye=False)
        time.sleep(1.0)

        with Client.connect("127.0.0.1", d.port) as c:
            before = rss(pid)
            for _ in range(3):
                ptrs = [c.call("MALLOC", 0, 256 * MiB)[1] for _ in range(3)]
                for p in ptrs:
                    c.call("MEMSET", 0, p, 1, 256 * MiB, 0)
                peak = rss(pid)
                for p in ptrs:
                    c.call("FREE", 0, p)
            report("3 x (768 MiB touched, then freed), 1 GiB device", grown(pid, before),
                   f"(peak +{(peak - before) / MiB:.0f} MiB)")

            head = ".version 8.0\n.target sm_75\n.address_size 64\n"
            depth = 11
            funcs = "".join(f".func f{i}()\n{{\n" + f"call f{i + 1};\n" * 4 + "ret;\n}\n" for i in range(depth))
            images = {
                "PTX .reg .b64 %rd<2000000000>": (head + ".visible .entry k() {\n.reg .b64 %rd<2000000000>;\nret;\n}\n"
                                                  ).encode(),
                "PTX .func inlining bomb (4^11 copies)": (head + funcs + f".func f{depth}()\n{{\nret;\n}}\n"
                                                          ".visible .entry k() {\ncall f0;\nret;\n}\n").encode(),
                "fatbin: 64 KiB zstd frame claiming 2 GiB": zstd_bomb(),
            }
            for name, image in images.items():
                before = rss(pid)
                t0 = time.monotonic()
                err = c.call("MODULE_LOAD", 0, 1, payload=image)[0]
                report(name, grown(pid, before), f"error {err} after {time.monotonic() - t0:.2f} s")

            # PTX held per session and device (PYVGPU_EMU_MAX_CODE_BYTES, 256 MiB): 20 MiB modules until refused
            body = "".join(f"add.s32 %r{k % 8 + 1}, %r{k % 8}, {k};\n" for k in range(2000))
            kernels = "".join(f".visible .entry k{i}(.param .u64 p)\n{{\n.reg .b32 %r<9>;\n{body}ret;\n}}\n"
                              for i in range(20 * MiB // len(body)))
            image = (head + kernels).encode()
            before = rss(pid)
            t0 = time.monotonic()
            loaded = 0
            while loaded < 64:
                err = c.call("MODULE_LOAD", 0, 10 + loaded, payload=image)[0]
                if err:
                    break
                loaded += 1
            report(f"{len(image) / MiB:.0f} MiB PTX modules loaded until refused", grown(pid, before),
                   f"{loaded} loaded ({(time.monotonic() - t0) / max(loaded, 1):.1f} s each), then error {err}")
    finally:
        d.stop()


def zstd_bomb() -> bytes:
    import struct
    payload = zstandard.ZstdCompressor(level=3).compress(bytes(2 << 30))
    entry = bytearray(64)
    struct.pack_into("<HHIQ", entry, 0, 1, 0x101, 64, len(payload))
    struct.pack_into("<I", entry, 16, len(payload))
    struct.pack_into("<I", entry, 28, 75)
    struct.pack_into("<Q", entry, 40, 0x8000)
    struct.pack_into("<Q", entry, 56, 2 << 30)
    body = bytes(entry) + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def wait_cases(work: Path) -> None:
    harden = build_cuda(CUDA_SRC / "harden.cu")
    faults = build_cuda(CUDA_SRC / "api_faults.cu")
    d = start_daemon(work)
    try:
        env = {**os.environ, **interposer_env([d]), "PYVGPU_REPLY_TIMEOUT_MS": "2000"}
        proc = subprocess.Popen([str(faults), "lost"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        proc.stdout.readline()
        time.sleep(0.5)
        d.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        out, _ = proc.communicate(timeout=120)
        report("SIGSTOPped daemon: call fails after", f"{time.monotonic() - t0:.2f} s",
               f"(PYVGPU_REPLY_TIMEOUT_MS=2000; {out.split()[1] if 'LOST' in out else out!r})")
        d.proc.send_signal(signal.SIGCONT)

        t0 = time.monotonic()
        out = subprocess.run([str(harden), "printf", str(MiB)], capture_output=True, timeout=300, env=env)
        report("kernel printing 1 MiB (the default FIFO): sync", f"{time.monotonic() - t0:.2f} s",
               f"({len(out.stdout)} bytes delivered)")
    finally:
        d.stop()
    d = start_daemon(work, env={"PYVGPU_EMU_MAX_SECONDS": "2"})
    try:
        env = {**os.environ, **interposer_env([d])}
        out = subprocess.run([str(harden), "grid"], capture_output=True, text=True, timeout=300, env=env)
        m = re.search(r"^SYNC (\w+) (\d+)$", out.stderr, re.M)
        report("empty kernel on the largest grid, 2 s limit", f"{int(m.group(2)) / 1000:.2f} s" if m else "?",
               m.group(1) if m else out.stderr[-200:])
    finally:
        d.stop()
    d = start_daemon(work, "--emu-slowdown", "100000")
    try:
        proc = subprocess.Popen([str(harden), "long"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, **interposer_env([d])})
        proc.stdout.readline()
        time.sleep(0.5)
        proc.kill()
        proc.wait()
        t0 = time.monotonic()
        with Client.connect("127.0.0.1", d.port) as c:
            while any(not s["self"] for s in c.status()["sessions"]) and time.monotonic() - t0 < 60:
                time.sleep(0.01)
        report("client killed during a minutes-long kernel: ended", f"{time.monotonic() - t0:.2f} s")
    finally:
        d.stop()
    d = start_daemon(work, "--idle-timeout", "1", "--frame-timeout", "1")
    try:
        s = raw_session(d.port)
        t0 = time.monotonic()
        s.settimeout(30)
        rep, _, _ = wire.recv_reply(s)
        report("silent session, --idle-timeout 1: ended after", f"{time.monotonic() - t0:.2f} s", rep.result)
    finally:
        d.stop()


def emulator_cases() -> None:
    from pyvgpu_daemon.backends.emu import EmuBackend
    from pyvgpu_daemon.emu.limits import EmuLimits
    from pyvgpu_daemon.emu.memory import DeviceMemory
    from pyvgpu_daemon.emu.module import EmuModule
    from pyvgpu_daemon.errors import CudaError

    body = "\n".join(f"    div.rn.f32 %f{1 + k % 30}, %f{1 + k % 30}, %f0;" for k in range(2000))
    ptx = (".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry slow() {\n.reg .f32 %f<32>;\n"
           ".reg .b32 %r<4>;\n.reg .pred %p<2>;\nmov.f32 %f0, 0f3F800000;\nmov.u32 %r1, 0;\nLOOP:\n" + body +
           "\nadd.u32 %r1, %r1, 1;\nsetp.lt.u32 %p1, %r1, 1000000;\n@%p1 bra LOOP;\nret;\n}\n")
    m = EmuModule.load(ptx.encode(), DeviceMemory(1 << 40, MiB), limits=EmuLimits(max_seconds=0.3))
    t0 = time.monotonic()
    try:
        m.launch("slow", (64, 1, 1), (1024, 1, 1), 0, b"")
    except CudaError:
        pass
    report("kernel with slow scheduler steps, 0.3 s limit", f"{time.monotonic() - t0:.2f} s")
    ctx = EmuBackend(memory=1 << 30).open_context(0, 1 << 40, 1)
    p = ctx.malloc(16 * MiB)
    t0 = time.process_time()
    ctx.memset2d(p, 2, 7, 1, 8 * MiB, None)
    report("cudaMemset2D of 8 M one-byte rows (CPU)", f"{time.process_time() - t0:.3f} s")


def tls_cost(work: Path) -> None:
    """What TLS costs on loopback: 16 MiB pageable copies, plain and TLS daemons side by side (medians)."""
    import statistics
    sys.path.insert(0, str(ROOT / "bench"))
    from remoting_bench import build
    from pyvgpu.tls import make_self_signed
    bw, _ = build()
    fp = make_self_signed(work / "c.pem", work / "k.pem", ["127.0.0.1"])
    plain = start_daemon(work)
    tls = start_daemon(work, "--tls-cert", str(work / "c.pem"), "--tls-key", str(work / "k.pem"))
    try:
        for kind in ("h2d", "d2h"):
            rates: dict[str, list[float]] = {"plain": [], "tls": []}
            for _ in range(3):
                for name, d, extra in (("plain", plain, {}), ("tls", tls, {"PYVGPU_TLS_FINGERPRINT": fp})):
                    out = subprocess.run([str(bw), "bw", kind, "pageable", str(16 * MiB), "8"], capture_output=True,
                                         text=True, timeout=300, env={**os.environ, **interposer_env([d]), **extra})
                    rates[name].append(16 * MiB / statistics.median(float(x) for x in out.stdout.split()[1:]))
            report(f"16 MiB {kind} copies over TLS (plain TCP)", f"{statistics.median(rates['tls']):.2f} GB/s",
                   f"({statistics.median(rates['plain']):.2f} GB/s)")
    finally:
        plain.stop()
        tls.stop()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        print(f"{'case':<52} {'measured':>14}  note")
        memory_cases(work)
        wait_cases(work)
        emulator_cases()
        tls_cost(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
