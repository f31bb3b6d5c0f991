"""Who must prove a token, and how: the daemon sends a nonce, the client proves it holds the shared token.

The one rule of what a listening address requires lives here (`requires_token`, `requires_tls`), used by the daemon
and the CLI alike: any address other than loopback needs a token *and* TLS, because whoever can connect can run
code on the GPUs and whoever can watch the network can read and change the traffic.
csrc/core/auth.c computes the same proof with OpenSSL's HMAC and applies the same token-file rule.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

NONCE_BYTES = 32
# The only listening addresses exempt from authentication. Any other, even another 127.x address or a wildcard,
# requires a token and TLS.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class TokenFileError(Exception):
    """A token file that must not be used (unreadable, empty, or readable by group/other)."""


def requires_token(host: str) -> bool:
    """Whether a daemon listening on `host` must demand a token."""
    return host not in LOOPBACK_HOSTS


def requires_tls(host: str) -> bool:
    """Whether a daemon listening on `host` must encrypt its traffic (the same addresses as the token rule)."""
    return requires_token(host)


def read_token_file(path: str | os.PathLike[str]) -> bytes:
    """The token in `path`, refusing a file that group or other may read or write: a shared secret that others on
    the host can read proves nothing."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError as exc:
        raise TokenFileError(f"cannot read token file {p}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenFileError(f"token file {p} is accessible by group/other (mode {stat.S_IMODE(mode):04o}); "
                                 f"run `chmod 600 {p}`")
        text = fh.read().strip()
    if not text:
        raise TokenFileError(f"token file {p} is empty")
    return text


def make_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def proof(token: bytes, nonce: bytes) -> str:
    return hmac.new(token, nonce, hashlib.sha256).hexdigest()


def verify(token: bytes, nonce: bytes, claimed: object) -> bool:
    """Constant-time check of a claimed proof; anything but an ASCII str is simply wrong."""
    if not isinstance(claimed, str) or not claimed.isascii():
        return False
    return hmac.compare_digest(proof(token, nonce).encode(), claimed.encode())
