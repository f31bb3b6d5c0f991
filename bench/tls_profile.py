"""Where the CPU of a TLS bulk copy goes, against the same copy over plain TCP (issue 22 part 4).

    python bench/tls_profile.py [--size BYTES] [--iters N] [--freq HZ] [--decrypt-paths]

For plain TCP and TLS, and each direction, one emulated-GPU daemon (`--compress off`; TLS with a self-signed
certificate pinned by the client) and the `bandwidth bw DIR pageable SIZE N` copies of remoting_bench.py, with
`perf record` on the daemon (-p) and on the client (the whole process). The samples are split by the library they
fall in (kernel; libcrypto + libssl: the cipher; libc: memmove/memset, the user-space copies; CPython and uvloop;
the rest) and reported as CPU nanoseconds per byte copied: (N + 2) × SIZE bytes (the N timed copies, the warm-up
and the first host-to-device copy), the same count as remoting_bench's --tls figures.

--decrypt-paths also measures, in this process, the receiver's CPU per byte of decrypting a TLS stream two ways:
an `ssl.SSLObject` fed through memory BIOs (what asyncio's and uvloop's TLS transports do) and an `ssl.SSLSocket`
reading the socket itself (`recv_into`: what a hand-written socket-BIO transport would do).

Needs `perf` (linux-tools) allowed to profile other processes (perf_event_paranoid ≤ 1, or root).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import interposer_env, start_daemon  # noqa: E402
import remoting_bench  # noqa: E402

# library name fragment -> column; first match wins, unmatched -> "other"
COLUMNS = (("kernel", "kernel"), ("libcrypto", "crypto"), ("libssl", "crypto"), ("libc.so", "libc copies"),
           ("python", "python"), ("loop.cpython", "python"), ("_asyncio", "python"), ("_ssl.cpython", "python"),
           ("msgpack", "python"))
NAMES = ("kernel", "crypto", "libc copies", "python", "other")


def split(data: Path) -> dict[str, int]:
    """perf samples of a recording by column."""
    out = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "-g", "none", "--sort", "dso",
                          "-F", "sample,dso", "--stdio"], capture_output=True, text=True, check=True).stdout
    got = dict.fromkeys(NAMES, 0)
    for line in out.splitlines():
        words = line.split(None, 1)
        if len(words) != 2 or line.startswith("#") or not words[0].isdigit():
            continue
        col = next((c for frag, c in COLUMNS if frag in words[1]), "other")
        got[col] += int(words[0])
    return got


def profile(mode: str, direction: str, size: int, iters: int, freq: int, work: Path) -> dict[str, dict[str, float]]:
    """{daemon|client: {column: CPU ns per byte}} of one daemon's copies."""
    cuda, _ = remoting_bench.build()
    extra = ["--compress", "off"]
    env_extra: dict[str, str] = {}
    if mode == "tls":
        from pyvgpu.tls import make_self_signed
        fp = make_self_signed(work / "tls.crt", work / "tls.key", ["127.0.0.1"])
        extra += ["--tls-cert", str(work / "tls.crt"), "--tls-key", str(work / "tls.key")]
        env_extra = {"PYVGPU_TLS_FINGERPRINT": fp}
    d = start_daemon(work, *extra)
    env = {**os.environ, **interposer_env([d]), **env_extra}
    cmd = [str(cuda), "bw", direction, "pageable", str(size)]
    try:
        subprocess.run([*cmd, "1"], env=env, check=True, capture_output=True)        # warm: pages, modules
        assert d.proc is not None
        ddata, cdata = work / f"daemon-{mode}-{direction}.data", work / f"client-{mode}-{direction}.data"
        rec = ["perf", "record", "-q", "-F", str(freq)]
        dp = subprocess.Popen([*rec, "-o", str(ddata), "-p", str(d.proc.pid)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        time.sleep(0.5)                                         # perf attached
        subprocess.run([*rec, "-o", str(cdata), "--", *cmd, str(iters)], env=env, check=True,
                       capture_output=True)
        dp.send_signal(signal.SIGINT)
        dp.wait(30)
    finally:
        d.stop()
    ns_per_sample = 1e9 / freq / ((iters + 2) * size)
    return {who: {k: v * ns_per_sample for k, v in split(data).items()}
            for who, data in (("daemon", ddata), ("client", cdata))}


# ---------------------------------------------------------------------------------------------- decrypt paths
def _tls_pair(work: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    from pyvgpu.tls import make_self_signed, server_context
    make_self_signed(work / "dp.crt", work / "dp.key", ["127.0.0.1"])
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    return server_context(work / "dp.crt", work / "dp.key"), client


def _sender(sock: socket.socket, ctx: ssl.SSLContext, n: int) -> None:
    s = ctx.wrap_socket(sock)
    chunk = memoryview(bytearray(256 << 10))
    while n > 0:
        n -= s.send(chunk[:min(len(chunk), n)])
    time.sleep(0.5)
    s.close()


def decrypt_paths(work: Path, n: int) -> dict[str, float]:
    """Receiver CPU ns/B of n bytes: SSLObject + memory BIOs against SSLSocket.recv_into, one after the other."""
    server, client = _tls_pair(work)
    out: dict[str, float] = {}
    for how in ("SSLObject + MemoryBIO", "SSLSocket.recv_into"):
        listener = socket.create_server(("127.0.0.1", 0))
        tx = socket.create_connection(listener.getsockname())
        rx, _ = listener.accept()
        listener.close()
        t = threading.Thread(target=_sender, args=(tx, client, n))
        t.start()
        dest = memoryview(bytearray(n))
        got = 0
        if how.startswith("SSLSocket"):
            s = server.wrap_socket(rx, server_side=True)
            c0 = time.thread_time()
            while got < n:
                got += s.recv_into(dest[got:], n - got)
        else:
            inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
            obj = server.wrap_bio(inc, outg, server_side=True)
            while True:
                try:
                    obj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    if outg.pending:
                        rx.sendall(outg.read())
                    inc.write(rx.recv(1 << 16))
            if outg.pending:
                rx.sendall(outg.read())
            buf = memoryview(bytearray(256 << 10))
            c0 = time.thread_time()
            while got < n:
                inc.write(buf[:rx.recv_into(buf)])
                try:
                    while got < n and (k := obj.read(n - got, dest[got:])):
                        got += k
                except ssl.SSLWantReadError:
                    pass
        out[how] = (time.thread_time() - c0) / n * 1e9
        t.join()
        rx.close()
        tx.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=64 << 20, help="bytes per copy (default 64 MiB)")
    ap.add_argument("--iters", type=int, default=6, help="timed copies per profile (default 6)")
    ap.add_argument("--freq", type=int, default=2000, help="perf sampling frequency, Hz (default 2000)")
    ap.add_argument("--decrypt-paths", action="store_true", help="also the in-process decrypt comparison")
    a = ap.parse_args()
    if shutil.which("perf") is None:
        print("tls_profile: needs `perf` (linux-tools)", file=sys.stderr)
        return 2
    print(f"load average {os.getloadavg()}; CPU ns per byte copied, by library (perf record -F {a.freq})")
    print("\n| side | copy | mode | total | " + " | ".join(NAMES) + " |")
    print("|---|---|---|---:|" + "---:|" * len(NAMES))
    with tempfile.TemporaryDirectory() as tmp:
        for direction in ("h2d", "d2h"):
            for mode in ("plain", "tls"):
                got = profile(mode, direction, a.size, a.iters, a.freq, Path(tmp))
                for who, cols in got.items():
                    print(f"| {who} | {direction.upper()} | {mode} | {sum(cols.values()):.2f} | "
                          + " | ".join(f"{cols[k]:.2f}" for k in NAMES) + " |", flush=True)
        if a.decrypt_paths:
            print("\nreceiver CPU ns/B decrypting 256 MiB in one process (the sender is a thread):")
            for how, ns in decrypt_paths(Path(tmp), 256 << 20).items():
                print(f"  {how:24s} {ns:.3f}")
    print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
