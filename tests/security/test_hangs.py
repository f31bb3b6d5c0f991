"""Every wait is bounded (issue 11, part 2): each case below hung before and now ends within its stated bound.

- a stopped daemon (SIGSTOP: the socket stays open, nothing answers) fails the client's call with
  cudaErrorDevicesUnavailable within PYVGPU_REPLY_TIMEOUT_MS (+ one tick);
- a kernel longer than that timeout still succeeds: the daemon's heartbeats keep the connection alive;
- a kernel printing exactly the default 1 MiB printf FIFO returns from cudaDeviceSynchronize with every byte;
- a huge grid of an empty kernel ends at the emulator's launch time limit;
- a client killed during a long kernel does not keep it running: its session ends at once;
- a silent or trickling peer is timed out by the daemon, a live but idle client is not (it sends PING);
- SIGTERM lets queued work finish, answers it, tells the client, then exits.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time

from harness import frame, interposer_env, raw_session
from pyvgpu import wire
from pyvgpu.client import Client, SessionEnded
from pyvgpu.protocol import ERR_UNAVAILABLE, OP_BY_NAME


def env_for(daemons, **extra) -> dict:
    return {**os.environ, **interposer_env(daemons), **extra}


def timing(text: str, what: str) -> tuple[str, int]:
    m = re.search(rf"^{what} (\w+) (\d+)$", text, re.M)
    assert m, text
    return m.group(1), int(m.group(2))


def sessions_of(port: int) -> list[dict]:
    with Client.connect("127.0.0.1", port) as c:
        return [s for s in c.status()["sessions"] if not s["self"]]


def test_stopped_daemon_fails_the_call_within_the_reply_timeout(cuda_build, daemon):
    prog = cuda_build("api_faults.cu")
    proc = subprocess.Popen([str(prog), "lost"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for([daemon], PYVGPU_REPLY_TIMEOUT_MS="2000"))
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), line + (proc.stderr.read() if proc.poll() is not None else "")
        time.sleep(0.5)                           # inside the 64 MiB copies
        daemon.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert re.search(r"^LOST cudaErrorDevicesUnavailable \d+$", out, re.M), out + err
    assert "no reply or heartbeat for 2000 ms" in err
    assert elapsed < 2.0 + 3.0, elapsed           # the timeout, one tick, and a loaded machine's slack
    next_ms = int(re.search(r"^NEXT cudaErrorDevicesUnavailable (\d+)$", out, re.M).group(1))
    assert next_ms < 1000


def test_long_kernel_outlives_the_reply_timeout(cuda_build, daemon_factory):
    d = daemon_factory("--emu-slowdown", "3000")  # a ~1 ms kernel lasts seconds
    proc = subprocess.run([str(cuda_build("harden.cu")), "long"], capture_output=True, text=True, timeout=120,
                          env=env_for([d], PYVGPU_REPLY_TIMEOUT_MS="1500"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    err, ms = timing(proc.stderr, "SYNC")
    assert err == "cudaSuccess" and ms > 1500, proc.stderr   # longer than the timeout: heartbeats kept it alive


def test_one_mib_of_printf_reaches_the_client(cuda_build, daemon):
    proc = subprocess.run([str(cuda_build("harden.cu")), "printf", str(1 << 20)], capture_output=True,
                          timeout=120, env=env_for([daemon]))
    assert proc.returncode == 0, proc.stderr
    err, _ = timing(proc.stderr.decode(), "SYNC")
    assert err == "cudaSuccess"
    lines = proc.stdout.split(b"\n")[:-1]
    assert len(proc.stdout) == 1 << 20 and len(lines) == (1 << 20) // 64
    assert sorted(int(ln.split()[1]) for ln in lines) == list(range(len(lines)))
    assert all(ln.endswith(b"UVWX") and len(ln) == 63 for ln in lines)


def test_huge_grid_ends_at_the_launch_time_limit(cuda_build, daemon_factory):
    d = daemon_factory(env={"PYVGPU_EMU_MAX_SECONDS": "2"})
    proc = subprocess.run([str(cuda_build("harden.cu")), "grid"], capture_output=True, text=True, timeout=120,
                          env=env_for([d]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    err, ms = timing(proc.stderr, "SYNC")
    assert err == "cudaErrorLaunchTimeout" and 2000 <= ms < 2000 + 1500, proc.stderr   # never ended before
    assert "_Z5emptyv: ran longer than 2.0 s" in d.log_text()


def test_client_killed_during_a_long_kernel_cancels_it(cuda_build, daemon_factory):
    d = daemon_factory("--emu-slowdown", "100000")  # a ~1 ms kernel would last minutes
    proc = subprocess.Popen([str(cuda_build("harden.cu")), "long"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_for([d]))
    try:
        assert proc.stdout.readline().strip() == "LAUNCHED"
        time.sleep(0.5)
        assert len(sessions_of(d.port)) == 1
        proc.kill()
        proc.wait(10)
        t0 = time.monotonic()
        while sessions_of(d.port) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert sessions_of(d.port) == [], "the orphaned kernel kept the session alive"
        assert time.monotonic() - t0 < 5
    finally:
        if proc.poll() is None:
            proc.kill()
    assert re.search(r"session \d+: ended \(.*; work in progress cancelled on 1 device", d.log_text())


def test_silent_and_trickling_peers_are_timed_out(daemon_factory):
    d = daemon_factory("--idle-timeout", "1", "--frame-timeout", "1")
    silent = raw_session(d.port)
    trickle = raw_session(d.port)
    request = frame([OP_BY_NAME["MEM_GET_INFO"].code, 5, 0, 0])
    t0 = time.monotonic()
    silent.settimeout(10)
    stop = threading.Event()

    def drip() -> None:
        for b in request:                            # one byte every 0.4 s: the frame never completes in time
            if stop.wait(0.4):
                return
            try:
                trickle.sendall(bytes([b]))
            except OSError:
                return

    t = threading.Thread(target=drip)
    t.start()
    try:
        for s in (silent, trickle):
            rep, _, _ = wire.recv_reply(s)
            assert rep.is_notice and rep.err == ERR_UNAVAILABLE, rep
            assert "timed out" in rep.result
            s.settimeout(5)
            assert s.recv(10) == b""
        assert time.monotonic() - t0 < 5
    finally:
        stop.set()
        t.join()
        silent.close()
        trickle.close()
    log = d.log_text()
    assert "idle for 1 s" in log and "frame header not complete within 1 s" in log


def test_idle_client_survives_the_idle_timeout(cuda_build, daemon_factory):
    d = daemon_factory("--idle-timeout", "1")
    out = subprocess.run([str(cuda_build("harden.cu")), "idle", "3"], capture_output=True, text=True, timeout=60,
                         env=env_for([d], PYVGPU_PING_INTERVAL_MS="300"))
    assert out.returncode == 0, out.stdout + out.stderr + d.log_text()
    assert "IDLE OK" in out.stdout


def test_sigterm_finishes_queued_work_then_tells_the_client(daemon_factory):
    d = daemon_factory("--emu-memory", "1G")
    c = Client.connect("127.0.0.1", d.port)
    try:
        size = 768 << 20
        p = c.call("MALLOC", 0, size)[1]
        c.call("MEMSET", 0, p, 7, size, 0, reply=False)           # device work still queued at SIGTERM
        threading.Timer(0.05, d.proc.terminate).start()
        err, _, data = c.call("MEMCPY_DTOH", 0, p + size - 4096, 4096, 0)
        assert err == 0 and data == b"\x07" * 4096                 # answered before the daemon left
        try:
            c.call("MEM_GET_INFO", 0)
            raise AssertionError("the session should have ended")
        except (SessionEnded, OSError) as exc:
            assert not isinstance(exc, SessionEnded) or "shutting down" in str(exc)
        assert d.proc.wait(30) == 0
    finally:
        c.close(goodbye=False)
    assert "Traceback" not in d.log_text()
