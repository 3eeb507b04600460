"""The egress proxy's request handling and bounds, against the Proxy class and a local upstream.

Threat rows 14 and 25 (issue 34, items 3 and 4): a plain-HTTP request is forwarded one at a
time (its Host header checked against the request line, no body, nothing pipelined behind it,
the connection closed after the response); a request head has a total deadline; connections are
capped per proxy; a tunnel idle past its deadline is closed; only the jail's uid may connect;
hosts refused are reported (``Proxy.refused_hosts``). The fake upstream records every byte it
receives. The proof through a real jail is ``test_egress_limits.py`` and ``test_egress.py``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.sandbox.egress import SOCKET, Allowlist, Proxy
from dockyard.sandbox.egress.proxy import REFUSED_HOSTS

LOCAL = Allowlist(frozenset({"localhost"}), frozenset({"localhost"}))  # named: may be loopback


class Upstream:
    """A TCP server on localhost that records what it receives and answers one response."""

    def __init__(self) -> None:
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.received: list[bytes] = []
        self.accepted = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        buf = b""
        c.settimeout(5)
        try:
            while b"\r\n\r\n" not in buf and (d := c.recv(65536)):
                buf += d
            if buf.startswith(b"ECHO"):  # a tunnel: echo until EOF
                c.sendall(buf)
                while d := c.recv(65536):
                    c.sendall(d)
                return
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            time.sleep(0.3)  # anything pipelined behind the head would arrive meanwhile
            c.settimeout(0.2)
            with contextlib.suppress(OSError):
                while d := c.recv(65536):
                    buf += d
        finally:
            self.received.append(buf)
            c.close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    u = Upstream()
    yield u
    u.srv.close()


def _proxy(tmp_path: Path, up: Upstream, **kw) -> Proxy:
    return Proxy(tmp_path / "egress", os.getuid(), LOCAL, ports=frozenset({up.port}), **kw)


def _talk(path: Path, data: bytes, timeout: float = 10) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        with contextlib.suppress(BrokenPipeError):  # refused before the request was read
            s.sendall(data)
        out = b""
        with contextlib.suppress(ConnectionResetError):  # unread request bytes: a reset, not EOF
            while chunk := s.recv(65536):
                out += chunk
        return out


def test_plain_http_forwards_one_request_and_nothing_behind_it(tmp_path: Path, upstream: Upstream):
    port = upstream.port
    with _proxy(tmp_path, upstream) as p:
        first = (
            f"GET http://localhost:{port}/dists/InRelease HTTP/1.1\r\nHost: localhost:{port}\r\n"
            "Proxy-Authorization: secret\r\nUser-Agent: apt\r\n\r\n"
        ).encode()
        smuggled = b"GET /admin HTTP/1.1\r\nHost: internal.example\r\n\r\n"
        out = _talk(p.dir / SOCKET, first + smuggled)
        assert out.startswith(b"HTTP/1.1 200 OK"), out
        assert out.endswith(b"ok"), out
        t0 = time.monotonic()
        while not upstream.received and time.monotonic() - t0 < 5:  # it listens 0.3 s more
            time.sleep(0.05)
        assert upstream.accepted == 1
        (got,) = upstream.received
        assert got.startswith(b"GET /dists/InRelease HTTP/1.1\r\n"), got
        assert f"\r\nhost: localhost:{port}\r\n".encode() in got.lower()
        assert b"\r\nConnection: close\r\n" in got
        assert b"secret" not in got  # hop-by-hop and proxy headers dropped
        assert b"/admin" not in got  # nothing pipelined
        assert b"internal.example" not in got
        assert got.count(b"\r\n\r\n") == 1


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ("Host: other.example\r\n", b"is not the request's localhost"),
        ("Host: localhost:81\r\n", b"is not the request's localhost"),
        ("Host: localhost:{port}\r\nHost: localhost:{port}\r\n", b"more than one Host header"),
        ("Host: localhost:{port}\r\nContent-Length: 5\r\n", b"with a body"),
        ("Host: localhost:{port}\r\nTransfer-Encoding: chunked\r\n", b"with a body"),
        ("Bad header\r\n", b"malformed header line"),
    ],
)  # fmt: skip
def test_plain_http_refusals_never_reach_upstream(
    tmp_path: Path, upstream: Upstream, extra: str, why: bytes
):
    port = upstream.port
    with _proxy(tmp_path, upstream) as p:
        req = f"GET http://localhost:{port}/ HTTP/1.1\r\n{extra.format(port=port)}\r\nhello"
        out = _talk(p.dir / SOCKET, req.encode())
        assert out.startswith(b"HTTP/1.1 400 Bad Request"), out
        assert why in out, out
        assert upstream.accepted == 0
        assert "refused (400)" in p.drain()


def test_the_head_deadline_is_total_not_per_byte(tmp_path: Path, upstream: Upstream):
    with _proxy(tmp_path, upstream, head_deadline_s=1.0) as p:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(p.dir / SOCKET))
        t0 = time.monotonic()
        out = b""
        with s:
            s.settimeout(0.1)
            while time.monotonic() - t0 < 5:
                with contextlib.suppress(OSError):  # once closed: EPIPE, the answer is queued
                    s.send(b"G")  # a byte every 100 ms: a per-byte timeout would never fire
                try:
                    chunk = s.recv(4096)
                except TimeoutError:
                    continue
                except OSError:
                    break
                out += chunk
                if not chunk or b"\r\n\r\n" in out:
                    break
        took = time.monotonic() - t0
        assert out.startswith(b"HTTP/1.1 408"), out
        assert 0.9 < took < 3.0, took  # 1 s, with slack for a loaded machine
        while p.connections() and time.monotonic() - t0 < 5:  # the proxy's side closes too
            time.sleep(0.01)
        assert p.connections() == 0


def test_connections_are_capped_per_proxy(tmp_path: Path, upstream: Upstream):
    with _proxy(tmp_path, upstream, max_connections=3) as p:
        held = []
        for _ in range(3):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(p.dir / SOCKET))
            held.append(s)
        deadline = time.monotonic() + 5
        while p.connections() < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert p.connections() == 3
        out = _talk(p.dir / SOCKET, b"", timeout=5)
        assert out.startswith(b"HTTP/1.1 503"), out  # at once, not after a deadline
        held.pop().close()
        deadline = time.monotonic() + 5
        while p.connections() > 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        req = f"GET http://localhost:{upstream.port}/ HTTP/1.1\r\n\r\n".encode()
        assert _talk(p.dir / SOCKET, req).endswith(b"ok")  # a freed slot serves again
        for s in held:
            s.close()
        assert "over 3 connections at once" in p.drain()


def test_an_idle_tunnel_is_closed_a_busy_one_is_not(tmp_path: Path, upstream: Upstream):
    with _proxy(tmp_path, upstream, idle_s=1.5) as p:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(p.dir / SOCKET))
        s.settimeout(5)
        with s:
            s.sendall(f"CONNECT localhost:{upstream.port} HTTP/1.1\r\n\r\n".encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            t0 = time.monotonic()
            s.sendall(b"ECHO\r\n\r\n")
            for i in range(8):  # 2.4 s of traffic, a byte every 0.3 s: past idle_s
                assert s.recv(4096)
                time.sleep(0.3)
                s.sendall(str(i).encode())
            assert s.recv(4096) == b"7"
            busy = time.monotonic() - t0
            assert busy > 2.0
            t1 = time.monotonic()
            assert s.recv(4096) == b""  # then silence: closed by the idle deadline
            assert 1.3 < time.monotonic() - t1 < 4.0
        assert "idle for 1.5 s" in p.drain()


def test_only_the_jails_uid_may_connect_and_refused_hosts_are_kept(tmp_path: Path):
    with Proxy(tmp_path / "egress", 54321, LOCAL) as p:  # we connect as another uid
        out = _talk(p.dir / SOCKET, b"CONNECT localhost:443 HTTP/1.1\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 403"), out
        assert b"not the jail's 54321" in out, out
    with Proxy(tmp_path / "egress", os.getuid(), LOCAL) as p:
        for host in ("example.com", "github.com", "example.com"):
            _talk(p.dir / SOCKET, f"CONNECT {host}:443 HTTP/1.1\r\n\r\n".encode())
        _talk(p.dir / SOCKET, b"GET http://localhost:80/ HTTP/1.1\r\nHost: x\r\n\r\n")  # a 400
        assert p.refused_hosts() == ["example.com", "github.com"]
        p.drain()
        assert p.refused_hosts() == ["example.com", "github.com"]  # not cleared by drain
        for i in range(REFUSED_HOSTS + 5):  # bounded: distinct names beyond the cap are counted
            _talk(p.dir / SOCKET, f"CONNECT h{i}.example:443 HTTP/1.1\r\n\r\n".encode())
        assert len(p.refused_hosts()) == REFUSED_HOSTS
        assert "and 7 more" in (p.needs_network() or "")
        assert "more refusals not shown" not in p.drain()  # 69 lines: under the log's cap
