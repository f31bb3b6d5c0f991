"""Daemon handshake, version check, authentication and the non-loopback token rule."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from harness import daemon_command, free_port, stop_process, wait_listening, wait_text
from pyvgpu import auth, wire
from pyvgpu.client import Client, HandshakeError
from pyvgpu.protocol import (DEVICE_INFO_KEYS, ERR_AUTH, ERR_PROTOCOL_MISMATCH, ERROR_CODES, OP_BY_NAME,
                             PROTOCOL_VERSION, VA_WINDOW_BYTES)
from pyvgpu.tls import ClientTLS


@pytest.fixture
def clean_env(tmp_path):
    """No token anywhere: a private config dir and no PYVGPU_TOKEN."""
    env = {k: v for k, v in os.environ.items() if k != "PYVGPU_TOKEN"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return env


def spawn(tmp_path: Path, env: dict, *args: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"daemon-{time.monotonic_ns()}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(daemon_command(*args), stdout=fh, stderr=subprocess.STDOUT, env=env)
    return proc, log


def test_two_daemons_on_ports_the_os_picks_show_gpus_of_different_uuids(daemon_factory):
    """A device's UUID is derived from its daemon's address; a daemon started with --port 0 (as the harness starts
    every one) has none before it listens, so it names itself per start: two such daemons once showed GPUs of one
    UUID (libvnvml's check of distinct UUIDs across hosts failed). A fixed address still gives the same UUIDs."""
    a, b = daemon_factory("--emu-devices", "2"), daemon_factory("--emu-devices", "2")
    uuids = []
    for d in (a, b):
        with Client.connect("127.0.0.1", d.port) as c:
            uuids += [bytes(dev["uuid"]) for dev in c.devices]
    assert len(set(uuids)) == 4, uuids
    from pyvgpu_daemon.__main__ import emu_instance
    assert emu_instance("10.0.0.1", 7777) == emu_instance("10.0.0.1", 7777) == "10.0.0.1:7777"
    assert emu_instance("127.0.0.1", 0) != emu_instance("127.0.0.1", 0)


def test_handshake_and_device_snapshot(daemon):
    with Client.connect("127.0.0.1", daemon.port) as c:
        assert c.info["backend"] == "emu"
        assert isinstance(c.info["session"], int)
        (dev,) = c.devices
        assert set(DEVICE_INFO_KEYS) <= set(dev)
        assert dev["name"] == "pyvgpu emulated GPU (sm_75)"
        assert (dev["major"], dev["minor"], dev["multiprocessors"], dev["warp_size"]) == (7, 5, 40, 32)
        assert dev["max_threads_per_block"] == 1024 and dev["shared_mem_per_block"] == 48 << 10
        attrs = dev["attrs"]
        assert len(attrs) >= 40 and all(isinstance(k, int) for k in attrs)
        assert attrs[1] == 1024 and attrs[10] == 32 and attrs[16] == 40 and attrs[75] == 7 and attrs[76] == 5
        assert len(dev["uuid"]) == 16
    log = daemon.log_text()
    assert "pyvgpu-daemon listening on 127.0.0.1:" in log and "backend=emu devices=1" in log


def test_emu_options_and_va_base(daemon_factory):
    d = daemon_factory("--emu-devices", "3", "--emu-memory", "256M")
    base = 3 * VA_WINDOW_BYTES
    with Client.connect("127.0.0.1", d.port, va_base=base) as c:
        assert len(c.devices) == 3
        assert all(x["total_mem"] == 256 << 20 for x in c.devices)
        for r in range(3):
            err, ptr, _ = c.call("MALLOC", r, 100)
            assert err == 0 and base + r * VA_WINDOW_BYTES <= ptr < base + (r + 1) * VA_WINDOW_BYTES
            err, (free, total), _ = c.call("MEM_GET_INFO", r)
            assert err == 0 and total == 256 << 20 and free == total - 256


def test_version_mismatch_is_clear_on_both_sides(daemon):
    with pytest.raises(HandshakeError) as e:
        Client.connect("127.0.0.1", daemon.port, version=PROTOCOL_VERSION + 1)
    assert e.value.code == ERR_PROTOCOL_MISMATCH
    assert "version mismatch" in str(e.value) and str(PROTOCOL_VERSION) in str(e.value)
    assert "protocol version mismatch" in daemon.wait_log("protocol version mismatch")
    with Client.connect("127.0.0.1", daemon.port) as c:   # the daemon carries on
        assert c.call("MEM_GET_INFO", 0)[0] == 0


def test_first_frame_must_be_hello(daemon):
    s = socket.create_connection(("127.0.0.1", daemon.port))
    wire.parse_server_hello(wire.recv_header(s))
    wire.send_parts(s, wire.encode_request(OP_BY_NAME["MALLOC"].code, 1, [0, 16]))
    s.settimeout(5)
    assert s.recv(100) == b""            # closed without serving
    s.close()
    assert "not a well-formed HELLO" in daemon.wait_log("not a well-formed HELLO")


@pytest.mark.parametrize("token, refusal", [(None, "without a token"), ("s3cret", "without TLS")])
def test_non_loopback_needs_token_and_tls(tmp_path, clean_env, token, refusal):
    env = {**clean_env, **({"PYVGPU_TOKEN": token} if token else {})}
    proc, log = spawn(tmp_path, env, "--host", "127.0.0.2", "--port", str(free_port("127.0.0.2")))
    try:
        assert proc.wait(30) == 2
    finally:
        stop_process(proc)
    text = log.read_text()
    assert f"refusing to listen on 127.0.0.2 {refusal}" in text
    assert "--tls-cert" in text or token is None
    assert "Traceback" not in text


def test_token_file_missing_is_a_clear_error(tmp_path, clean_env):
    proc, log = spawn(tmp_path, clean_env, "--port", "0", "--token-file", str(tmp_path / "nope"))
    assert proc.wait(30) == 2
    assert "cannot read token file" in log.read_text()


def test_token_file_readable_by_others_is_refused(tmp_path, clean_env):
    tok = tmp_path / "tok"
    tok.write_text("s3cret\n")
    tok.chmod(0o644)
    proc, log = spawn(tmp_path, clean_env, "--port", "0", "--token-file", str(tok))
    assert proc.wait(30) == 2
    text = log.read_text()
    assert f"token file {tok} is accessible by group/other (mode 0644)" in text and "chmod 600" in text
    assert "Traceback" not in text


@pytest.mark.parametrize("how", ["token-file", "env"])
def test_auth_on_non_loopback(tmp_path, clean_env, tls_pair, how):
    token = b"s3cret-token-for-tests"
    port = free_port("127.0.0.2")
    args = ["--host", "127.0.0.2", "--port", str(port), "--tls-cert", str(tls_pair.cert),
            "--tls-key", str(tls_pair.key)]
    env = dict(clean_env)
    if how == "token-file":
        (tmp_path / "tok").write_bytes(token + b"\n")
        (tmp_path / "tok").chmod(0o600)
        args += ["--token-file", str(tmp_path / "tok")]
    else:
        env["PYVGPU_TOKEN"] = token.decode()
    tls = ClientTLS(None, frozenset({tls_pair.fingerprint}))
    proc, log = spawn(tmp_path, env, *args)
    try:
        wait_listening(proc, port, log, host="127.0.0.2")
        with pytest.raises(HandshakeError) as e:
            Client.connect("127.0.0.2", port, token=b"wrong", tls=tls)
        assert e.value.code == ERR_AUTH
        with pytest.raises(HandshakeError) as e:
            Client.connect("127.0.0.2", port, tls=tls)             # no token at all
        assert e.value.code == ERR_AUTH
        # a client that sends no proof anyway gets ERR_AUTH from the daemon, then the connection closes
        s = tls.context().wrap_socket(socket.create_connection(("127.0.0.2", port)), server_hostname="127.0.0.2")
        _, nonce, required = wire.parse_server_hello(wire.recv_header(s))
        assert required
        wire.send_parts(s, wire.encode_request(1, 7, [{"version": PROTOCOL_VERSION, "proof": "00" * 32}]))
        rep, _, _ = wire.recv_reply(s)
        assert rep.err == ERR_AUTH
        assert s.recv(10) == b""
        s.close()
        with Client.connect("127.0.0.2", port, token=token, tls=tls) as c:
            assert c.call("MEM_GET_INFO", 0)[0] == 0
            assert c.status()["auth"] is True and c.status()["tls"] is True
        with pytest.raises(OSError):                               # plain TCP is not spoken there
            Client.connect("127.0.0.2", port, token=token, tls=None, timeout=3)
        assert "authentication failed" in wait_text(log.read_text, "authentication failed")
        assert auth.verify(token, nonce, auth.proof(token, nonce))
    finally:
        stop_process(proc)


def test_sigterm_shuts_down_cleanly_with_open_sessions(daemon):
    c = Client.connect("127.0.0.1", daemon.port)
    c.call("MALLOC", 0, 1 << 20)
    daemon.proc.terminate()
    assert daemon.proc.wait(15) == 0
    assert "Traceback" not in daemon.log_text()
    c.close(goodbye=False)


@pytest.mark.parametrize("hello", [
    {"version": PROTOCOL_VERSION, "proof": "é" * 64},            # non-ASCII proof: a traceback before auth, once
    {"version": PROTOCOL_VERSION, "proof": 12345},
    {"version": PROTOCOL_VERSION, "proof": "ab" * 40},
    {"version": PROTOCOL_VERSION, "va_base": "0x1000"},
    {"version": PROTOCOL_VERSION, "va_base": True},
    [PROTOCOL_VERSION],
])
def test_hello_fields_are_type_checked_before_use(daemon_factory, tmp_path, hello):
    tok = tmp_path / "tok"
    tok.write_text("s3cret\n")
    tok.chmod(0o600)
    d = daemon_factory("--token-file", str(tok))
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    wire.parse_server_hello(wire.recv_header(s))
    wire.send_parts(s, wire.encode_request(1, 3, [hello]))
    rep, _, _ = wire.recv_reply(s)
    assert rep.req_id == 3 and rep.err == ERROR_CODES["cudaErrorInvalidValue"] and "malformed hello" in rep.result
    assert s.recv(10) == b""
    s.close()
    with Client.connect("127.0.0.1", d.port, token=b"s3cret") as c:      # the daemon carries on
        assert c.call("MEM_GET_INFO", 0)[0] == 0
    log = d.wait_log("malformed hello")
    assert "malformed hello" in log and "Traceback" not in log


def test_client_text_is_kept_short(daemon):
    with Client.connect("127.0.0.1", daemon.port, client_text="x" * 5000) as c:
        me = [s for s in c.status()["sessions"] if s["self"]][0]
        assert me["client"] == "x" * 200
