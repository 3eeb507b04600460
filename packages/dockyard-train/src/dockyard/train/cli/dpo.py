"""`dockyard dpo --config FILE [--output DIR] [overrides...]`: DPO and its variants on pairs.

``loss_fn``: a preference loss (``type: dpo | cdpo | ipo | dpop | rdpo | simpo | orpo``).
The data is ``data.train_path``: JSONL or Parquet of ``{"prompt", "chosen", "rejected"}``;
held out: ``data.val_path``, else a seeded tenth of the training pairs (at most
``grpo.max_val_samples``). Steps: ``grpo.max_num_steps``; pairs per step:
``policy.train_global_batch_size``, per micro-batch ``policy.train_micro_batch_size`` (two rows
each); held-out evaluation: ``grpo.val_at_start``, ``val_period``, ``val_at_end``; metrics:
``logger.log_dir`` (and ``dpo_accuracy.png`` there: held-out and training preference accuracy). The trained model is written as a Hugging Face folder to ``--output``
(default ``checkpointing.export_hf``, else ``LOG_DIR/model``).
"""

from __future__ import annotations

from typing import Any

from dockyard.core.config import MasterConfig
from dockyard.core.rl import PreferenceLoss
from dockyard.train.algorithms.configs import torch_worker_config
from dockyard.train.algorithms.dpo import DPOStrategy
from dockyard.train.cli.pair_command import PairCommand

CURVES = (("val/preference_accuracy", "o-"), ("train/preference_accuracy", "-"))


def _problems(cfg: MasterConfig) -> list[str]:
    problems = []
    if not cfg.data.train_path:
        problems.append(
            "data.train_path: dockyard dpo needs a JSONL or Parquet file of "
            "{prompt, chosen, rejected} pairs"
        )
    if cfg.policy.jax_cfg.enabled:
        problems.append("policy.jax_cfg.enabled: dockyard dpo trains on the torch worker")
    return problems


def _worker(cfg: MasterConfig) -> Any:
    """π_ref's logprobs come from the policy before its first step: no second copy of the
    model; two rows per pair in a micro-batch."""
    from dockyard.torch.worker import TorchPolicyWorker  # lazy: dockyard-torch is an extra

    return TorchPolicyWorker({**torch_worker_config(cfg), "reference_policy": False,
                              "train_micro_batch_size": 2 * cfg.policy.train_micro_batch_size})  # fmt: skip


COMMAND = PairCommand(
    name="dpo", example="dpo.yaml", override="loss_fn.beta=0.2", output="HF model",
    title=lambda cfg: f"DPO ({cfg.loss_fn.type})",
    accuracy="preference_accuracy", accuracy_words="preference accuracy",
    problems=_problems, worker=_worker,
    strategy=lambda cfg, renderer: DPOStrategy(
        renderer, PreferenceLoss.from_config(cfg.loss_fn), cfg.policy.max_total_sequence_length
    ),
    parse=None,
    plot=("dpo_accuracy", CURVES),
)  # fmt: skip
add_arguments, run = COMMAND.add_arguments, COMMAND.run
