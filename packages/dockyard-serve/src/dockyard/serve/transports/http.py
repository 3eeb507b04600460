"""HTTP transport: chunked uploads to a remote engine.

The receiver runs a small threaded HTTP server (stdlib) in the engine process; the sender
streams each bucket as one ``PUT /weights`` request with ``Transfer-Encoding: chunked``: the
tensors' own memory goes onto the socket in ``chunk_bytes`` pieces (no packing copy on the
sender), the receiver reads them into one buffer and hands out numpy views of it.

    PUT /weights
    X-Dockyard-Header: {"version": v, "index": i, "last": ..., "nbytes": ..., "entries": [...],
                        "checksum": crc32 or null}
    <chunked body: the tensors at the header's offsets, zero padding between them>

Responses: 200 once the bucket is queued for the engine (the queue holds at most ``max_queued``
buckets, so memory is bounded and a stalled engine makes the sender wait, then time out);
4xx with a JSON ``error`` otherwise (checksum mismatch, wrong order, malformed header). A sender
that dies mid-upload ends its request early: the receiver raises at once, naming the peer; one
that goes silent between buckets trips ``timeout_s``.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import numpy as np

from dockyard.core.interfaces import (
    WeightBucket,
    WeightReceiver,
    WeightSender,
    WeightSyncError,
    WeightSyncTimeout,
)
from dockyard.serve.transports import wire

TRANSPORT = "http"
_ZEROS = bytes(wire.ALIGN)


def _stream(
    tensors: dict[str, np.ndarray], header: wire.Header, chunk: int
) -> Iterator[bytes | memoryview]:
    """The body: each tensor's bytes at its offset, zero padding in between, in <= chunk pieces."""
    pos = 0
    for (_, _, _, off), arr in zip(header.entries, tensors.values(), strict=True):
        if off > pos:
            yield _ZEROS[: off - pos]
            pos = off
        mv = memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
        for s in range(0, len(mv), chunk):
            yield mv[s : s + chunk]
        pos += arr.nbytes


class HttpSender(WeightSender):
    """Trainer side.

    Args:
        url: the receiver's base URL, e.g. ``http://engine-0:8500``.
        timeout_s: limit on connecting (retried until then) and on every read/write.
        bucket_bytes, checksum: as for every transport.
        chunk_bytes: size of the pieces written to the socket.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 60.0,
        bucket_bytes: int = 256 << 20,
        checksum: bool = False,
        chunk_bytes: int = 4 << 20,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.bucket_bytes = bucket_bytes
        self.checksum = checksum
        self.chunk_bytes = chunk_bytes
        self._client: Any = None

    def send(self, buckets: Iterable[dict[str, np.ndarray]], version: int) -> None:
        peer = f"receiver at {self.url}"
        if self._client is None:  # one client (connection pool, TLS context) for all updates
            self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s))
        for index, last, tensors in wire.with_last(wire.rebucket(buckets, self.bucket_bytes)):
            header = wire.layout(tensors, version, index, last)
            if self.checksum:
                crc = 0
                for piece in _stream(tensors, header, self.chunk_bytes):
                    crc = zlib.crc32(piece, crc)
                header.checksum = crc
            self._put(self._client, header, tensors, peer)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _put(
        self, client: Any, header: wire.Header, tensors: dict[str, np.ndarray], peer: str
    ) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                r = client.put(
                    f"{self.url}/weights",
                    headers={"X-Dockyard-Header": json.dumps(header.to_json())},
                    content=_stream(tensors, header, self.chunk_bytes),
                )
                break
            except httpx.ConnectError as e:
                if header.index > 0 or time.monotonic() >= deadline:
                    raise WeightSyncTimeout(
                        f"{TRANSPORT}: cannot reach {peer} within {self.timeout_s:g} s: {e}"
                    ) from e
                time.sleep(0.05)
            except httpx.TimeoutException as e:
                raise WeightSyncTimeout(
                    f"{TRANSPORT}: {peer} did not answer within {self.timeout_s:g} s "
                    f"(bucket {header.index} of version {header.version})"
                ) from e
            except httpx.HTTPError as e:
                raise WeightSyncError(
                    f"{TRANSPORT}: upload of bucket {header.index} to {peer} failed: {e}"
                ) from e
        if r.status_code != 200:
            try:
                msg = r.json().get("error", r.text)
            except ValueError:
                msg = r.text
            raise WeightSyncError(
                f"{TRANSPORT}: {peer} rejected bucket {header.index} of version "
                f"{header.version} (HTTP {r.status_code}): {msg}"
            )


class _Failure:
    def __init__(self, exc: WeightSyncError) -> None:
        self.exc = exc


class HttpReceiver(WeightReceiver):
    """Engine side: serves ``PUT /weights`` on ``host:port`` (``port=0``: any free port, see
    :attr:`port` after :meth:`open`). Opens lazily in the process that first receives."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        timeout_s: float = 60.0,
        max_queued: int = 2,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.max_queued = max_queued
        self._server: ThreadingHTTPServer | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, max_queued))
        self._last_peer = "no sender yet"
        self._expected: tuple[int, int] | None = (
            None  # (version, next index) of the update in progress
        )

    def spec(self) -> dict[str, Any]:
        return {
            "type": "http",
            "host": self.host,
            "port": self.port,
            "timeout_s": self.timeout_s,
            "max_queued": self.max_queued,
        }

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def open(self) -> None:
        if self._server is not None:
            return
        self._server = ThreadingHTTPServer((self.host, self.port), _make_handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(
            target=self._server.serve_forever, name="dockyard-http-receiver", daemon=True
        ).start()

    def receive(self) -> Iterator[WeightBucket]:
        self.open()
        while True:
            try:
                item = self._queue.get(timeout=self.timeout_s)
            except queue.Empty as e:
                raise WeightSyncTimeout(
                    f"{TRANSPORT}: no bucket arrived at {self.url} within "
                    f"{self.timeout_s:g} s (last sender: {self._last_peer})"
                ) from e
            if isinstance(item, _Failure):
                raise item.exc
            header, buf = item
            yield WeightBucket(header.version, header.index, header.last, wire.unpack(buf, header))
            if header.last:
                return

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "timeout_s": self.timeout_s,
            "max_queued": self.max_queued,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    # -- called from the server's threads ------------------------------------------------
    def _fail(self, msg: str) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put(_Failure(WeightSyncError(msg)), timeout=self.timeout_s)


class _Handler(BaseHTTPRequestHandler):
    """``PUT /weights``: one bucket per request, into its receiver's queue (:func:`_make_handler`
    binds ``rx``)."""

    rx: HttpReceiver
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        rx = self.rx
        peer = f"sender at {self.client_address[0]}:{self.client_address[1]}"
        rx._last_peer = peer
        if self.path.rstrip("/") != "/weights":
            self._reply(404, {"error": f"unknown path {self.path!r}; weights go to PUT /weights"})
            return
        self.connection.settimeout(rx.timeout_s)
        try:
            header = wire.Header.from_json(json.loads(self.headers.get("X-Dockyard-Header", "")))
        except (ValueError, WeightSyncError) as e:
            self._reply(400, {"error": f"bad X-Dockyard-Header: {e}"})
            return
        version, index = rx._expected or (header.version, 0)
        if (header.version, header.index) != (version, index) and header.index != 0:
            self._reply(
                409,
                {
                    "error": f"expected bucket {index} of version {version}, got "
                    f"bucket {header.index} of version {header.version}"
                },
            )
            return
        buf = bytearray(header.nbytes)
        try:
            got = self._read_body(memoryview(buf))
        except (OSError, ValueError) as e:
            rx._fail(
                f"{TRANSPORT}: upload of bucket {header.index} (version {header.version}) from "
                f"{peer} broke off ({e!r}; peer died?)"
            )
            self.close_connection = True
            return
        if got != header.nbytes:
            rx._fail(
                f"{TRANSPORT}: {peer} sent {got} of {header.nbytes} bytes of bucket "
                f"{header.index} (version {header.version}) and stopped (peer died?)"
            )
            self.close_connection = True
            return
        try:
            wire.verify(buf, header, TRANSPORT, peer)
        except WeightSyncError as e:
            rx._fail(str(e))
            self._reply(422, {"error": str(e)})
            return
        try:
            rx._queue.put((header, buf), timeout=rx.timeout_s)
        except queue.Full:
            self._reply(
                503,
                {"error": f"engine did not take bucket {header.index} within {rx.timeout_s:g} s"},
            )
            return
        rx._expected = None if header.last else (header.version, header.index + 1)
        self._reply(200, {"ok": True, "version": header.version, "index": header.index})

    def _read_body(self, dst: memoryview) -> int:
        """Read a chunked (or Content-Length) body into ``dst``; returns the bytes read."""
        rfile = self.rfile
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            n = int(self.headers.get("Content-Length", "0"))
            if n > len(dst):
                raise ValueError(f"body of {n} bytes exceeds the header's nbytes {len(dst)}")
            return _readinto_exact(rfile, dst[:n])
        pos = 0
        while True:
            line = rfile.readline(1024)
            if not line:
                return pos
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                rfile.readline(1024)  # the empty line after the last chunk (no trailers)
                return pos
            if pos + size > len(dst):
                raise ValueError(f"body exceeds the header's nbytes {len(dst)}")
            got = _readinto_exact(rfile, dst[pos : pos + size])
            pos += got
            if got < size:
                return pos
            rfile.readline(1024)  # CRLF after the chunk


def _make_handler(rx: HttpReceiver) -> type[BaseHTTPRequestHandler]:
    """A handler class bound to ``rx`` (the server builds a handler per connection)."""
    return type("Handler", (_Handler,), {"rx": rx})


def _readinto_exact(rfile: Any, dst: memoryview) -> int:
    pos = 0
    while pos < len(dst):
        n = rfile.readinto(dst[pos:])
        if not n:
            break
        pos += n
    return pos
