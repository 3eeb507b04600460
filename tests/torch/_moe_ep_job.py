"""A 2-rank expert-parallel Qwen3-MoE job (gloo) for tests/torch/test_moe_parallel.py; run under
torchrun.

Usage: ``python -m torch.distributed.run --nproc_per_node=2 _moe_ep_job.py OUT MODEL CONFIG_JSON``.
Trains two GRPO-loss steps (checkpointing after the first) with ``moe.expert_parallel_size=2`` (each rank holds half of every
layer's experts; tokens travel by all-to-all), then writes from rank 0 the metrics, the exported
weights (gathered, per-expert names) and the logprobs of the first batch.
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


def main() -> None:
    out, model, config = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    worker = TorchPolicyWorker({**config, "model_name": model})
    assert dist.get_world_size() == 2
    assert worker.fsdp
    experts = worker.model.model.layers[0].mlp.experts.gate_up_proj
    local = experts.to_local().shape[0]
    loss = PolicyLoss(options={"eps_low": 0.2})
    results: dict = {"local_experts": local}
    results["m1"] = worker.train_step(random_batch(8, 24, seed=1), loss)
    worker.save_checkpoint(str(out / "ckpt"))
    results["m2"] = worker.train_step(random_batch(8, 24, seed=2), loss)
    weights: dict[str, np.ndarray] = {}
    for bucket in worker.export_weights(bucket_bytes=64 * 1024):
        weights.update(bucket)
    lp = worker.get_logprobs(random_batch(8, 24, seed=1))
    if worker.rank == 0:
        np.savez(out / "weights.npz", **weights)
        np.save(out / "lp.npy", lp)
        (out / "results.json").write_text(json.dumps(results))
    end_gloo_job()


if __name__ == "__main__":
    main()
