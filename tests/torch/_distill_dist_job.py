"""A 2-rank FSDP2 (gloo) distillation step for tests/torch/test_worker_distillation.py; run
under torchrun: ``_distill_dist_job.py OUT STUDENT TEACHER CONFIG_JSON``.

The teacher is sharded like the student; 5 rows at one per micro-batch give rank 1 a dummy
micro-batch (its student and teacher collectives must stay in step with rank 0's real one).
Rank 0 writes the held-out metrics before the step and the step's metrics to OUT/results.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from dockyard.core.rl import DistillationLoss, OnPolicyDistillationLoss
from dockyard.torch.testing import end_gloo_job, random_batch
from dockyard.torch.worker import TorchPolicyWorker


def main() -> None:
    out, student, teacher, config = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    cfg = {**json.loads(config), "model_name": student, "teacher_model_name": teacher}
    worker = TorchPolicyWorker(cfg)
    assert worker.fsdp
    assert dist.get_world_size() == 2
    batch = random_batch(5, 16, seed=3)
    loss = OnPolicyDistillationLoss(DistillationLoss(topk=8))
    before = worker.loss_metrics(batch, loss)
    step = worker.train_step(batch, loss)
    if worker.rank == 0:
        (out / "results.json").write_text(json.dumps({"before": before, "step": step}))
    end_gloo_job()


if __name__ == "__main__":
    main()
