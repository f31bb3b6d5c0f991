"""Handshake from libvcudart's side: token proof (PYVGPU_TOKEN or the token file) accepted, a wrong or missing token
refused with cudaErrorNotPermitted, a protocol version mismatch and a non-pyvgpu peer reported clearly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import msgpack

from harness import serve_one_connection
from pyvgpu import wire
from pyvgpu.protocol import ERR_AUTH, ERR_PROTOCOL_MISMATCH, ERR_UNAVAILABLE, HELLO_SERVER_MAGIC

SCRIPT = r"""
import json, sys, cffi
ffi = cffi.FFI()
ffi.cdef("int cudaGetDeviceCount(int *); int cudaMalloc(void **, size_t); int cudaFree(void *);")
lib = ffi.dlopen(sys.argv[1])
n = ffi.new("int *", -1); p = ffi.new("void **")
err = lib.cudaGetDeviceCount(n)
m = lib.cudaMalloc(p, 1024) if err == 0 else None
f = lib.cudaFree(p[0]) if m == 0 else None
print(json.dumps({"err": err, "count": n[0], "malloc": m, "free": f}))
"""


def probe(vcudart, tmp_path, hosts: str, **env):
    full = {**{k: v for k, v in os.environ.items() if k not in ("PYVGPU_TOKEN", "LD_PRELOAD")},
            "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "PYVGPU_HOSTS": hosts, **env}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(vcudart)], capture_output=True, text=True, env=full,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_token_accepted_and_refused(vcudart, daemon_factory, tmp_path):
    secret = tmp_path / "daemon-token"
    secret.write_text("s3cret-token\n")
    secret.chmod(0o600)
    d = daemon_factory("--token-file", str(secret))
    out, err = probe(vcudart, tmp_path, d.address, PYVGPU_TOKEN="  s3cret-token ")
    assert out == {"err": 0, "count": 1, "malloc": 0, "free": 0}, err
    out, err = probe(vcudart, tmp_path, d.address, PYVGPU_TOKEN="wrong")
    assert out["err"] == ERR_AUTH and out["count"] == 0
    assert f"daemon {d.address} rejected the token proof" in err
    out, err = probe(vcudart, tmp_path, d.address)                        # no token anywhere
    assert out["err"] == ERR_AUTH
    assert "requires a token" in err
    (tmp_path / "cfg" / "pyvgpu").mkdir(parents=True)
    token_file = tmp_path / "cfg" / "pyvgpu" / "token"
    token_file.write_text("s3cret-token\n")
    token_file.chmod(0o640)                       # readable by the group: refused, and the user is told why
    out, err = probe(vcudart, tmp_path, d.address)
    assert out["err"] == ERR_AUTH, err
    assert f"token file {token_file} is accessible by group/other (mode 0640)" in err and "chmod 600" in err
    token_file.chmod(0o600)                       # the token file
    out, err = probe(vcudart, tmp_path, d.address)
    assert out["err"] == 0 and out["count"] == 1, err


def fake_daemon(greeting: bytes, hold: threading.Event) -> int:
    def handle(conn):
        conn.sendall(greeting)
        try:
            header, _ = wire.recv_frame(conn)          # the client's HELLO
            conn.sendall(b"".join(bytes(p) for p in wire.encode_reply(header[1], ERR_PROTOCOL_MISMATCH,
                                                                       "version mismatch")))
        except (ConnectionError, wire.ProtocolError):
            pass
        hold.wait(10)

    return serve_one_connection(handle)


def test_protocol_version_mismatch(vcudart, tmp_path):
    hold = threading.Event()
    port = fake_daemon(wire.encode_server_hello(999, b"n" * 32, False), hold)
    try:
        out, err = probe(vcudart, tmp_path, f"127.0.0.1:{port}")
    finally:
        hold.set()
    assert out["err"] == ERR_PROTOCOL_MISMATCH and out["count"] == 0
    assert f"protocol version mismatch: daemon 127.0.0.1:{port} speaks version 999" in err


def test_not_a_pyvgpu_daemon(vcudart, tmp_path):
    hold = threading.Event()
    body = msgpack.packb(["SSH-2.0", 1], use_bin_type=True)
    port = fake_daemon(len(body).to_bytes(4, "little") + body, hold)
    try:
        out, err = probe(vcudart, tmp_path, f"127.0.0.1:{port}")
    finally:
        hold.set()
    assert out["err"] == ERR_UNAVAILABLE
    assert f"127.0.0.1:{port} is not a pyvgpu daemon" in err
    assert HELLO_SERVER_MAGIC == "pyvgpu"
