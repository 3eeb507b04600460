"""Which hosts and addresses a provisioning or verifier jail may reach through the proxy.

:class:`Allowlist` = the host names of the host's apt sources (``/etc/apt/sources.list``,
``sources.list.d/*.list`` one-line ``deb URI ...`` and deb822 ``*.sources`` ``URIs:``), PyPI
(``pypi.org``, ``files.pythonhosted.org``) and the operator's ``--registry HOST`` (``explicit``).
Host names are matched exactly, lower case, without a trailing dot (:func:`normalize_host`).

:func:`forbidden_address`: an address a registry name may not resolve to unless the operator
named the host: everything :mod:`ipaddress` does not call global (loopback, link-local,
RFC 1918, ULA, the IETF special-purpose registry as the running Python knows it), multicast,
and an explicit list so the answer does not depend on the Python version: RFC 5737
documentation nets, RFC 2544 benchmarking, RFC 6598 shared address space, NAT64
(``64:ff9b::/96``, ``64:ff9b:1::/48``), 6to4 (``2002::/16``), Teredo (``2001::/32``), the
IPv4-compatible ``::/96``, IPv6 documentation (``2001:db8::/32``, ``3fff::/20``). An
IPv4-mapped address (``::ffff:a.b.c.d``) is judged by the IPv4 address it carries.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

PYPI = ("pypi.org", "files.pythonhosted.org")
APT_SOURCES = Path("/etc/apt")
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")

# refused whatever ``is_global`` says (its lists changed between Python releases)
SPECIAL_NETS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
        "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
        "::/96", "::1/128", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/32",
        "2001:db8::/32", "2002::/16", "3fff::/20", "fc00::/7", "fe80::/10", "fec0::/10",
        "ff00::/8",
    )
)  # fmt: skip


def normalize_host(host: str) -> str | None:
    """``host`` lower-cased without a trailing dot, or None when it is not a DNS name / IP."""
    h = host.strip().lower().rstrip(".")
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(h))
    return h if len(h) <= 253 and _HOST.fullmatch(h) else None


def forbidden_address(addr: str) -> bool:
    """True for an address that is not a public unicast address (module doc)."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if not ip.is_global or ip.is_multicast:
        return True
    return any(ip in n for n in SPECIAL_NETS if n.version == ip.version)


def apt_source_hosts(root: Path = APT_SOURCES) -> set[str]:
    """Host names of the apt sources under ``root`` (one-line ``.list`` and deb822 ``.sources``;
    ``cdrom:``/``file:`` and commented-out entries are skipped)."""
    uris: list[str] = []
    lists = [root / "sources.list", *sorted((root / "sources.list.d").glob("*.list"))]
    for f in lists:
        with contextlib.suppress(OSError):
            for line in f.read_text(errors="replace").splitlines():
                words = line.split("#", 1)[0].split()
                if not words or words[0] not in ("deb", "deb-src"):
                    continue
                rest = words[1:]
                if rest and rest[0].startswith("["):  # [arch=amd64 signed-by=...]
                    while rest and not rest[0].endswith("]"):
                        rest = rest[1:]
                    rest = rest[1:]
                uris += rest[:1]
    for f in sorted((root / "sources.list.d").glob("*.sources")):
        with contextlib.suppress(OSError):
            for stanza in re.split(r"\n\s*\n", f.read_text(errors="replace")):
                fields = _deb822(stanza)
                if fields.get("enabled", "yes").lower() != "no":
                    uris += fields.get("uris", "").split()
    hosts = set()
    for u in uris:
        parts = urlsplit(u)
        if parts.scheme in ("http", "https") and parts.hostname:
            h = normalize_host(parts.hostname)
            if h:
                hosts.add(h)
    return hosts


def _deb822(stanza: str) -> dict[str, str]:
    out: dict[str, str] = {}
    key = None
    for line in stanza.splitlines():
        if line.startswith("#"):
            continue
        if line[:1] in (" ", "\t") and key:
            out[key] += " " + line.strip()
        elif ":" in line:
            k, v = line.split(":", 1)
            key = k.strip().lower()
            out[key] = v.strip()
    return out


@dataclass(frozen=True)
class Allowlist:
    """Registry host names. ``explicit``: the operator's own (may resolve to private addresses)."""

    hosts: frozenset[str]
    explicit: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def build(cls, registries: Iterable[str] = (), apt_root: Path = APT_SOURCES) -> Allowlist:
        """Host apt sources + PyPI + ``registries`` (raises ValueError for a bad name)."""
        explicit = set()
        for r in registries:
            h = normalize_host(r)
            if h is None:
                raise ValueError(f"--registry {r!r}: expected a host name (e.g. pypi.example.org)")
            explicit.add(h)
        hosts = apt_source_hosts(apt_root) | set(PYPI) | explicit
        return cls(frozenset(hosts), frozenset(explicit))

    def describe(self) -> str:
        return ", ".join(sorted(self.hosts))


def non_public_registries(apt_root: Path = APT_SOURCES) -> list[str]:
    """The default registries (apt sources, PyPI) this host resolves to a non-public address
    (a mirror): the proxy refuses them unless the operator names each with ``--registry``.
    Names that do not resolve are left out. Blocking (DNS)."""
    out = []
    for host in sorted(apt_source_hosts(apt_root) | set(PYPI)):
        try:
            infos = socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
        except OSError:
            continue
        if any(forbidden_address(str(i[4][0])) for i in infos):
            out.append(host)
    return out


def unnamed_mirrors_warning(registries: Iterable[str], apt_root: Path = APT_SOURCES) -> str | None:
    """What to tell the operator when default registries resolve to non-public addresses and
    ``registries`` (``--registry``) does not name them: the proxy will refuse them."""
    named = {normalize_host(r) for r in registries}
    unnamed = [h for h in non_public_registries(apt_root) if h not in named]
    if not unnamed:
        return None
    flags = " ".join(f"--registry {h}" for h in unnamed)
    return (
        f"{', '.join(unnamed)} resolve to a non-public address here (a mirror?): provisioning "
        f"jails will be refused them unless you name them: {flags}"
    )
