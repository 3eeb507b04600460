"""Provisioning egress: jails reach only the package registries, through a proxy of the service.

A provisioning jail that needs the network (a ``run`` step of an environment with
``network: true``, the apt jail of ``debs.py``) still gets its own network namespace (loopback
only, like every jail: bwrap ``--unshare-net``). Its only way out::

    jail netns                         | bind mount (ro)        | the service (root)
    pip/apt --http(s)_proxy--> 127.0.0.1:3128 --forwarder--> /opt/egress/proxy.sock --> Proxy
                                                                    allowlisted host:80/443 only

* :class:`Proxy`: a threaded HTTP proxy on a unix socket in a per-build dir (root-owned 0755;
  the socket owned by the build's uid, 0600; mounted read-only at :data:`MOUNT`). It serves
  ``CONNECT host:443`` (HTTPS tunnels) and absolute-URI ``GET``/``HEAD http://host[:80]/...``
  (apt's plain-http mirrors; sent upstream in origin form with ``Host`` set from the checked URL
  and ``Connection: close``, so one client connection reaches one host). Anything else is answered 403/405/400 and logged
  (:meth:`Proxy.drain`, into the build log). Host names are matched exactly (lower case) against
  the :class:`Allowlist`; the name is resolved by the service, and every address it resolves to
  must be public (not loopback, link-local, RFC 1918 / CGNAT / ULA private, multicast,
  unspecified or reserved: :func:`forbidden_address`) unless the operator named the host
  explicitly (``--registry``); the connection goes to an address so checked (no second lookup).
  Request fields are only ever a host name matched against the list and a port of {80, 443}:
  nothing becomes an option or a path.
* :data:`FORWARDER`: a few lines of socket relaying run in the jail by its uid, with the
  service's interpreter (``-I -S``): it listens on 127.0.0.1:``PORT`` and relays each
  connection to the unix socket, then daemonises so the step starts only once it listens
  (:func:`wrap_argv`). It dies with the jail's pid namespace.
* :func:`jail_env`: ``http_proxy``/``https_proxy`` (both cases) for pip, curl, apt...; apt is
  also given ``-o Acquire::http(s)::Proxy`` (``debs.py``), overriding a host apt proxy.

:class:`Allowlist` = the host names of the host's apt sources (``/etc/apt/sources.list``,
``sources.list.d/*.list`` one-line ``deb URI ...`` and deb822 ``*.sources`` ``URIs:``), PyPI
(``pypi.org``, ``files.pythonhosted.org``) and the operator's ``--registry HOST``. A build's
proxy is started before its first jail and closed (server stopped, open tunnels shut, the dir
removed) when the build ends, whether it succeeded, failed or timed out.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import shutil
import socket
import socketserver
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

MOUNT = "/opt/egress"  # under /opt: bwrap makes new parents 0700
SOCKET = "proxy.sock"
PORT = 3128  # inside the jail's own network namespace
PORTS = frozenset({80, 443})
PYPI = ("pypi.org", "files.pythonhosted.org")
APT_SOURCES = Path("/etc/apt")
HEADER_CAP = 64 << 10
CONNECT_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 300.0
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_LOCAL_NETS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
        "::/128", "::1/128", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    )
)  # fmt: skip

# Runs inside the jail: python -I -S -c FORWARDER PORT SOCKET
FORWARDER = r"""
import os, socket, sys, threading
port, path = int(sys.argv[1]), sys.argv[2]
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(64)
if os.fork():
    os._exit(0)
fd = os.open(os.devnull, os.O_RDWR)
for i in (0, 1, 2):
    os.dup2(fd, i)
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
def serve(c):
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        u.connect(path)
    except OSError:
        c.close()
        return
    threading.Thread(target=pump, args=(u, c), daemon=True).start()
    pump(c, u)
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def proxy_url() -> str:
    return f"http://127.0.0.1:{PORT}/"


def jail_env() -> dict[str, str]:
    """The proxy variables of a jail that reaches the registries (pip, apt, curl read them)."""
    url = proxy_url()
    return dict.fromkeys(("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"), url) | {
        "no_proxy": "",
        "NO_PROXY": "",
    }


def wrap_argv(python: str, argv: list[str]) -> list[str]:
    """``argv`` run after the forwarder listens (exit 96 when it cannot start)."""
    script = (
        '"$1" -I -S -c "$2" "$3" "$4" </dev/null || '
        "{ echo 'egress: the registry forwarder did not start' >&2; exit 96; }; "
        'shift 4; exec "$@"'
    )
    return ["/bin/sh", "-c", script, "egress", python, FORWARDER, str(PORT),
            f"{MOUNT}/{SOCKET}", *argv]  # fmt: skip


def normalize_host(host: str) -> str | None:
    """``host`` lower-cased without a trailing dot, or None when it is not a DNS name / IP."""
    h = host.strip().lower().rstrip(".")
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(h))
    return h if len(h) <= 253 and _HOST.fullmatch(h) else None


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


def forbidden_address(addr: str) -> bool:
    """True for an address of the host itself or a local network (module doc)."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in n for n in _LOCAL_NETS if n.version == ip.version)


class Refused(Exception):
    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


class Proxy:
    """The allowlisting proxy of one build (module doc). Use as a context manager."""

    def __init__(self, directory: Path, uid: int, allow: Allowlist) -> None:
        self.dir = directory
        self.allow = allow
        self._log: list[str] = []
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        directory.mkdir(mode=0o755)
        os.chmod(directory, 0o755)
        path = str(directory / SOCKET)
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        try:
            self._server = Server(path, Handler)
            os.chown(path, uid, uid)
            os.chmod(path, 0o600)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def bind(self) -> tuple[str, str]:
        """The read-only bind of the socket dir into a jail."""
        return str(self.dir), MOUNT

    def drain(self) -> str:
        """What was refused since the last call, one ``## egress: ...`` line each."""
        with self._lock:
            out, self._log = self._log, []
        return "".join(f"## egress: {m}\n" for m in out)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
        self._thread.join(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one client connection --------------------------------------------------------------
    def _track(self, s: socket.socket) -> None:
        with self._lock:
            self._conns.add(s)

    def _untrack(self, s: socket.socket) -> None:
        with self._lock:
            self._conns.discard(s)
        s.close()

    def _handle(self, client: socket.socket) -> None:
        self._track(client)
        up: socket.socket | None = None
        try:
            client.settimeout(CONNECT_TIMEOUT_S)
            head, rest = _read_head(client)
            lines = head.split("\r\n")
            method, target, version = ([*lines[0].split(" "), "", "", ""])[:3]
            if not version.startswith("HTTP/1."):
                raise Refused(400, "not an HTTP/1.x request")
            if method == "CONNECT":
                host, port = _split_hostport(target, None)
                up = self._open(host, port)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                upstream_first = rest
            elif method in ("GET", "HEAD"):
                url = urlsplit(target)
                if url.scheme != "http" or not url.netloc:
                    raise Refused(400, f"{method} {target[:200]!r}: only absolute http:// URLs")
                host, port = _split_hostport(url.netloc.rsplit("@", 1)[-1], 80)
                up = self._open(host, port)
                path = url.path or "/"
                if url.query:
                    path += "?" + url.query
                headers = [
                    ln for ln in lines[1:]
                    if ln and ln.split(":", 1)[0].strip().lower() not in _HOP
                ]  # fmt: skip
                hostline = f"Host: {host}" + ("" if port == 80 else f":{port}")
                req = [f"{method} {path} HTTP/1.1", hostline, *headers, "Connection: close", "", ""]
                upstream_first = "\r\n".join(req).encode("latin-1") + rest
            else:
                raise Refused(405, f"method {method[:20]!r} (only CONNECT, GET, HEAD)")
            if upstream_first:
                up.sendall(upstream_first)
            client.settimeout(IDLE_TIMEOUT_S)
            up.settimeout(IDLE_TIMEOUT_S)
            t = threading.Thread(target=_pump, args=(up, client), daemon=True)
            t.start()
            _pump(client, up)
            t.join(IDLE_TIMEOUT_S)
        except Refused as e:
            self._refuse(client, e.status, str(e))
        except (OSError, UnicodeError, ValueError) as e:
            with contextlib.suppress(OSError):
                self._refuse(client, 502, f"proxy error: {e}")
        finally:
            if up is not None:
                self._untrack(up)
            self._untrack(client)

    def _refuse(self, client: socket.socket, status: int, why: str) -> None:
        with self._lock:
            self._log.append(f"refused ({status}): {why}")
        log.info("egress refused (%s): %s", status, why)
        reason = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed"}.get(
            status, "Bad Gateway"
        )
        body = f"dockyard egress: {why}\n".encode()
        with contextlib.suppress(OSError):
            client.sendall(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )

    def _open(self, host: str, port: int) -> socket.socket:
        """A TCP connection to ``host:port`` if allowlisted (module doc), else :class:`Refused`."""
        if port not in PORTS:
            raise Refused(403, f"{host}:{port}: only ports 80 and 443 of a registry")
        if host not in self.allow.hosts:
            raise Refused(
                403, f"{host}:{port} is not a package registry (allowed: {self.allow.describe()})"
            )
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise Refused(502, f"{host}: cannot resolve ({e})") from e
        addrs = [(fam, sa) for fam, _, _, _, sa in infos]
        if host not in self.allow.explicit:
            bad = [str(sa[0]) for _, sa in addrs if forbidden_address(str(sa[0]))]
            if bad:
                raise Refused(
                    403,
                    f"{host} resolves to a local/private address ({bad[0]}); name it with "
                    "--registry to allow it",
                )
        err: OSError | None = None
        for fam, sa in addrs:
            s = socket.socket(fam, socket.SOCK_STREAM)
            self._track(s)
            s.settimeout(CONNECT_TIMEOUT_S)
            try:
                s.connect(sa)
                return s
            except OSError as e:
                err = e
                self._untrack(s)
        raise Refused(502, f"{host}:{port}: cannot connect ({err})")


# dropped from a forwarded request (``host``: set from the checked URL, so a shared front end
# cannot be asked for another site by a forged Host header)
_HOP = frozenset({
    "host", "connection", "proxy-connection", "keep-alive", "proxy-authorization",
    "proxy-authenticate", "te", "trailer", "upgrade",
})  # fmt: skip


def _read_head(s: socket.socket) -> tuple[str, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise Refused(400, "the request ended before its headers")
        buf += d
        if len(buf) > HEADER_CAP:
            raise Refused(400, "request headers over 64 KiB")
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


def _split_hostport(netloc: str, default: int | None) -> tuple[str, int]:
    m = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^:\[\]]+)(?::([0-9]{1,5}))?", netloc)
    if not m or (m.group(2) is None and default is None):
        raise Refused(400, f"{netloc[:200]!r}: expected host:port")
    host = normalize_host(m.group(1))
    if host is None:
        raise Refused(400, f"{netloc[:200]!r}: not a host name")
    return host, int(m.group(2)) if m.group(2) else int(default or 0)


def _pump(a: socket.socket, b: socket.socket) -> None:
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
