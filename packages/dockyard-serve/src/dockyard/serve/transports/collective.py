"""Collective transport: ``torch.distributed`` broadcast over a dedicated process group.

One code path for both devices: the group is ``ProcessGroupNCCL`` on GPUs and
``ProcessGroupGloo`` on CPUs, built directly on a private ``TCPStore`` (it never touches the
default process group of the trainer or of vLLM). The trainer is rank 0 and hosts the store;
each engine worker is a receiver rank ``1..N``, so one broadcast reaches every engine.

Per update with sequence number ``s`` (counted by both sides) and bucket ``i``::

    sender: store[f"u{s}/b{i}"] = header JSON      receivers: header = store.get(...)
    broadcast(uint8[header.nbytes], root=0)          (one contiguous buffer per bucket)
    ... last bucket ...
    allreduce(errors[1])                            receivers add 1 on a checksum mismatch

The final all-reduce makes :meth:`CollectiveSender.send` return only after every receiver has
the bytes (and reports a checksum failure on the sender too). A peer that dies mid-sync makes
gloo/NCCL fail the pending operation; one that hangs trips the group's timeout; both raise
:class:`WeightSyncError` / :class:`WeightSyncTimeout` naming the peer and the backend.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
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
from dockyard.serve.transports.torch_dtypes import to_numpy, torch_dtype

_INSTALL = 'the collective transport needs torch: pip install "dockyard-serve[collective]"'


def _torch() -> Any:
    try:
        # lazy: torch is optional in dockyard-serve (its transformers and collective extras)
        import torch

        # lazy: torch.distributed, likewise optional (the collective extra)
        import torch.distributed
    except ImportError as e:  # pragma: no cover - torch is in the dev environment
        raise ImportError(_INSTALL) from e
    return torch


def _is_timeout(e: BaseException) -> bool:
    s = str(e).lower()
    return "timed out" in s or "timeout" in s


class _Group:
    """A private process group (store + backend) shared by the sender and receiver classes."""

    def __init__(
        self,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        backend: str,
        device: str,
        timeout_s: float,
    ) -> None:
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"collective backend must be 'gloo' or 'nccl', got {backend!r}")
        if world_size < 2 or not 0 <= rank < world_size:
            raise ValueError(
                f"collective: need world_size >= 2 and 0 <= rank < world_size, got rank={rank} world_size={world_size}"
            )
        self.host, self.port, self.rank, self.world_size = host, port, rank, world_size
        self.backend, self.device, self.timeout_s = backend, device, timeout_s
        self.transport = f"collective/{backend}"
        self.pg: Any = None
        self.store: Any = None
        self.seq = 0

    def peer(self) -> str:
        if self.rank == 0:
            return f"receivers (ranks 1..{self.world_size - 1}) of the group at {self.host}:{self.port}"
        return f"sender (rank 0, trainer) at {self.host}:{self.port}"

    def open(self) -> None:
        if self.pg is not None:
            return
        torch = _torch()
        dist = torch.distributed
        timeout = _dt.timedelta(seconds=self.timeout_s)
        try:
            self.store = dist.TCPStore(
                self.host,
                self.port,
                self.world_size,
                is_master=self.rank == 0,
                timeout=timeout,
                wait_for_workers=False,
            )
            store = dist.PrefixStore("dockyard-weights", self.store)
            if self.backend == "gloo":
                self.pg = dist.ProcessGroupGloo(store, self.rank, self.world_size, timeout)
            else:
                opts = dist.ProcessGroupNCCL.Options()
                opts._timeout = timeout
                self.pg = dist.ProcessGroupNCCL(store, self.rank, self.world_size, opts)
        except RuntimeError as e:
            cls = WeightSyncTimeout if _is_timeout(e) else WeightSyncError
            raise cls(
                f"{self.transport}: rendezvous (rank {self.rank} of {self.world_size}) with "
                f"{self.peer()} failed within {self.timeout_s:g} s: {e}"
            ) from e

    def run(self, what: str, fn: Any) -> Any:
        """Run one collective step, turning backend failures into named sync errors."""
        try:
            return fn()
        except (RuntimeError, ValueError) as e:  # gloo/NCCL/store errors surface as these
            cls = WeightSyncTimeout if _is_timeout(e) else WeightSyncError
            raise cls(
                f"{self.transport}: {what} failed (rank {self.rank}, peer: {self.peer()}, "
                f"timeout {self.timeout_s:g} s): {e}"
            ) from e

    def broadcast(self, t: Any) -> None:
        torch = _torch()
        opts = torch.distributed.BroadcastOptions()
        opts.rootRank = 0
        timeout = _dt.timedelta(seconds=self.timeout_s)
        self.run("broadcast", lambda: self.pg.broadcast([t], opts).wait(timeout))

    def allreduce(self, t: Any) -> None:
        timeout = _dt.timedelta(seconds=self.timeout_s)
        self.run("all-reduce", lambda: self.pg.allreduce([t]).wait(timeout))

    def close(self) -> None:
        if self.pg is not None:
            with contextlib.suppress(RuntimeError):
                self.pg.shutdown() if hasattr(self.pg, "shutdown") else None
        self.pg = None
        self.store = None


class CollectiveSender(WeightSender):
    """Trainer side (rank 0; hosts the store at ``host:port``).

    Args:
        host, port: the rendezvous address the receivers connect to.
        world_size: 1 + the number of receiver ranks.
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU).
        device: where the broadcast buffers live (``"cpu"``, ``"cuda:0"``...).
        timeout_s: limit on the rendezvous and on every collective.
        bucket_bytes, checksum: as for every transport.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        world_size: int = 2,
        backend: str = "gloo",
        device: str = "cpu",
        timeout_s: float = 60.0,
        bucket_bytes: int = 256 << 20,
        checksum: bool = False,
    ) -> None:
        self.group = _Group(host, port, 0, world_size, backend, device, timeout_s)
        self.bucket_bytes = bucket_bytes
        self.checksum = checksum

    def send(self, buckets: Iterable[dict[str, np.ndarray]], version: int) -> None:
        torch = _torch()
        g = self.group
        g.open()
        seq = g.seq
        g.seq += 1
        for index, last, tensors in wire.with_last(wire.rebucket(buckets, self.bucket_bytes)):
            header = wire.layout(tensors, version, index, last)
            buf = np.empty(header.nbytes, dtype=np.uint8)
            wire.pack_into(buf, tensors, header)
            if self.checksum:
                header.checksum = wire.checksum(buf, header.nbytes)
            g.run(
                "publishing a header",
                lambda h=header, i=index: g.store.set(
                    f"dockyard-weights/u{seq}/b{i}", json.dumps(h.to_json())
                ),
            )
            if header.nbytes:
                t = torch.from_numpy(buf)
                g.broadcast(t if g.device == "cpu" else t.to(g.device))
        errors = torch.zeros(1, dtype=torch.int32, device=g.device)
        g.allreduce(errors)
        if int(errors.item()):
            raise WeightSyncError(
                f"{g.transport}: {int(errors.item())} receiver(s) reported a checksum mismatch in version {version}"
            )

    def close(self) -> None:
        self.group.close()


class CollectiveReceiver(WeightReceiver):
    """Engine side (rank ``rank`` >= 1). Opens (rendezvous) lazily in the calling process."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        rank: int = 1,
        world_size: int = 2,
        backend: str = "gloo",
        device: str = "cpu",
        timeout_s: float = 60.0,
    ) -> None:
        self.group = _Group(host, port, rank, world_size, backend, device, timeout_s)

    def spec(self) -> dict[str, Any]:
        g = self.group
        return {
            "type": "collective",
            "host": g.host,
            "port": g.port,
            "rank": g.rank,
            "world_size": g.world_size,
            "backend": g.backend,
            "device": g.device,
            "timeout_s": g.timeout_s,
        }

    def open(self) -> None:
        self.group.open()

    def receive_torch(self) -> Iterator[tuple[wire.Header, dict[str, Any]]]:
        """Like :meth:`receive` but yields torch tensors on ``device`` (views of one buffer)."""
        torch = _torch()
        g = self.group
        g.open()
        seq = g.seq
        g.seq += 1
        errors = 0
        first_error = ""
        index = 0
        while True:
            raw = g.run(
                "waiting for a header", lambda i=index: g.store.get(f"dockyard-weights/u{seq}/b{i}")
            )
            header = wire.Header.from_json(json.loads(raw))
            buf = torch.empty(header.nbytes, dtype=torch.uint8, device=g.device)
            if header.nbytes:
                g.broadcast(buf)
            try:
                if header.checksum is not None:
                    wire.verify(buf.cpu().numpy(), header, g.transport, g.peer())
            except WeightSyncError as e:
                errors += 1
                first_error = first_error or str(e)
            if not errors:
                yield header, _torch_views(buf, header)
            index += 1
            if header.last:
                break
        t = torch.tensor([errors], dtype=torch.int32, device=g.device)
        g.allreduce(t)
        if errors:
            raise WeightSyncError(first_error)

    def receive(self) -> Iterator[WeightBucket]:
        for header, tensors in self.receive_torch():
            arrays = {k: _to_numpy(v) for k, v in tensors.items()}
            yield WeightBucket(header.version, header.index, header.last, arrays)

    def close(self) -> None:
        self.group.close()

    def __getstate__(self) -> dict[str, Any]:
        g = self.group
        return {
            "group": _Group(g.host, g.port, g.rank, g.world_size, g.backend, g.device, g.timeout_s)
        }


def _torch_views(buf: Any, header: wire.Header) -> dict[str, Any]:
    out = {}
    for name, dt, shape, off in header.entries:
        dtype = torch_dtype(dt)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        out[name] = buf[off : off + n].view(dtype).reshape(shape)
    return out


def _to_numpy(t: Any) -> np.ndarray:
    return to_numpy(t)
