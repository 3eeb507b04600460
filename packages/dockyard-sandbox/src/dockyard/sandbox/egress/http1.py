"""HTTP/1.x request heads as the egress proxy reads them, and the one request it forwards.

:func:`read_head` reads one head (at most :data:`HEADER_CAP` bytes; the caller bounds the time)
into a :class:`Head`. :func:`origin_request` turns an absolute-URI ``GET``/``HEAD`` into the one
request sent upstream for plain HTTP (apt's mirrors):

* the ``Host`` header, if given (once), must name the request line's host and port, else 400:
  a shared front end is never asked for another site than the one checked;
* no body: ``Content-Length`` other than 0 or any ``Transfer-Encoding`` is a 400 (a GET/HEAD
  with a body is how request smuggling starts, and registries need none);
* hop-by-hop headers are dropped, ``Host`` is set from the checked URL and ``Connection: close``
  added, so the upstream answers exactly one request and closes.

The proxy never forwards a byte the client sent after that head (a pipelined second request is
dropped with the connection, ``proxy.py``).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from dockyard.sandbox.egress.allow import normalize_host

HEADER_CAP = 64 << 10
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# dropped from a forwarded request (``host`` is set from the checked URL)
_HOP = frozenset({
    "host", "connection", "proxy-connection", "keep-alive", "proxy-authorization",
    "proxy-authenticate", "te", "trailer", "upgrade",
})  # fmt: skip
REASONS = {
    200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 502: "Bad Gateway",
    503: "Service Unavailable",
}  # fmt: skip


class Refused(Exception):
    """A request the proxy answers with ``status``. ``host``: set when the refusal is of a host
    outside the allowlist and the installer table (what :meth:`Proxy.refused_hosts` reports)."""

    def __init__(self, status: int, why: str, host: str | None = None) -> None:
        super().__init__(why)
        self.status = status
        self.host = host


@dataclass(frozen=True)
class Head:
    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]  # (lower-case name, value), in order

    def values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k == name]


async def read_head(reader: asyncio.StreamReader) -> Head:
    """One request head (the reader's limit must be :data:`HEADER_CAP`), else :class:`Refused`."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as e:
        raise Refused(400, "request head over 64 KiB") from e
    except asyncio.IncompleteReadError as e:
        raise Refused(400, "the request ended before its head did") from e
    return parse_head(raw[:-4].decode("latin-1"))


def parse_head(text: str) -> Head:
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise Refused(400, "not an HTTP/1.x request line")
    headers = []
    for ln in lines[1:]:
        name, sep, value = ln.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise Refused(400, f"malformed header line {ln[:80]!r}")
        headers.append((name.lower(), value.strip()))
    return Head(parts[0], parts[1], parts[2], tuple(headers))


def split_hostport(netloc: str, default: int | None) -> tuple[str, int]:
    m = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^:\[\]]+)(?::([0-9]{1,5}))?", netloc)
    if not m or (m.group(2) is None and default is None):
        raise Refused(400, f"{netloc[:200]!r}: expected host:port")
    host = normalize_host(m.group(1))
    if host is None:
        raise Refused(400, f"{netloc[:200]!r}: not a host name")
    return host, int(m.group(2)) if m.group(2) else int(default or 0)


def absolute_http(head: Head) -> tuple[str, int, str]:
    """(host, port, origin-form path) of an absolute ``http://`` request target."""
    url = urlsplit(head.target)
    if url.scheme != "http" or not url.netloc or "@" in url.netloc:
        raise Refused(400, f"{head.method} {head.target[:200]!r}: only absolute http:// URLs")
    host, port = split_hostport(url.netloc, 80)
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    return host, port, path


def check_no_body(head: Head) -> None:
    lengths = head.values("content-length")
    if head.values("transfer-encoding") or any(v != "0" for v in lengths):
        raise Refused(400, f"a {head.method} request with a body")


def check_host_header(head: Head, host: str, port: int, default_port: int) -> None:
    """The ``Host`` header, if any, names ``host:port`` (module doc)."""
    given = head.values("host")
    if len(given) > 1:
        raise Refused(400, "more than one Host header")
    if given:
        try:
            h, p = split_hostport(given[0], default_port)
        except Refused as e:
            raise Refused(400, f"Host header {given[0][:100]!r} is not a host") from e
        if (h, p) != (host, port):
            raise Refused(400, f"Host header {given[0][:100]!r} is not the request's {host}")


def origin_request(head: Head, host: str, port: int, path: str) -> bytes:
    """The one request sent upstream for a plain-HTTP ``GET``/``HEAD`` (module doc)."""
    check_no_body(head)
    check_host_header(head, host, port, 80)
    kept = [f"{k}: {v}" for k, v in head.headers if k not in _HOP and k != "content-length"]
    hostline = f"Host: {host}" + ("" if port == 80 else f":{port}")
    req = [f"{head.method} {path} HTTP/1.1", hostline, *kept, "Connection: close", "", ""]
    return "\r\n".join(req).encode("latin-1")


def response(status: int, body: bytes, content_type: str = "text/plain") -> bytes:
    """A complete ``Connection: close`` response."""
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
