"""A weight-sync peer in its own process, for the transport tests (run as a script).

    python _peer.py send <type> '<kwargs json>' <versions: 3,4> [--die-after N | --hang-after N]
    python _peer.py receive <type> '<kwargs json>' <n_updates>

``send`` sends :func:`make_weights` for each version; with ``--die-after N`` the process exits
abruptly (``os._exit``) when asked for bucket N of the first update, with ``--hang-after N`` it
sleeps instead. ``receive`` prints one JSON line per update: version, bucket count and a digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

import numpy as np


def make_weights(version: int) -> dict[str, np.ndarray]:
    """Deterministic tensors of several dtypes and shapes (including 0-d and empty)."""
    rng = np.random.default_rng(version)
    return {
        "model.embed_tokens.weight": rng.standard_normal((300, 64)).astype(np.float32),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((64, 64)).astype(np.float16),
        "model.layers.0.self_attn.q_proj.bias": rng.standard_normal(64).astype(np.float32),
        "model.layers.0.mlp.gate_proj.weight": rng.standard_normal((128, 64)).astype(np.float32),
        "model.position_ids": np.arange(77, dtype=np.int64),
        "model.scale": np.array(version, dtype=np.float64),
        "model.mask": rng.random(33) > 0.5,
        "model.empty": np.zeros((0, 4), dtype=np.float32),
        "lm_head.weight": rng.standard_normal((300, 64)).astype(np.float32),
    }


def digest(tensors: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(tensors):
        a = tensors[k]
        h.update(f"{k}:{a.dtype.name}:{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def main() -> None:
    sys.path.insert(0, os.path.dirname(__file__))
    from dockyard.serve.transports import make_receiver, make_sender

    role, type_, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if role == "send":
        versions = [int(v) for v in sys.argv[4].split(",")]
        die = hang = None
        if "--die-after" in sys.argv:
            die = int(sys.argv[sys.argv.index("--die-after") + 1])
        if "--hang-after" in sys.argv:
            hang = int(sys.argv[sys.argv.index("--hang-after") + 1])
        sender = make_sender(type_, **kwargs)
        if type_ == "collective":
            import torch.distributed  # noqa: F401 - imported before "ready" so timing tests are fair
        print(json.dumps({"ready": True}), flush=True)

        def buckets(w: dict[str, np.ndarray]):
            for i, (k, v) in enumerate(w.items()):
                if die is not None and i == die:
                    os._exit(3)
                if hang is not None and i == hang:
                    time.sleep(3600)
                yield {k: v}

        for v in versions:
            sender.send(buckets(make_weights(v)), v)
            print(json.dumps({"sent": v}), flush=True)
        sender.close()
    else:
        n = int(sys.argv[4])
        rx = make_receiver(type_, **kwargs)
        for _ in range(n):
            got: dict[str, np.ndarray] = {}
            count = 0
            version = None
            for b in rx.receive():
                got.update({k: np.array(v) for k, v in b.tensors.items()})
                version = b.version
                count += 1
            print(
                json.dumps({"version": version, "buckets": count, "digest": digest(got)}),
                flush=True,
            )
        rx.close()


if __name__ == "__main__":
    main()
