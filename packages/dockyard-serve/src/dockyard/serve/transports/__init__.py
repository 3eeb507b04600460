"""Weight-sync transports (sender in the trainer, receiver in the engine): a registry.

========== ===================================== ==========================================
type       sender / receiver                     use
========== ===================================== ==========================================
collective CollectiveSender / CollectiveReceiver torch.distributed broadcast (NCCL | gloo)
shm        ShmSender / ShmReceiver               co-located: zero-copy through /dev/shm
http       HttpSender / HttpReceiver             remote engines: chunked uploads
========== ===================================== ==========================================

All take buckets ``{hf_name: np.ndarray}`` (the policy worker's ``export_weights``), split them
to ``bucket_bytes``, tag them with the policy version, put a timeout on every wait and can
checksum (CRC-32). A receiver is a picklable description until it is first used:
:meth:`spec` / :func:`open_receiver` rebuild it in another process (the vLLM worker), so the
bytes land where the model lives.

Each transport is a :class:`Transport` in :data:`TRANSPORTS`, keyed by
``data_plane.weight_transport.type``: its sender and receiver, and its rendezvous —
``endpoints(t, sync, index, engine_host)`` gives the sender's and the receiver's keyword
arguments for engine ``index`` (``t``: the transport's config section; ``sync``: the run's
:class:`~dockyard.serve.config.WeightSync` — its run id, bucket size, GPUs, the ports it keeps).
Another package adds one under the entry-point group ``dockyard.transports``
(``docs/plugins.md``); its ``weight_transport.options`` are keyword arguments of its sender and
its receiver. Nobody edits this module to add one.
"""

from __future__ import annotations

import importlib
import os
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dockyard.core.interfaces import WeightReceiver, WeightSender
from dockyard.core.registry import Registry

if TYPE_CHECKING:
    from dockyard.core.config.sections import (
        CollectiveTransportConfig,
        HttpTransportConfig,
        ShmTransportConfig,
    )

Endpoints = Callable[[Any, Any, int, "str | None"], tuple[dict[str, Any], dict[str, Any]]]


@dataclass(frozen=True)
class Transport:
    """A weight transport: ``sender`` and ``receiver`` (classes, or ``"module:Class"`` imported
    where they are built: the trainer's rank, the engine's process) and ``endpoints``, the
    rendezvous of engine ``index`` (see the module docstring): ``(sender kwargs, receiver
    kwargs)``, plain dicts that cross processes."""

    sender: str | Callable[..., WeightSender]
    receiver: str | Callable[..., WeightReceiver]
    endpoints: Endpoints


TRANSPORTS: Registry[Transport] = Registry("weight transport", "dockyard.transports")


def free_port() -> int:
    """A TCP port free on this host now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _shm_endpoints(
    t: ShmTransportConfig, sync: Any, index: int, engine_host: str | None
) -> tuple[dict, dict]:
    """A Unix socket per engine named after the run (same machine)."""
    path = os.path.join(tempfile.gettempdir(), f"dockyard-{sync.run_id}-engine{index}.sock")
    rx = {"socket_path": path, "timeout_s": t.timeout_s}
    tx = {"socket_path": path, "timeout_s": t.timeout_s, "bucket_bytes": sync.bucket_bytes,
          "checksum": t.checksums, "shm_dir": t.shm_dir}  # fmt: skip
    return tx, rx


def _http_endpoints(
    t: HttpTransportConfig, sync: Any, index: int, engine_host: str | None
) -> tuple[dict, dict]:
    """A port per sync (``port + index`` when a port is set), reached at the engine's node."""
    port = free_port() if not t.port else t.port + index
    peer = sync.http_peer(t.host, engine_host)
    rx = {"host": t.host, "port": port, "timeout_s": t.timeout_s}
    tx = {"url": f"http://{peer}:{port}", "timeout_s": t.timeout_s,
          "bucket_bytes": sync.bucket_bytes, "checksum": t.checksums}  # fmt: skip
    return tx, rx


def _collective_endpoints(
    t: CollectiveTransportConfig, sync: Any, index: int, engine_host: str | None
) -> tuple[dict, dict]:
    """A process group of two per engine on a port kept for the run (a restarted engine reuses
    it); gloo without GPUs unless nccl is asked for."""
    port = sync.ports.setdefault(index, free_port())
    backend = "gloo" if t.backend in ("auto", "gloo") and not sync.gpus else "nccl"
    where = {"host": "127.0.0.1", "port": port, "world_size": 2, "backend": backend}
    rx = {**where, "rank": 1, "timeout_s": t.timeout_s}
    tx = {**where, "timeout_s": t.timeout_s, "bucket_bytes": sync.bucket_bytes,
          "checksum": t.checksums}  # fmt: skip
    return tx, rx


_HERE = "dockyard.serve.transports"
for _name, _cls, _endpoints in (
    ("shm", "Shm", _shm_endpoints),
    ("http", "Http", _http_endpoints),
    ("collective", "Collective", _collective_endpoints),
):
    TRANSPORTS.register(_name)(
        Transport(f"{_HERE}.{_name}:{_cls}Sender", f"{_HERE}.{_name}:{_cls}Receiver", _endpoints)
    )


def _load(what: str | Callable[..., Any]) -> Callable[..., Any]:
    if not isinstance(what, str):
        return what
    mod, _, attr = what.partition(":")
    return getattr(importlib.import_module(mod), attr)


def transport(type_: str) -> Transport:
    """The registered transport ``type_``; ValueError naming the known ones otherwise."""
    try:
        return TRANSPORTS.get(type_)
    except KeyError as e:
        raise ValueError(e.args[0]) from None


def make_sender(type: str, **kwargs: Any) -> WeightSender:
    """``make_sender("shm", socket_path=...)``; keyword arguments are the class's."""
    return _load(transport(type).sender)(**kwargs)


def make_receiver(type: str, **kwargs: Any) -> WeightReceiver:
    return _load(transport(type).receiver)(**kwargs)


def open_receiver(spec: dict[str, Any]) -> WeightReceiver:
    """Rebuild a receiver from its :meth:`spec` (a plain dict that crosses processes: the
    receiver's keyword arguments and its ``type``)."""
    if "type" not in spec:
        raise ValueError(f"receiver spec {spec!r} has no 'type' key")
    kw = dict(spec)
    return make_receiver(kw.pop("type"), **kw)


__all__ = [
    "TRANSPORTS",
    "Transport",
    "free_port",
    "make_receiver",
    "make_sender",
    "open_receiver",
    "transport",
]
