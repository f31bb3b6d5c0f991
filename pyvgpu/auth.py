"""Who must prove a token, and how: the daemon sends a nonce, the client proves it holds the shared token.

The one rule of when a token is required lives here (`requires_token`), used by the daemon and the CLI alike.
csrc/core/auth.c computes the same proof with OpenSSL's HMAC.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

NONCE_BYTES = 32
# The only listening addresses exempt from authentication. Any other, even another 127.x address or a wildcard,
# requires a token: whoever can connect can run code on the GPUs.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def requires_token(host: str) -> bool:
    """Whether a daemon listening on `host` must demand a token."""
    return host not in LOOPBACK_HOSTS


def make_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def proof(token: bytes, nonce: bytes) -> str:
    return hmac.new(token, nonce, hashlib.sha256).hexdigest()


def verify(token: bytes, nonce: bytes, claimed: str | None) -> bool:
    return claimed is not None and hmac.compare_digest(proof(token, nonce), str(claimed))
