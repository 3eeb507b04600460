"""`dockyard rm --config FILE [--output DIR] [overrides...]`: a reward model on pairs.

``loss_fn``: ``{type: bradley_terry, use_margin: false}``. The data is ``data.train_path``:
JSONL or Parquet of ``{"prompt", "chosen", "rejected"}`` (DPO's pairs) with an optional
numeric ``margin``; held out: ``data.val_path``, else a seeded tenth of the training pairs (at
most ``grpo.max_val_samples``). Steps: ``grpo.max_num_steps``; pairs per step:
``policy.train_global_batch_size``, per micro-batch ``policy.train_micro_batch_size`` (two rows
each); held-out evaluation: ``grpo.val_at_start``, ``val_period``, ``val_at_end``; metrics:
``logger.log_dir`` (and ``rm_accuracy.png`` there). The trained model is written as a Hugging
Face sequence-classification folder to ``--output`` (default ``checkpointing.export_hf``, else
``LOG_DIR/model``): GRPO's ``reward_model`` environment scores with it.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.config import MasterConfig
from dockyard.core.rl import BradleyTerryLoss
from dockyard.train.algorithms.configs import torch_worker_config
from dockyard.train.algorithms.rm import RMStrategy, parse_rm_pair
from dockyard.train.cli.pair_command import PairCommand

ACCURACY_CURVES = (("val/rm_accuracy", "o-"), ("train/rm_accuracy", "-"))


def _problems(cfg: MasterConfig) -> list[str]:
    problems = []
    if not cfg.data.train_path:
        problems.append(
            "data.train_path: dockyard rm needs a JSONL or Parquet file of "
            "{prompt, chosen, rejected} pairs (and an optional margin)"
        )
    if cfg.policy.jax_cfg.enabled:
        problems.append("policy.jax_cfg.enabled: dockyard rm trains on the torch worker")
    if cfg.policy.sequence_packing.enabled:
        problems.append(
            "policy.sequence_packing.enabled: the reward model trains padded batches; set it "
            "to false (policy.dynamic_batching gives token-budgeted micro-batches)"
        )
    if (cp := cfg.policy.dtensor_cfg.context_parallel_size) > 1:
        problems.append(
            f"policy.dtensor_cfg.context_parallel_size={cp}: the reward model scores whole "
            "rows (its head reads each row's last token); set it to 1"
        )
    return problems


def _worker(cfg: MasterConfig) -> Any:
    """Two rows per pair in a micro-batch."""
    from dockyard.torch.reward import TorchRewardWorker  # lazy: dockyard-torch is an extra

    rows = {"train_micro_batch_size": 2 * cfg.policy.train_micro_batch_size}
    return TorchRewardWorker({**torch_worker_config(cfg), **rows})


COMMAND = PairCommand(
    name="rm", example="rm.yaml", override="loss_fn.use_margin=true",
    output="HF reward model", title=lambda cfg: "reward model",
    accuracy="rm_accuracy", accuracy_words="pair accuracy",
    problems=_problems, worker=_worker,
    strategy=lambda cfg, renderer: RMStrategy(
        renderer, BradleyTerryLoss.from_config(cfg.loss_fn), cfg.policy.max_total_sequence_length
    ),
    parse=parse_rm_pair,
    plot=("rm_accuracy", ACCURACY_CURVES),
)  # fmt: skip
add_arguments, run = COMMAND.add_arguments, COMMAND.run
