"""A small blocking Python client of the pyvgpu daemon (CLI `devices` / `daemon status`, tests, fuzzing).

One TCP connection (TLS when configured, see pyvgpu/tls.py) = one daemon session. Calls are serialized by a lock
(send + wait for that reply), which is all the CLI and the tests need; libvcudart is the pipelined client.
Every wait is bounded: the socket timeout is the longest the client waits without hearing from the daemon, which
sends heartbeats while it works on a request.
"""
from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Any

from pyvgpu import auth, tls as tlsmod, wire
from pyvgpu.protocol import (CLIENT_SILENCE_TIMEOUT_S, ERR_AUTH, ERR_PROTOCOL_MISMATCH, ERROR_NAMES, HELLO_CLIENT,
                             HELLO_HOSTNAME, HELLO_PID, HELLO_PROOF, HELLO_REPLY_DEVICES, HELLO_REPLY_SESSION,
                             HELLO_VA_BASE, HELLO_VERSION, OP_BY_NAME, PROTOCOL_VERSION, VA_WINDOW_BYTES, OpFlag,
                             reply_matches)


class ClientError(Exception):
    """The daemon answered with an error (code is a cudaError_t value) or the exchange failed."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class HandshakeError(ClientError):
    pass


class SessionEnded(ClientError):
    """The daemon ended the session and said why (shutting down, idle timeout, a protocol violation)."""


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"error {code}")


class Client:
    def __init__(self, sock: socket.socket, host: str, port: int) -> None:
        self.sock = sock
        self.host = host
        self.port = port
        self.info: dict[str, Any] = {}
        self.server_version: int | None = None
        self._lock = threading.Lock()
        self._next_id = 1
        self._stash: dict[int, tuple[int, Any, bytes]] = {}
        self.stdout_chunks: list[bytes] = []   # printf output returned by SYNC replies, in arrival order
        self.heartbeats = 0                     # heartbeat notices received
        self.ended: SessionEnded | None = None  # set when the daemon said it ends the session
        self.event_times: dict[int, tuple[int, float]] = {}   # event handle -> (records, ms) from replies

    # ------------------------------------------------------------------ set-up
    @classmethod
    def connect(cls, host: str, port: int, token: bytes | None = None, timeout: float = CLIENT_SILENCE_TIMEOUT_S,
                va_base: int | None = None, client_text: str | None = None, version: int = PROTOCOL_VERSION,
                hello: dict[str, Any] | None = None, tls: tlsmod.ClientTLS | None | str = "env") -> "Client":
        """Connect and perform the handshake; raises HandshakeError (version mismatch, auth), ssl.SSLError (TLS
        verification) or OSError. `timeout` bounds every wait for the daemon; `hello`: more keys for the hello map
        (e.g. protocol.HELLO_MEMORY, HELLO_WEIGHT); `tls`: "env" reads PYVGPU_TLS* and the config directory
        (pyvgpu/tls.py), None is plain TCP."""
        cfg = tlsmod.client_config() if tls == "env" else tls
        assert not isinstance(cfg, str)
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if cfg is not None:
            try:
                sock = cfg.context().wrap_socket(sock, server_hostname=host)
                cfg.check_peer(sock.getpeercert(binary_form=True), f"{host}:{port}")
            except BaseException:
                sock.close()
                raise
        self = cls(sock, host, port)
        try:
            self._handshake(token, va_base, client_text, version, hello or {})
        except BaseException:
            sock.close()
            raise
        return self

    def _handshake(self, token: bytes | None, va_base: int | None, client_text: str | None, version: int,
                   extra: dict[str, Any]) -> None:
        s_version, nonce, auth_required = wire.parse_server_hello(wire.recv_header(self.sock))
        self.server_version = s_version
        if auth_required and token is None:
            raise HandshakeError(f"daemon {self.host}:{self.port} requires a token and none was given "
                                 f"(PYVGPU_TOKEN or the token file)", ERR_AUTH)
        hello = {
            HELLO_VERSION: version,
            HELLO_PROOF: auth.proof(token, nonce) if token is not None else None,
            HELLO_CLIENT: client_text or f"{os.getpid()}@{socket.gethostname()} {os.path.basename(sys.argv[0] or 'python')}",
            HELLO_VA_BASE: VA_WINDOW_BYTES if va_base is None else va_base,
            HELLO_PID: os.getpid(),
            HELLO_HOSTNAME: socket.gethostname(),
            **extra,
        }
        # The hello is sent even when versions differ so the daemon logs the mismatch too.
        err, result, _ = self._roundtrip(OP_BY_NAME["HELLO"].code, [hello])
        if err == ERR_PROTOCOL_MISMATCH or s_version != version:
            raise HandshakeError(f"protocol version mismatch: daemon {self.host}:{self.port} speaks version "
                                 f"{s_version}, this client speaks {version}"
                                 + (f" ({result})" if isinstance(result, str) else ""), ERR_PROTOCOL_MISMATCH)
        if err == ERR_AUTH:
            raise HandshakeError(f"daemon {self.host}:{self.port} rejected the token proof"
                                 + (f" ({result})" if isinstance(result, str) else ""), ERR_AUTH)
        if err != 0 or not isinstance(result, dict):
            raise HandshakeError(f"handshake failed: {error_name(err)} {result!r}", err)
        self.info = result

    # ------------------------------------------------------------------ calls
    @property
    def devices(self) -> list[dict[str, Any]]:
        return list(self.info.get(HELLO_REPLY_DEVICES, []))

    @property
    def session(self) -> Any:
        return self.info.get(HELLO_REPLY_SESSION)

    def _roundtrip(self, op: int, args: list[Any], payload: bytes | bytearray | memoryview = b"",
                   reply: bool = True) -> tuple[int, Any, bytes]:
        with self._lock:
            req_id = 0
            if reply:
                req_id = self._next_id
                self._next_id += 1
            wire.send_parts(self.sock, wire.encode_request(op, req_id, args, payload))
            if not reply:
                return 0, None, b""
            return self._wait(req_id)

    def _wait(self, req_id: int) -> tuple[int, Any, bytes]:
        while req_id not in self._stash:
            if self.ended is not None:
                raise self.ended
            rep, payload, stdout = wire.recv_reply(self.sock)
            if stdout:
                self.stdout_chunks.append(stdout)
            if rep.is_notice:
                if rep.err == 0:
                    self.heartbeats += 1
                else:
                    self.ended = SessionEnded(f"daemon {self.host}:{self.port} ended the session: {rep.result}",
                                              rep.err)
                continue
            for i in range(0, len(rep.event_times or ()), 3):    # [handle, records, ms, ...] (protocol v3)
                self.event_times[rep.event_times[i]] = (rep.event_times[i + 1], rep.event_times[i + 2])
            self._stash[rep.req_id] = (rep.err, rep.result, payload)
        return self._stash.pop(req_id)

    def call(self, op_name: str, *args: Any, payload: bytes | bytearray | memoryview = b"",
             reply: bool = True) -> tuple[int, Any, bytes]:
        """Send op `op_name` with `args`; → (err, result, payload). reply=False sends it fire-and-forget
        (req_id 0; only ops flagged ASYNC) and returns (0, None, b"")."""
        spec = OP_BY_NAME[op_name]
        if not reply and not spec.flags & OpFlag.ASYNC:
            raise ValueError(f"{op_name} is not an ASYNC op and cannot be sent fire-and-forget")
        err, result, data = self._roundtrip(spec.code, list(args), payload, reply)
        if reply and err == 0 and not reply_matches(spec, result):
            raise ClientError(f"{op_name} answered {result!r:.80}, not the {spec.reply} its spec declares")
        return err, result, data

    def check(self, op_name: str, *args: Any, payload: bytes | bytearray | memoryview = b"") -> tuple[Any, bytes]:
        """call() that raises ClientError on a non-zero err; → (result, payload)."""
        err, result, data = self.call(op_name, *args, payload=payload)
        if err:
            raise ClientError(f"{op_name} failed: {error_name(err)}", err)
        return result, data

    def status(self) -> dict[str, Any]:
        result, _ = self.check("STATUS")
        return result

    def send_raw(self, data: bytes) -> None:
        """Write arbitrary bytes (fuzzing, truncated frames)."""
        with self._lock:
            self.sock.sendall(data)

    def close(self, goodbye: bool = True) -> None:
        if self.sock.fileno() < 0:
            return
        try:
            if goodbye:
                self.call("GOODBYE")
        except (OSError, wire.ProtocolError, ClientError):
            pass
        finally:
            self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
