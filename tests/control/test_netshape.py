"""bench/netshape.py, the shaping proxy the network benchmarks run through (issue 10, P5): it adds the round-trip time
it is given and paces bytes at its line rate, in both directions, and forwards the bytes unchanged."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

from harness import ROOT, stop_process


def echo_server() -> tuple[socket.socket, int]:
    """A loopback server echoing every connection's bytes (threads, daemonic: gone with the test process)."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve_one(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1 << 20):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv, srv.getsockname()[1]


def proxy(target: int, *args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "netshape.py"), "--target", f"127.0.0.1:{target}",
                             *args], stdout=subprocess.PIPE, text=True, start_new_session=True)
    words = proc.stdout.readline().split()
    assert words[:1] == ["listening"], words
    return proc, int(words[1])


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return bytes(buf)


def test_proxy_adds_its_round_trip_time_and_paces_its_rate():
    srv, port = echo_server()
    proc, pport = proxy(port, "--rtt-ms", "20", "--rate", "80M")     # 10 MB/s each way
    try:
        s = socket.create_connection(("127.0.0.1", pport), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for i in range(5):
            t0 = time.perf_counter()
            s.sendall(bytes([i]) * 8)
            assert recv_exact(s, 8) == bytes([i]) * 8
            rtts.append(time.perf_counter() - t0)
        assert 0.019 < sorted(rtts)[2] < 1.0, rtts      # upper bounds: slack for a loaded machine
        data = bytes(range(256)) * 4096            # 1 MiB: 0.1 s at 10 MB/s each way (pipelined through the echo)
        t0 = time.perf_counter()
        threading.Thread(target=s.sendall, args=(data,), daemon=True).start()
        assert recv_exact(s, len(data)) == data
        took = time.perf_counter() - t0
        assert 0.1 < took < 10.0, took
        s.close()
    finally:
        stop_process(proc, group=True)
        srv.close()
