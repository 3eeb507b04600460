"""A tensor-parallel gloo job for tests/torch/test_shared_prefix.py: shared-prefix training
with ``tensor_parallel_size = 2``.

Usage: ``python -m torch.distributed.run --nproc_per_node=2 _shared_prefix_job.py OUT MODEL``,
with the batch in ``OUT/batch.npz``. Writes from rank 0 ``OUT/result.npz``: the logprobs, the
step's loss and grad norm, whether the tree layout was used, and the full weights after it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.rl import PolicyLoss
from dockyard.torch.worker import TorchPolicyWorker


def main() -> None:
    out, model = Path(sys.argv[1]), sys.argv[2]
    batch = Batch(**dict(np.load(out / "batch.npz")))
    worker = TorchPolicyWorker(
        {
            "model_name": model,
            "precision": "float32",
            "train_micro_batch_size": 4,
            "reference_policy": False,
            "optimizer": {"lr": 1e-3},
            "tensor_parallel_size": 2,
            "shared_prefix": True,
        }
    )
    logprobs = worker.get_logprobs(batch)
    metrics = worker.train_step(batch, PolicyLoss(options={"kl_beta": 0.0}))
    weights = {k: v for b in worker.export_weights(bucket_bytes=1 << 30) for k, v in b.items()}
    if worker.rank == 0:
        np.savez(
            out / "result.npz",
            logprobs=logprobs,
            loss=metrics["loss"],
            grad_norm=metrics["grad_norm"],
            tree=worker._tree,
            **{f"w/{k}": v for k, v in weights.items()},
        )


if __name__ == "__main__":
    main()
