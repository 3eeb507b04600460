"""Weight-sync transports (sender in the trainer, receiver in the engine), chosen by config.

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

Adding a transport: write ``<name>.py`` with a sender and a receiver (``spec()`` returning a dict
with ``"type": "<name>"``) and add it to ``_RECEIVERS`` / ``_SENDERS`` below.
"""

from __future__ import annotations

import importlib
from typing import Any

from dockyard.core.interfaces import WeightReceiver, WeightSender

_RECEIVERS = {
    "collective": "dockyard.serve.transports.collective:CollectiveReceiver",
    "shm": "dockyard.serve.transports.shm:ShmReceiver",
    "http": "dockyard.serve.transports.http:HttpReceiver",
}
_SENDERS = {
    "collective": "dockyard.serve.transports.collective:CollectiveSender",
    "shm": "dockyard.serve.transports.shm:ShmSender",
    "http": "dockyard.serve.transports.http:HttpSender",
}


def _load(table: dict[str, str], kind: str, type_: str) -> Any:
    if type_ not in table:
        raise ValueError(
            f"unknown weight transport type {type_!r} for a {kind}; choose one of {sorted(table)}"
        )
    mod, _, cls = table[type_].partition(":")
    return getattr(importlib.import_module(mod), cls)


def make_sender(type: str, **kwargs: Any) -> WeightSender:
    """``make_sender("shm", socket_path=...)``; keyword arguments are the class's."""
    return _load(_SENDERS, "sender", type)(**kwargs)


def make_receiver(type: str, **kwargs: Any) -> WeightReceiver:
    return _load(_RECEIVERS, "receiver", type)(**kwargs)


def open_receiver(spec: dict[str, Any]) -> WeightReceiver:
    """Rebuild a receiver from its :meth:`spec` (a plain dict that crosses processes)."""
    if "type" not in spec:
        raise ValueError(f"receiver spec {spec!r} has no 'type' key")
    kw = dict(spec)
    type_ = kw.pop("type")
    if type_ == "collective":
        host, port = kw.pop("host"), kw.pop("port")
        return _load(_RECEIVERS, "receiver", type_)(host, port, **kw)
    return _load(_RECEIVERS, "receiver", type_)(**kw)


__all__ = ["make_receiver", "make_sender", "open_receiver"]
