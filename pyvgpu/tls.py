"""TLS for the pyvgpu protocol: the daemon's context, what clients trust, and a self-signed daemon certificate.

Daemon: `--tls-cert PATH --tls-key PATH` (required, with a token, on any address but loopback; `pyvgpu daemon start
--host ADDR` creates a self-signed pair in $XDG_CONFIG_HOME/pyvgpu/tls/ when none is given).

Clients (libpvcore, csrc/core/ssl.c, reads the same settings; keep the two in step):
    PYVGPU_TLS=1|0              force TLS on or off (default: on when a CA or a fingerprint is configured)
    PYVGPU_TLS_CA=PATH          PEM bundle of trusted CAs (default $XDG_CONFIG_HOME/pyvgpu/tls/ca.pem, if present);
                                the daemon's certificate must chain to one and name the host the client dials
    PYVGPU_TLS_FINGERPRINT=FP[,FP...]   accepted daemon certificates, SHA-256 of their DER in hex, colons and a
                                "sha256:" prefix allowed (default: the lines of $XDG_CONFIG_HOME/pyvgpu/tls/fingerprints)
With both a CA and fingerprints the certificate must pass both checks; with PYVGPU_TLS=1 and neither, the system's
CA store and the host name are checked. There is no unverified mode.
"""
from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from pyvgpu import config

MIN_VERSION = ssl.TLSVersion.TLSv1_2


class TLSConfigError(Exception):
    """TLS settings that cannot be used (a missing file, a malformed fingerprint, a certificate that does not match)."""


def normalize_fingerprint(text: str) -> str:
    """'sha256:AB:CD:...' / 'abcd...' → 64 lowercase hex digits; TLSConfigError otherwise."""
    t = text.strip().lower().removeprefix("sha256:").replace(":", "")
    if len(t) != 64 or any(c not in "0123456789abcdef" for c in t):
        raise TLSConfigError(f"not a SHA-256 certificate fingerprint: {text.strip()!r}")
    return t


def fingerprint(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def cert_fingerprint(path: str | os.PathLike[str]) -> str:
    """Fingerprint of the first certificate of a PEM file."""
    try:
        pem = Path(path).read_text()
    except OSError as exc:
        raise TLSConfigError(f"cannot read certificate {path}: {exc.strerror}") from None
    try:
        return fingerprint(ssl.PEM_cert_to_DER_cert(pem[:pem.index("-----END CERTIFICATE-----") + 25]))
    except ValueError:
        raise TLSConfigError(f"{path} holds no PEM certificate") from None


def ca_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env["PYVGPU_TLS_CA"]) if env.get("PYVGPU_TLS_CA") else config.tls_dir() / "ca.pem"


def fingerprints_path() -> Path:
    return config.tls_dir() / "fingerprints"


@dataclass(frozen=True)
class ClientTLS:
    """What a client trusts: a CA bundle and/or pinned certificate fingerprints (none of both: the system CAs)."""
    ca: Path | None
    fingerprints: frozenset[str]

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = MIN_VERSION
        if self.ca is not None:
            try:
                ctx.load_verify_locations(cafile=str(self.ca))
            except (OSError, ssl.SSLError) as exc:
                raise TLSConfigError(f"cannot load TLS CA bundle {self.ca}: {exc}") from None
        elif self.fingerprints:
            # The pin is the identity: the chain and the name are not checked (a self-signed daemon certificate).
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx.load_default_certs()
        return ctx

    def check_peer(self, der: bytes | None, where: str) -> None:
        """After the handshake: the daemon's certificate must be one of the pinned ones (when pins are set)."""
        if self.fingerprints and (der is None or fingerprint(der) not in self.fingerprints):
            got = fingerprint(der) if der else "none"
            raise ssl.SSLCertVerificationError(
                f"daemon {where} presented certificate sha256:{got}, which is not a pinned fingerprint")


def client_config(env: Mapping[str, str] | None = None) -> ClientTLS | None:
    """The client's TLS settings from the environment and the config directory; None: plain TCP."""
    env = os.environ if env is None else env
    switch = env.get("PYVGPU_TLS", "").strip()
    if switch not in ("", "0", "1"):
        raise TLSConfigError(f"PYVGPU_TLS={switch!r}: use 1 or 0")
    ca = ca_path(env)
    if env.get("PYVGPU_TLS_CA") and not ca.is_file():
        raise TLSConfigError(f"PYVGPU_TLS_CA={ca}: no such file")
    if env.get("PYVGPU_TLS_FINGERPRINT"):
        pins = [p for p in env["PYVGPU_TLS_FINGERPRINT"].split(",") if p.strip()]
    else:
        try:
            lines = fingerprints_path().read_text().splitlines()
        except FileNotFoundError:
            lines = []
        pins = [ln.split("#", 1)[0] for ln in lines if ln.split("#", 1)[0].strip()]
    cfg = ClientTLS(ca if ca.is_file() else None, frozenset(normalize_fingerprint(p) for p in pins))
    if switch == "0" or (switch == "" and cfg.ca is None and not cfg.fingerprints):
        return None
    return cfg


def server_context(cert: str | os.PathLike[str], key: str | os.PathLike[str]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = MIN_VERSION
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"cannot load TLS certificate {cert} / key {key}: {exc}") from None
    return ctx


def make_self_signed(cert: Path, key: Path, names: list[str], days: int = 3650) -> str:
    """A self-signed certificate for `names` (host names or IP addresses) and its key (mode 0600) → fingerprint."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else "pyvgpu daemon")])
    alt: list[x509.GeneralName] = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
               .public_key(private.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True))
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    certificate = builder.sign(private, hashes.SHA256())
    config.private_dir(cert.parent)
    config.private_dir(key.parent)
    config.write_file(key, private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()), config.PRIVATE_FILE)
    der = certificate.public_bytes(serialization.Encoding.DER)
    config.write_file(cert, certificate.public_bytes(serialization.Encoding.PEM), config.PUBLIC_FILE)
    return fingerprint(der)


def daemon_cert_paths() -> tuple[Path, Path]:
    return config.tls_dir() / "daemon.crt", config.tls_dir() / "daemon.key"


def trust_fingerprint(fp: str, note: str = "") -> Path:
    """Add a pinned fingerprint to this user's client trust file (no duplicates)."""
    fp = normalize_fingerprint(fp)
    path = fingerprints_path()
    config.private_dir(path.parent)
    existing = path.read_text().splitlines() if path.exists() else []
    if not any(ln.split("#", 1)[0].strip().lower() == fp for ln in existing):
        # who is trusted: nobody else may add to it
        config.write_file(path, f"{fp}{'  # ' + note if note else ''}\n".encode(), config.PRIVATE_FILE, append=True)
    return path
