"""Length-prefixed JSON messages over a stream socket, with a deadline on every read.

The control channel of the shared-memory transport. A closed socket (the peer died) raises
:class:`WeightSyncError` at once; silence past the deadline raises :class:`WeightSyncTimeout`;
both name the transport and the peer.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from dockyard.core.interfaces import WeightSyncError, WeightSyncTimeout

_LEN = struct.Struct("!I")


def send_msg(
    sock: socket.socket, msg: dict[str, Any], *, transport: str, peer: str, timeout_s: float
) -> None:
    data = json.dumps(msg).encode()
    sock.settimeout(timeout_s)
    try:
        sock.sendall(_LEN.pack(len(data)) + data)
    except TimeoutError as e:
        raise WeightSyncTimeout(
            f"{transport}: {peer} did not accept a message within {timeout_s:g} s"
        ) from e
    except OSError as e:
        raise WeightSyncError(f"{transport}: connection to {peer} lost while sending ({e})") from e


def _recv_exact(
    sock: socket.socket, n: int, *, transport: str, peer: str, timeout_s: float
) -> bytes:
    buf = bytearray()
    sock.settimeout(timeout_s)
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except TimeoutError as e:
            raise WeightSyncTimeout(
                f"{transport}: no message from {peer} within {timeout_s:g} s (peer hung or dead?)"
            ) from e
        except OSError as e:
            raise WeightSyncError(f"{transport}: connection to {peer} lost ({e})") from e
        if not chunk:
            raise WeightSyncError(
                f"{transport}: {peer} closed the connection mid-sync (peer died?)"
            )
        buf += chunk
    return bytes(buf)


def recv_msg(sock: socket.socket, *, transport: str, peer: str, timeout_s: float) -> dict[str, Any]:
    (n,) = _LEN.unpack(
        _recv_exact(sock, _LEN.size, transport=transport, peer=peer, timeout_s=timeout_s)
    )
    return json.loads(_recv_exact(sock, n, transport=transport, peer=peer, timeout_s=timeout_s))
