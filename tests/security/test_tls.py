"""TLS between clients and the daemon (issue 11, part 5): libvcudart and the Python client round-trip over TLS when
they trust the daemon's certificate (pinned fingerprint or CA bundle), and refuse a daemon that presents another one."""
from __future__ import annotations

import os
import re
import ssl
import subprocess

import pytest

from harness import interposer_env
from pyvgpu.client import Client
from pyvgpu.protocol import ERR_AUTH, ERR_UNAVAILABLE
from pyvgpu.tls import ClientTLS, TLSConfigError, client_config, normalize_fingerprint


@pytest.fixture
def tls_daemon(daemon_factory, tls_pair):
    return daemon_factory("--tls-cert", str(tls_pair.cert), "--tls-key", str(tls_pair.key))


def run_memory(prog, daemon, **env):
    full = {**os.environ, **interposer_env([daemon]), **env}
    return subprocess.run([str(prog), "65536"], capture_output=True, text=True, timeout=120, env=full)


def test_c_client_round_trips_over_tls(cuda_build, tls_daemon, tls_pair):
    prog = cuda_build("api_memory.cu")
    colons = ":".join(tls_pair.fingerprint[i:i + 2] for i in range(0, 64, 2)).upper()
    for env in ({"PYVGPU_TLS_FINGERPRINT": tls_pair.fingerprint},
                {"PYVGPU_TLS_FINGERPRINT": f"sha256:{colons}"},
                {"PYVGPU_TLS_CA": str(tls_pair.cert)}):           # chain + the 127.0.0.1 name in the certificate
        out = run_memory(prog, tls_daemon, **env)
        assert out.returncode == 0 and re.search(r"^OK \d+$", out.stdout, re.M), (env, out.stdout, out.stderr)
    with Client.connect("127.0.0.1", tls_daemon.port, tls=ClientTLS(None, frozenset({tls_pair.fingerprint}))) as c:
        assert c.status()["tls"] is True


def test_c_client_refuses_the_wrong_certificate(cuda_build, tls_daemon, other_tls_pair):
    prog = cuda_build("api_memory.cu")
    out = run_memory(prog, tls_daemon, PYVGPU_TLS_FINGERPRINT=other_tls_pair.fingerprint)
    assert out.returncode != 0
    assert "presented a certificate whose SHA-256 fingerprint is not pinned" in out.stderr, out.stderr
    assert f"{ERR_AUTH}" in out.stdout or "cudaErrorNotPermitted" in out.stdout, out.stdout
    out = run_memory(prog, tls_daemon, PYVGPU_TLS_CA=str(other_tls_pair.cert))
    assert out.returncode != 0 and "certificate not trusted" in out.stderr, out.stderr
    assert "Traceback" not in tls_daemon.log_text()


def test_plain_client_and_tls_daemon_do_not_mix(cuda_build, daemon, tls_daemon, tls_pair):
    prog = cuda_build("api_memory.cu")
    out = run_memory(prog, daemon, PYVGPU_TLS_FINGERPRINT=tls_pair.fingerprint)   # TLS to a plain daemon
    assert out.returncode != 0 and "TLS handshake with daemon" in out.stderr, out.stderr
    out = run_memory(prog, tls_daemon, PYVGPU_HANDSHAKE_TIMEOUT_MS="2000")         # plain TCP to a TLS daemon
    assert out.returncode != 0 and ("cudaErrorDevicesUnavailable" in out.stdout or str(ERR_UNAVAILABLE) in out.stdout)


def test_python_client_pins_and_refuses(tls_daemon, tls_pair, other_tls_pair):
    with Client.connect("127.0.0.1", tls_daemon.port, tls=ClientTLS(None, frozenset({tls_pair.fingerprint}))) as c:
        ptr = c.call("MALLOC", 0, 1 << 20)[1]
        c.call("MEMCPY_HTOD", 0, ptr, 0, payload=b"t" * (1 << 20))
        assert c.call("MEMCPY_DTOH", 0, ptr, 1 << 20, 0)[2] == b"t" * (1 << 20)
    with pytest.raises(ssl.SSLError):
        Client.connect("127.0.0.1", tls_daemon.port, tls=ClientTLS(None, frozenset({other_tls_pair.fingerprint})))
    with pytest.raises(ssl.SSLError):
        Client.connect("127.0.0.1", tls_daemon.port, tls=ClientTLS(other_tls_pair.cert, frozenset()))
    with Client.connect("127.0.0.1", tls_daemon.port, tls=ClientTLS(tls_pair.cert, frozenset())) as c:
        assert c.call("MEM_GET_INFO", 0)[0] == 0


def test_client_settings(tmp_path, tls_pair):
    assert client_config({}) is None
    cfg = client_config({"PYVGPU_TLS_FINGERPRINT": "sha256:" + tls_pair.fingerprint.upper()})
    assert cfg is not None and cfg.fingerprints == {tls_pair.fingerprint}
    assert client_config({"PYVGPU_TLS_FINGERPRINT": tls_pair.fingerprint, "PYVGPU_TLS": "0"}) is None
    assert client_config({"PYVGPU_TLS": "1"}) == ClientTLS(None, frozenset())       # system CAs
    with pytest.raises(TLSConfigError):
        client_config({"PYVGPU_TLS_CA": str(tmp_path / "missing.pem")})
    with pytest.raises(TLSConfigError):
        normalize_fingerprint("abc")


def test_bulk_copies_over_tls_arrive_whole(cuda_build, tls_daemon, tls_pair):
    """Replies larger than the daemon's TLS slices (stream.FrameStream.TLS_SLICE), sent from device memory, and the
    client's read-ahead (csrc/core/ssl.c): every byte of copies up to 8 MiB each way, then small calls in order."""
    prog = cuda_build("api_memory.cu")
    full = {**os.environ, **interposer_env([tls_daemon]), "PYVGPU_TLS_FINGERPRINT": tls_pair.fingerprint}
    out = subprocess.run([str(prog), str(8 << 20)], capture_output=True, text=True, timeout=300, env=full)
    assert out.returncode == 0 and re.search(r"^OK \d+$", out.stdout, re.M), (out.stdout, out.stderr)
    data = os.urandom(3 << 20) * 3 + b"tail"                     # 9 MiB + 4 B: slices and a short last one
    with Client.connect("127.0.0.1", tls_daemon.port, tls=ClientTLS(None, frozenset({tls_pair.fingerprint}))) as c:
        ptr = c.call("MALLOC", 0, len(data))[1]
        c.call("MEMCPY_HTOD", 0, ptr, 0, payload=data)
        for _ in range(2):
            assert c.call("MEMCPY_DTOH", 0, ptr, len(data), 0)[2] == data
            assert c.call("MEM_GET_INFO", 0)[0] == 0
    assert "Traceback" not in tls_daemon.log_text()
