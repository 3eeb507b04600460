"""One side of a collective weight transfer, for tests/gpu/test_collective.py (run as a script).

    python _collective_peer.py send '<CollectiveSender kwargs json>'
    python _collective_peer.py receive '<CollectiveReceiver kwargs json>'

``send`` sends :func:`make_weights` as version 7; ``receive`` takes it with ``receive_torch``
(tensors stay on the receiver's device) and prints one JSON line: version, bucket count, the
devices the tensors landed on, a digest of the bytes and the seconds the transfer took
(rendezvous included). On an error either side prints ``{"error": class name, "sync_error":
is it a WeightSyncError, "message": ...}`` and leaves at once with status 1 (``os._exit``: a
failed NCCL communicator must not hang the exit).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback

import numpy as np

VERSION = 7


def make_weights() -> dict[str, np.ndarray]:
    """~20 MB of deterministic tensors of several dtypes and shapes (0-d and empty included)."""
    rng = np.random.default_rng(VERSION)
    return {
        "model.embed_tokens.weight": rng.standard_normal((1024, 4096)).astype(np.float32),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((512, 4096)).astype(np.float16),
        "model.layers.0.self_attn.q_proj.bias": rng.standard_normal(4096).astype(np.float32),
        "model.position_ids": np.arange(4097, dtype=np.int64),
        "model.mask": rng.random(333) > 0.5,
        "model.scale": np.array(0.125, dtype=np.float64),
        "model.empty": np.zeros((0, 8), dtype=np.float32),
    }


def digest(tensors: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(tensors):
        a = tensors[k]
        h.update(f"{k}:{a.dtype.name}:{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _device(kwargs: dict) -> None:
    import torch

    if str(kwargs.get("device", "cpu")).startswith("cuda"):
        torch.cuda.set_device(torch.device(kwargs["device"]))


def run(role: str, kwargs: dict) -> None:
    from dockyard.serve.transports.collective import CollectiveReceiver, CollectiveSender
    from dockyard.serve.transports.torch_dtypes import to_numpy

    _device(kwargs)
    t0 = time.perf_counter()
    if role == "send":
        host, port = kwargs.pop("host"), kwargs.pop("port")
        sender = CollectiveSender(host, port, **kwargs)
        sender.send([make_weights()], VERSION)
        print(json.dumps({"sent": VERSION, "seconds": time.perf_counter() - t0}), flush=True)
        sender.close()
        return
    host, port = kwargs.pop("host"), kwargs.pop("port")
    rx = CollectiveReceiver(host, port, **kwargs)
    got: dict[str, np.ndarray] = {}
    devices: set[str] = set()
    buckets = 0
    version = None
    for header, tensors in rx.receive_torch():
        buckets += 1
        version = header.version
        devices |= {str(t.device) for t in tensors.values()}
        got.update({k: np.array(to_numpy(t)) for k, t in tensors.items()})
    seconds = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "version": version,
                "buckets": buckets,
                "devices": sorted(devices),
                "digest": digest(got),
                "seconds": seconds,
            }
        ),
        flush=True,
    )
    rx.close()


def main() -> None:
    from dockyard.core.interfaces import WeightSyncError

    role, kwargs = sys.argv[1], json.loads(sys.argv[2])
    try:
        run(role, kwargs)
    except Exception as e:
        traceback.print_exc()
        print(
            json.dumps(
                {
                    "error": type(e).__name__,
                    "sync_error": isinstance(e, WeightSyncError),
                    "message": str(e),
                }
            ),
            flush=True,
        )
        sys.stderr.flush()
        os._exit(1)


if __name__ == "__main__":
    main()
