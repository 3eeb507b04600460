"""A 2-rank FSDP2 (gloo) job for tests/torch/test_distributed.py; run under torchrun.

Usage: ``python -m torch.distributed.run --nproc_per_node=2 _dist_job.py OUT MODEL CONFIG_JSON``.
Trains two steps (checkpointing after the first), then writes, from rank 0: the metrics,
the full weights after each step, logprobs, bucketed-export stats and an HF export folder.
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


def main() -> None:
    out, model, config = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    worker = TorchPolicyWorker({**config, "model_name": model})
    rank = worker.rank
    assert worker.fsdp
    assert dist.get_world_size() == 2
    b1, b2 = random_batch(8, 24, seed=1), random_batch(8, 24, seed=2)
    loss = PolicyLoss(options={"eps_low": 0.2})
    results: dict = {"world_size": dist.get_world_size()}
    results["m1"] = worker.train_step(b1, loss)
    w1 = full_weights(worker)
    worker.save_checkpoint(str(out / "ckpt"), extra_state={"note": "after step 1"})
    results["m2"] = worker.train_step(b2, loss)
    w2 = full_weights(worker)
    lp = worker.get_logprobs(b1)
    buckets = list(worker.export_weights(bucket_bytes=64 * 1024))
    results["bucket_sizes"] = [sum(a.nbytes for a in b.values()) for b in buckets]
    results["bucket_counts"] = [len(b) for b in buckets]
    worker.export_hf(str(out / "hf"))
    if rank == 0:
        np.savez(out / "w1.npz", **w1)
        np.savez(out / "w2.npz", **w2)
        np.save(out / "lp.npy", lp)
        (out / "results.json").write_text(json.dumps(results))
    end_gloo_job()


if __name__ == "__main__":
    main()
