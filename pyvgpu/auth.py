"""Challenge-response with a shared token: the daemon sends a nonce, the client proves it holds the token.

csrc/auth.c computes the same proof with OpenSSL's HMAC.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

NONCE_BYTES = 32


def make_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def proof(token: bytes, nonce: bytes) -> str:
    return hmac.new(token, nonce, hashlib.sha256).hexdigest()


def verify(token: bytes, nonce: bytes, claimed: str | None) -> bool:
    return claimed is not None and hmac.compare_digest(proof(token, nonce), str(claimed))
