"""The service's certificate authority for the installer table's HTTPS hosts.

The proxy answers ``https://astral.sh/uv/install.sh`` itself (``installers.py``), so it must
speak TLS as that host. A CA made in memory when the service first needs it (per process and
per set of table hosts; EC P-256) signs a leaf certificate for each table host. Its key never
leaves the service's memory (leaf keys pass through a 0700 temporary file only while
:mod:`ssl` loads them). The CA carries a critical *name constraint* permitting only the table's
host names: even its own key could not vouch for ``pypi.org``, and registries are never
intercepted (their tunnels keep the real end-to-end TLS).

Trust path (chosen so every common client trusts it with no change to the jail's root file
system): :func:`write_trust` writes the CA certificate and a bundle = the host's public roots
(the system bundle OpenSSL uses, else certifi's) + the CA into the proxy's directory, mounted
read-only in the jail at ``/opt/egress``; ``jailside.jail_env`` points ``SSL_CERT_FILE``,
``CURL_CA_BUNDLE``, ``REQUESTS_CA_BUNDLE``, ``PIP_CERT``, ``GIT_SSL_CAINFO`` at the bundle and
``NODE_EXTRA_CA_CERTS`` at the CA alone. A client that ignores all of these (e.g. one pinned to
a compiled-in root list) fails the table's hosts with a certificate error and nothing else.
"""

from __future__ import annotations

import datetime as dt
import os
import ssl
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = dt.timedelta(days=90)
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")

_lock = threading.Lock()
_authorities: dict[frozenset[str], Authority] = {}


class Authority:
    """A CA for ``hosts`` and the server contexts of its leaf certificates (module doc)."""

    def __init__(self, hosts: frozenset[str]) -> None:
        self.hosts = hosts
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        name = x509.Name([
            x509.NameAttribute(NameOID.COMMON_NAME, f"dockyard sandbox egress CA {os.getpid()}")
        ])  # fmt: skip
        b = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
        )
        if hosts:
            permitted = [x509.DNSName(h) for h in sorted(hosts)]
            b = b.add_extension(x509.NameConstraints(permitted, None), critical=True)
        self.cert = b.sign(self._key, hashes.SHA256())
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def context(self, host: str) -> ssl.SSLContext:
        """A server context presenting a leaf certificate for ``host`` (a table host)."""
        if host not in self.hosts:
            raise ValueError(f"{host} is not a host of the installer table")
        with self._lock:
            if host not in self._contexts:
                self._contexts[host] = self._leaf_context(host)
            return self._contexts[host]

    def _leaf_context(self, host: str) -> ssl.SSLContext:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(self.cert.not_valid_after_utc)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])
        with tempfile.TemporaryDirectory(prefix="dockyard-egress-leaf-") as d:  # 0700
            path = Path(d) / "leaf.pem"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(
                    key.private_bytes(
                        serialization.Encoding.PEM,
                        serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption(),
                    )
                )
                f.write(cert.public_bytes(serialization.Encoding.PEM) + self.pem)
            ctx.load_cert_chain(path)
        return ctx


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def authority(hosts: Iterable[str]) -> Authority:
    """The service's CA for this set of table hosts (made once per process)."""
    key = frozenset(hosts)
    with _lock:
        if key not in _authorities:
            _authorities[key] = Authority(key)
        return _authorities[key]


def system_roots() -> bytes:
    """The host's public root certificates (PEM), as OpenSSL finds them, else certifi's."""
    paths = [ssl.get_default_verify_paths().cafile, *SYSTEM_BUNDLES]
    for p in paths:
        if p and os.path.isfile(p):
            return Path(p).read_bytes()
    try:
        # lazy: certifi is not a dependency; only a host without a system bundle needs it
        import certifi
    except ImportError:
        return b""
    return Path(certifi.where()).read_bytes()


def write_trust(ca_path: Path, bundle_path: Path, hosts: Iterable[str]) -> None:
    """The CA certificate and the bundle (public roots + CA) a jail trusts (module doc)."""
    pem = authority(hosts).pem
    roots = system_roots()
    ca_path.write_bytes(pem)
    bundle_path.write_bytes(roots.rstrip(b"\n") + b"\n" + pem if roots else pem)
    for p in (ca_path, bundle_path):
        os.chmod(p, 0o644)
