"""A 2-rank FSDP2 (gloo) job of the reward-model worker for tests/torch/test_reward_worker.py;
run under torchrun: ``python -m torch.distributed.run --nproc_per_node=2 _reward_dist_job.py
OUT MODEL CONFIG_JSON``. Rank 0 writes the scores before and after one step, and its metrics."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from dockyard.core.rl import BradleyTerryPairsLoss
from dockyard.torch.reward import TorchRewardWorker
from dockyard.torch.testing import end_gloo_job

sys.path.insert(0, str(Path(__file__).parent))
from test_reward_worker import pair_batch


def main() -> None:
    out, model, config = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    worker = TorchRewardWorker({**config, "model_name": model})
    assert worker.fsdp
    assert dist.get_world_size() == 2
    batch = pair_batch()
    before = worker.get_scores(batch)
    m = worker.train_step(batch, BradleyTerryPairsLoss())
    after = worker.get_scores(batch)
    if worker.rank == 0:
        results = {"before": before.tolist(), "after": after.tolist(), **m}
        (out / "results.json").write_text(json.dumps(results))
    end_gloo_job()


if __name__ == "__main__":
    main()
