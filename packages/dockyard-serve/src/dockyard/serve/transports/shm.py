"""Shared-memory transport: zero-copy weight sync between co-located trainer and engine.

The CPU counterpart of CUDA IPC. The sender owns a ring of ``max_inflight`` shared-memory files,
mapped once and reused across buckets and updates (fresh tmpfs pages cost ~5x a warm copy in page
faults); per bucket it copies the tensors into the next segment once and sends the header over a
Unix socket, with the segment's *file descriptor* attached (``SCM_RIGHTS``). The receiver maps
each segment once (shared mapping, cached) and yields numpy views of it: no serialisation, no
second copy. It acknowledges a bucket when its consumer asks for the next one; the sender reuses a
segment only after the bucket in it was acknowledged.

Segments have no name: they are created unlinked in ``shm_dir`` (``O_TMPFILE``; where a
filesystem lacks it, created and unlinked at once), so nothing is left in ``/dev/shm`` however
the run ends — the kernel frees a segment when the last process holding it closes or dies (a
trainer killed by ``ray.kill`` included). :func:`remove_stale_segments` still sweeps named
``dockyard-<pid>-*`` files of dead processes (older versions; a kill between create and unlink).

Contract: the arrays of a yielded bucket stay valid until the consumer asks for the next bucket;
copy what you keep longer (every engine here copies into its parameters).

Protocol per update (sender connects to the receiver's socket, one connection per update)::

    sender -> {"header": {...}, "fd": true}   + 1 byte carrying the segment's fd, per bucket
    receiver -> {"ack": index}                after each bucket is used

A closed socket (peer died) raises at once; silence past ``timeout_s`` raises
:class:`WeightSyncTimeout`. Both name the peer (socket path, pid) and the transport.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
import struct
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from dockyard.core.interfaces import (
    WeightBucket,
    WeightReceiver,
    WeightSender,
    WeightSyncError,
    WeightSyncTimeout,
)
from dockyard.serve.transports import wire
from dockyard.serve.transports.channel import recv_msg, send_msg

TRANSPORT = "shm"


def _peer_pid(conn: socket.socket) -> int | None:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[0]
    except OSError:
        return None


def remove_stale_segments(shm_dir: str = "/dev/shm") -> int:
    """Unlink ``dockyard-<pid>-*`` segments whose sender process is gone (a sender killed
    before :meth:`ShmSender.close`); returns how many. Senders call it when they start."""
    removed = 0
    for name in os.listdir(shm_dir):
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "dockyard" or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(shm_dir, name))
                removed += 1
        except PermissionError:
            pass  # alive, another user's
    return removed


def create_segment(shm_dir: str, nbytes: int) -> int:
    """A file descriptor of a new ``nbytes`` shared-memory file in ``shm_dir`` that has no name
    (``O_TMPFILE``, else created as ``dockyard-<pid>-<id>`` and unlinked at once)."""
    fd = -1
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        with contextlib.suppress(OSError):  # EOPNOTSUPP/EISDIR: the filesystem lacks O_TMPFILE
            fd = os.open(shm_dir, os.O_RDWR | tmpfile, 0o600)
    if fd < 0:
        path = os.path.join(shm_dir, f"dockyard-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.unlink(path)
    try:
        os.ftruncate(fd, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _send_fd(sock: socket.socket, fd: int, peer: str, timeout_s: float) -> None:
    sock.settimeout(timeout_s)
    try:
        socket.send_fds(sock, [b"\0"], [fd])
    except TimeoutError as e:
        raise WeightSyncTimeout(
            f"{TRANSPORT}: {peer} did not accept a segment within {timeout_s:g} s"
        ) from e
    except OSError as e:
        raise WeightSyncError(f"{TRANSPORT}: connection to {peer} lost while sending ({e})") from e


def _recv_fd(sock: socket.socket, peer: str, timeout_s: float) -> int:
    sock.settimeout(timeout_s)
    try:
        data, fds, _, _ = socket.recv_fds(sock, 1, 1)
    except TimeoutError as e:
        raise WeightSyncTimeout(
            f"{TRANSPORT}: no segment from {peer} within {timeout_s:g} s (peer hung or dead?)"
        ) from e
    except OSError as e:
        raise WeightSyncError(f"{TRANSPORT}: connection to {peer} lost ({e})") from e
    if not data:
        raise WeightSyncError(f"{TRANSPORT}: {peer} closed the connection mid-sync (peer died?)")
    if len(fds) != 1:
        for extra in fds:
            os.close(extra)
        raise WeightSyncError(f"{TRANSPORT}: {peer} sent a bucket without its segment")
    return fds[0]


class ShmSender(WeightSender):
    """Trainer side: writes each bucket into a segment of its ring and passes the segment's fd.

    Args:
        socket_path: the receiver's Unix socket.
        timeout_s: limit on every wait (connect, acknowledgement).
        bucket_bytes: buckets larger than this are split (whole tensors).
        checksum: send a CRC-32 of each bucket for the receiver to verify.
        max_inflight: unacknowledged buckets allowed (2 = double buffering).
        shm_dir: the (tmpfs) filesystem segments are created in; they never get a name there.
    """

    def __init__(
        self,
        socket_path: str,
        *,
        timeout_s: float = 60.0,
        bucket_bytes: int = 256 << 20,
        checksum: bool = False,
        max_inflight: int = 2,
        shm_dir: str = "/dev/shm",
    ) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self.bucket_bytes = bucket_bytes
        self.checksum = checksum
        self.max_inflight = max(1, max_inflight)
        self.shm_dir = shm_dir
        self.peer = f"receiver at {socket_path}"
        self._ring: list[tuple[int, int, mmap.mmap] | None] = [None] * self.max_inflight
        with contextlib.suppress(OSError):
            remove_stale_segments(shm_dir)

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.socket_path)
                pid = _peer_pid(sock)
                if pid is not None:
                    self.peer = f"receiver at {self.socket_path} (pid {pid})"
                return sock
            except (FileNotFoundError, ConnectionRefusedError) as e:
                sock.close()
                if time.monotonic() >= deadline:
                    raise WeightSyncTimeout(
                        f"{TRANSPORT}: no receiver listening at {self.socket_path} within "
                        f"{self.timeout_s:g} s (is the engine's ShmReceiver open?)"
                    ) from e
                time.sleep(0.02)

    def _segment(self, slot: int, nbytes: int) -> tuple[int, mmap.mmap]:
        """The ring's segment ``slot`` (fd, mapping), recreated when ``nbytes`` does not fit."""
        cur = self._ring[slot]
        if cur is not None and cur[1] >= nbytes:
            return cur[0], cur[2]
        self._release(slot)
        fd = create_segment(self.shm_dir, nbytes)
        try:
            m = mmap.mmap(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise
        self._ring[slot] = (fd, nbytes, m)
        return fd, m

    def _release(self, slot: int) -> None:
        cur, self._ring[slot] = self._ring[slot], None
        if cur is not None:
            with contextlib.suppress(BufferError, ValueError):
                cur[2].close()
            with contextlib.suppress(OSError):
                os.close(cur[0])

    def _write_segment(self, slot: int, tensors: dict[str, np.ndarray], header: wire.Header) -> int:
        fd, m = self._segment(slot, header.nbytes)
        with memoryview(m) as buf:
            wire.pack_into(buf, tensors, header)
            if self.checksum:
                header.checksum = wire.checksum(buf, header.nbytes)
        return fd

    def send(self, buckets: Iterable[dict[str, np.ndarray]], version: int) -> None:
        """Send one update; returns once the receiver has acknowledged every bucket."""
        sock = self._connect()
        pending: deque[int] = deque()
        kw: dict[str, Any] = {"transport": TRANSPORT, "timeout_s": self.timeout_s}

        def wait_ack() -> None:
            index = pending.popleft()
            msg = recv_msg(sock, peer=self.peer, **kw)
            if msg.get("error"):
                raise WeightSyncError(
                    f"{TRANSPORT}: {self.peer} rejected bucket {index}: {msg['error']}"
                )
            if msg.get("ack") != index:
                raise WeightSyncError(
                    f"{TRANSPORT}: {self.peer} acknowledged {msg!r}, expected bucket {index}"
                )

        try:
            for index, last, tensors in wire.with_last(wire.rebucket(buckets, self.bucket_bytes)):
                header = wire.layout(tensors, version, index, last)
                while len(pending) >= self.max_inflight:
                    wait_ack()  # the slot we are about to overwrite must be acknowledged
                slot = index % self.max_inflight
                fd = self._write_segment(slot, tensors, header) if header.nbytes else None
                pending.append(index)
                msg = {"header": header.to_json(), "fd": fd is not None}
                send_msg(sock, msg, peer=self.peer, **kw)
                if fd is not None:
                    _send_fd(sock, fd, self.peer, self.timeout_s)
                while len(pending) >= self.max_inflight:
                    wait_ack()
            while pending:
                wait_ack()
        finally:
            sock.close()

    def close(self) -> None:
        """Unmap and close the ring's segments (the kernel frees each once the receiver has
        let go of it too)."""
        for slot in range(len(self._ring)):
            self._release(slot)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class ShmReceiver(WeightReceiver):
    """Engine side: listens on ``socket_path`` and yields buckets as views of shared memory.

    The listening socket is bound lazily on the first :meth:`receive` (or :meth:`open`), in the
    process that calls it: a receiver can be described in one process (:meth:`spec`) and opened
    in another (the vLLM worker). Arrays of a yielded bucket stay valid until the next bucket is
    requested (the sender then reuses their segment). Mappings are cached across updates and
    dropped once an update no longer uses them (the sender replaced that segment).
    """

    def __init__(self, socket_path: str, *, timeout_s: float = 60.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._listener: socket.socket | None = None
        self._maps: dict[tuple[int, int], mmap.mmap] = {}  # (st_dev, st_ino) -> mapping

    def spec(self) -> dict[str, Any]:
        return {"type": "shm", "socket_path": self.socket_path, "timeout_s": self.timeout_s}

    def open(self) -> None:
        if self._listener is not None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(self.socket_path)
        s.listen(4)
        self._listener = s

    def _accept(self) -> tuple[socket.socket, str]:
        assert self._listener is not None
        self._listener.settimeout(self.timeout_s)
        try:
            conn, _ = self._listener.accept()
        except TimeoutError as e:
            raise WeightSyncTimeout(
                f"{TRANSPORT}: no sender connected to {self.socket_path} within {self.timeout_s:g} s"
            ) from e
        pid = _peer_pid(conn)
        return conn, f"sender (pid {pid}) on {self.socket_path}"

    def receive(self) -> Iterator[WeightBucket]:
        self.open()
        conn, peer = self._accept()
        kw: dict[str, Any] = {"transport": TRANSPORT, "peer": peer, "timeout_s": self.timeout_s}
        used: set[tuple[int, int]] = set()
        try:
            expected = 0
            while True:
                msg = recv_msg(conn, **kw)
                header = wire.Header.from_json(msg["header"])
                if header.index != expected:
                    raise WeightSyncError(
                        f"{TRANSPORT}: {peer} sent bucket {header.index}, expected {expected}"
                    )
                fd = _recv_fd(conn, peer, self.timeout_s) if msg.get("fd") else None
                tensors = self._map(fd, header, peer, used)
                yield WeightBucket(header.version, header.index, header.last, tensors)
                send_msg(conn, {"ack": header.index}, **kw)
                expected += 1
                if header.last:
                    # segments this update did not use were replaced by the sender: let go
                    for key in set(self._maps) - used:
                        del self._maps[key]  # (views still held keep their mapping alive)
                    return
        finally:
            conn.close()

    def _map(
        self, fd: int | None, header: wire.Header, peer: str, used: set[tuple[int, int]]
    ) -> dict[str, np.ndarray]:
        if fd is None:
            if header.nbytes:
                raise WeightSyncError(
                    f"{TRANSPORT}: {peer} sent bucket {header.index} without a segment"
                )
            return wire.unpack(b"", header)
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            m = self._maps.get(key)
            if m is None or len(m) < header.nbytes:
                if st.st_size < header.nbytes:
                    raise WeightSyncError(
                        f"{TRANSPORT}: {peer} sent a {st.st_size}-byte segment for bucket "
                        f"{header.index} of {header.nbytes} bytes"
                    )
                # A shared mapping of the sender's segment: views are writable (torch.from_numpy
                # accepts them) and see the bytes the sender wrote, without a copy.
                m = mmap.mmap(fd, st.st_size)
                self._maps[key] = m
        finally:
            os.close(fd)
        used.add(key)
        buf = memoryview(m)
        wire.verify(buf, header, TRANSPORT, peer)
        return wire.unpack(buf, header)

    def close(self) -> None:
        self._maps.clear()  # (views still held keep their mapping alive)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_listener": None, "_maps": {}}
