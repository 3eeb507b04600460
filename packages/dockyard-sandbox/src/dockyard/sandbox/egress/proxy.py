"""The allowlisting proxy of one build (or one verifier / session): bounded, one event loop.

It listens on a unix socket in its own directory (root-owned 0755; the socket owned by the
jail's uid, 0600; the directory mounted read-only at ``jailside.MOUNT``) and serves:

* ``CONNECT host:443`` to a registry (:class:`~.allow.Allowlist`): a tunnel to an address of the
  host the service resolved and checked (:func:`~.allow.forbidden_address`; no second lookup);
* ``CONNECT`` to a host of the installer table (``installers.py``): answered by the proxy itself
  over TLS with a certificate of the service's CA (``tls.py``), never resolved, never forwarded;
* an absolute-URI ``GET``/``HEAD http://host[:80]/...`` to a registry (apt's plain-http mirrors):
  exactly one request forwarded (``http1.origin_request``), the response relayed, the connection
  closed; bytes the client sent after that head are never read or forwarded.

Anything else is answered 400/403/404/405 and logged (:meth:`Proxy.drain`, into the build log);
a host outside the registries and the table is also remembered (:meth:`Proxy.refused_hosts`, for
a verifier's ``needs_network`` status). Request fields are only ever a host name matched against
the list and a port of {80, 443}: nothing becomes an option or a path.

Bounds (threat 25: a step may skip the jail's forwarder and connect to the socket directly; that
gains nothing, because every bound is enforced here, per :class:`Proxy`, i.e. per build):

* one event-loop thread and a :data:`POOL` of threads for name resolution and installer fetches:
  no thread per connection;
* at most ``max_connections`` client connections at once; one more is answered 503 and closed
  at once (its fd lives microseconds), the kernel's backlog (:data:`BACKLOG`) holds the rest;
* a request head must be complete within ``head_deadline_s`` of the connection's acceptance, a
  total deadline (a byte every second does not extend it); then 408 and close;
* a tunnel or a relayed response with no byte in either direction for ``idle_s`` is closed;
  a closing connection gets :data:`FLUSH_S` to take its last bytes, then is aborted;
* the socket accepts only the jail's uid (``SO_PEERCRED``), beside its 0600 mode;
* the refusal log keeps :data:`LOG_LINES` lines, refused hosts :data:`REFUSED_HOSTS`, then
  both count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import struct
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dockyard.sandbox.egress.http1 as http1
import dockyard.sandbox.egress.tls as tls
from dockyard.sandbox.egress.allow import Allowlist, forbidden_address
from dockyard.sandbox.egress.http1 import Refused
from dockyard.sandbox.egress.installers import InstallerTable
from dockyard.sandbox.egress.jailside import CA_BUNDLE, CA_FILE, MOUNT, SOCKET

log = logging.getLogger(__name__)

PORTS = frozenset({80, 443})
MAX_CONNECTIONS = 64  # per proxy: pip opens a handful, uv up to ~10 through a proxy
HEAD_DEADLINE_S = 10.0  # a client sends its head in one write; 10 s is slack for a loaded host
IDLE_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 30.0
BACKLOG = 64
FLUSH_S = 10.0  # a closing connection's last bytes; it still counts against the cap meanwhile
POOL = 3
LOG_LINES = 200
REFUSED_HOSTS = 64  # distinct hosts kept for refused_hosts(); more are only counted


class Proxy:
    """The allowlisting proxy of one build (module doc). Use as a context manager."""

    def __init__(
        self,
        directory: Path,
        uid: int,
        allow: Allowlist,
        *,
        installers: InstallerTable | None = None,
        max_connections: int = MAX_CONNECTIONS,
        head_deadline_s: float = HEAD_DEADLINE_S,
        idle_s: float = IDLE_TIMEOUT_S,
        ports: frozenset[int] = PORTS,
    ) -> None:
        self.dir = directory
        self.uid = uid
        self.allow = allow
        self.installers = InstallerTable.default() if installers is None else installers
        if both := self.installers.hosts & allow.hosts:
            raise ValueError(
                f"{', '.join(sorted(both))}: a registry cannot also be an installer-table host "
                "(the proxy would intercept its TLS)"
            )
        self.max_connections = max_connections
        self.head_deadline_s = head_deadline_s
        self.idle_s = idle_s
        self.ports = ports  # {80, 443}; tests reach a local fake upstream on another port
        self._log: list[str] = []
        self._dropped = 0
        self._refused_hosts: set[str] = set()
        self._more_hosts = 0
        self._lock = threading.Lock()
        self._active = 0
        self._tasks: set[asyncio.Task[None]] = set()
        directory.mkdir(mode=0o755)
        os.chmod(directory, 0o755)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            tls.write_trust(directory / CA_FILE, directory / CA_BUNDLE, self.installers.hosts)
            sock.bind(str(directory / SOCKET))
            os.chown(directory / SOCKET, uid, uid)
            os.chmod(directory / SOCKET, 0o600)
            sock.listen(BACKLOG)
        except BaseException:
            sock.close()
            shutil.rmtree(directory, ignore_errors=True)
            raise
        self._pool = ThreadPoolExecutor(POOL, thread_name_prefix="egress")
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(self._pool)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        sock.setblocking(False)
        self._sock = sock
        self._acceptor = asyncio.run_coroutine_threadsafe(self._accept_loop(), self._loop)

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def bind(self) -> tuple[str, str]:
        """The read-only bind of the socket dir into a jail."""
        return str(self.dir), MOUNT

    def drain(self) -> str:
        """What was refused since the last call, one ``## egress: ...`` line each."""
        with self._lock:
            out, self._log = self._log, []
            dropped, self._dropped = self._dropped, 0
        more = [f"## egress: {dropped} more refusals not shown\n"] if dropped else []
        return "".join([*(f"## egress: {m}\n" for m in out), *more])

    def refused_hosts(self) -> list[str]:
        """Host names asked for during the proxy's life that are neither a registry nor in the
        installer table, or that resolved to a forbidden address (sorted; never cleared; the
        first :data:`REFUSED_HOSTS` distinct ones)."""
        with self._lock:
            return sorted(self._refused_hosts)

    def needs_network(self) -> str | None:
        """None, or the ``needs_network`` detail of a run that asked for hosts outside the
        registries and the installer table (names them: what the run would need opened)."""
        hosts = self.refused_hosts()
        if not hosts:
            return None
        more = f" and {self._more_hosts} more" if self._more_hosts else ""
        return (
            f"needs network access to {', '.join(hosts)}{more}: not a package registry or an "
            "installer-table URL of this sandbox (the operator may add a registry with "
            "--registry HOST)"
        )

    def connections(self) -> int:
        """Client connections open now."""
        return self._active

    def close(self) -> None:
        if self._loop.is_running():
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    async def _shutdown(self) -> None:
        self._acceptor.cancel()
        self._sock.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one client connection --------------------------------------------------------------
    async def _accept_loop(self) -> None:
        """Accept one connection at a time: over the cap, answer 503 and close it at once (no
        transport, no task), so the fds in use stay within cap + 2."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as e:  # EMFILE and the like: back off, the backlog holds the rest
                log.warning("egress: accept failed: %s", e)
                await asyncio.sleep(0.1)
                continue
            if self._active >= self.max_connections:
                self._note(503, f"over {self.max_connections} connections at once")
                with contextlib.suppress(OSError):
                    conn.send(http1.response(503, b"dockyard egress: too many connections\n"))
                conn.close()
                continue
            self._active += 1
            task = loop.create_task(self._connection(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connection(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        made: asyncio.Future[asyncio.StreamWriter] = loop.create_future()
        reader = asyncio.StreamReader(limit=http1.HEADER_CAP)
        # a server-side stream (start_tls then speaks as the server, for the installer table)
        protocol = asyncio.StreamReaderProtocol(reader, lambda _r, w: made.set_result(w))
        try:
            await loop.connect_accepted_socket(lambda: protocol, sock=conn)
            writer = await made
        except OSError:
            conn.close()
            self._active -= 1
            return
        try:
            await self._serve(reader, writer)
        except Refused as e:
            await self._refuse(writer, e)
        except (OSError, TimeoutError, ValueError) as e:
            await self._refuse(writer, Refused(502, f"proxy error: {type(e).__name__}: {e}"))
        except Exception as e:  # one connection's bug never stops the proxy; logged in full
            log.exception("egress: a connection failed")
            await self._refuse(writer, Refused(502, f"proxy error: {type(e).__name__}"))
        finally:
            await _close(writer)
            self._active -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer_uid(writer)
        if peer not in (self.uid, None):
            raise Refused(403, f"a connection from uid {peer}, not the jail's {self.uid}")
        try:
            async with asyncio.timeout(self.head_deadline_s):
                head = await http1.read_head(reader)
        except TimeoutError:
            raise Refused(
                408, f"no complete request head within {self.head_deadline_s:g} s"
            ) from None
        if head.method == "CONNECT":
            host, port = http1.split_hostport(head.target, None)
            if host in self.installers.hosts and port == 443:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await self.installers.serve_tls(self, reader, writer, host)
                return
            up_r, up_w = await self._open(host, port)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await self._relay([(reader, up_w), (up_r, writer)], up_w)
        elif head.method in ("GET", "HEAD"):
            host, port, path = http1.absolute_http(head)
            request = http1.origin_request(head, host, port, path)
            up_r, up_w = await self._open(host, port)
            up_w.write(request)
            await self._relay([(up_r, writer)], up_w)
        else:
            raise Refused(405, f"method {head.method[:20]!r} (only CONNECT, GET, HEAD)")

    async def _relay(
        self,
        pairs: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]],
        upstream: asyncio.StreamWriter,
    ) -> None:
        """Copy each (reader → writer) until all end; stop when no byte moved for ``idle_s``."""
        loop = asyncio.get_running_loop()
        last = [loop.time()]

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(65536):
                last[0] = loop.time()
                w.write(data)
                await w.drain()
            if w.can_write_eof():
                w.write_eof()

        tasks = [asyncio.ensure_future(pump(r, w)) for r, w in pairs]
        try:
            while not all(t.done() for t in tasks):
                left = last[0] + self.idle_s - loop.time()
                if left <= 0:
                    self._note(408, f"closed a connection idle for {self.idle_s:g} s")
                    break
                await asyncio.wait(tasks, timeout=left, return_when=asyncio.FIRST_EXCEPTION)
                if any(t.done() and t.exception() for t in tasks):
                    break
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await _close(upstream)

    async def _open(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to an allowlisted ``host:port`` (module doc), else :class:`Refused`."""
        loop = asyncio.get_running_loop()
        addrs = await loop.run_in_executor(None, self.resolve, host, port)
        err: Exception | None = None
        for fam, sa in addrs:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    return await asyncio.open_connection(sa[0], sa[1], family=fam)
            except (OSError, TimeoutError) as e:
                err = e
        raise Refused(502, f"{host}:{port}: cannot connect ({err})")

    def resolve(self, host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]:
        """The checked addresses of an allowlisted ``host:port`` (blocking; module doc)."""
        if port not in self.ports:
            raise Refused(403, f"{host}:{port}: only ports 80 and 443 of a registry", host)
        if host not in self.allow.hosts:
            raise Refused(
                403,
                f"{host}:{port} is not a package registry (allowed: {self.allow.describe()})",
                host,
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
                    f"{host} resolves to a non-public address ({bad[0]}); name it with "
                    "--registry to allow it",
                    host,
                )
        return addrs

    # -- the log ------------------------------------------------------------------------------
    def _note(self, status: int, why: str, host: str | None = None) -> None:
        with self._lock:
            if host is not None and host not in self._refused_hosts:
                if len(self._refused_hosts) < REFUSED_HOSTS:
                    self._refused_hosts.add(host)
                else:
                    self._more_hosts += 1
            if len(self._log) < LOG_LINES:
                self._log.append(f"refused ({status}): {why}")
            else:
                self._dropped += 1
        log.info("egress refused (%s): %s", status, why)

    async def _refuse(self, writer: asyncio.StreamWriter, e: Refused) -> None:
        self._note(e.status, str(e), e.host)
        if not writer.is_closing():
            writer.write(http1.response(e.status, f"dockyard egress: {e}\n".encode()))
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(2):
                    await writer.drain()


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close after what is buffered went out (``drain`` leaves up to the low-water mark
    unsent: an abort would truncate a response), for :data:`FLUSH_S` at most, else abort."""
    writer.close()
    try:
        async with asyncio.timeout(FLUSH_S):
            await writer.wait_closed()
    except (OSError, TimeoutError):
        writer.transport.abort()
    except asyncio.CancelledError:
        writer.transport.abort()
        raise


def _peer_uid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    _pid, uid, _gid = struct.unpack(
        "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    )
    return uid
