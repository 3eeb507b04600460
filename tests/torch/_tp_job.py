"""A tensor-parallel (and optionally FSDP2 × TP) gloo job for tests/torch/test_tensor_parallel.py,
and the context-parallel one of tests/torch/test_context_parallel.py (``context_parallel_size``).

Usage: ``python -m torch.distributed.run --nproc_per_node=N _tp_job.py OUT MODEL CONFIG_JSON``.
Computes logprobs, trains two steps and writes, from rank 0: the metrics, logprobs, the full
weights after each step (``export_weights``: DTensor.full_tensor per parameter), and what each
rank holds locally of one column- and one row-split projection (to prove the split happened).
With ``"checkpoint": true`` in the config JSON it also saves a checkpoint after step 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch.distributed as dist

from dockyard.core.rl import PolicyLoss
from dockyard.torch.testing import end_gloo_job, random_batch
from dockyard.torch.worker import TorchPolicyWorker


def full_weights(worker) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for bucket in worker.export_weights(bucket_bytes=64 * 1024):
        out.update(bucket)
    return out


def local_shapes(worker) -> dict[str, list[int]]:
    """Shapes of this rank's local pieces of a few layer-0 parameters."""
    out = {}
    for name, p in worker.model.named_parameters():
        if ".layers.0." in name and any(k in name for k in ("q_proj", "o_proj", "down_proj")):
            local = p.to_local() if hasattr(p, "to_local") else p
            out[name] = list(local.shape)
    return out


def main() -> None:
    out, model, config = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    save_ckpt = config.pop("checkpoint", False)
    worker = TorchPolicyWorker({**config, "model_name": model})
    b1, b2 = random_batch(8, 24, seed=1), random_batch(8, 24, seed=2)
    loss = PolicyLoss(options={"eps_low": 0.2})
    results: dict = {
        "world_size": dist.get_world_size(),
        "dp_size": worker.dist.dp_size,
        "tp_size": worker.dist.tp_size,
        "cp_size": worker.dist.cp_size,
        "fsdp": worker.fsdp,
    }
    shapes: list[dict] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(shapes, local_shapes(worker))
    results["local_shapes"] = shapes
    lp0 = worker.get_logprobs(b1)
    ent0 = worker.get_token_entropy(b1)
    results["m1"] = worker.train_step(b1, loss)
    w1 = full_weights(worker)
    if save_ckpt:
        worker.save_checkpoint(str(out / "ckpt"), extra_state={"note": "tp step 1"})
    results["m2"] = worker.train_step(b2, loss)
    w2 = full_weights(worker)
    if worker.rank == 0:
        np.save(out / "lp0.npy", lp0)
        np.save(out / "ent0.npy", ent0)
        np.savez(out / "w1.npz", **w1)
        np.savez(out / "w2.npz", **w2)
        (out / "results.json").write_text(json.dumps(results))
    end_gloo_job()


if __name__ == "__main__":
    main()
