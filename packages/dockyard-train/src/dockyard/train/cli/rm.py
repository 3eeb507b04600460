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

import argparse
from pathlib import Path
from typing import Any

ACCURACY_CURVES = (("val/rm_accuracy", "o-"), ("train/rm_accuracy", "-"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config (examples/configs/rm.yaml)")
    parser.add_argument("--output", default=None, help="folder for the trained HF reward model")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("overrides", nargs="*", help="dotted overrides: loss_fn.use_margin=true")


def _problems(cfg: Any) -> list[str]:
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
    return problems


def run(args: argparse.Namespace) -> int:
    from dockyard.core.config.errors import ConfigError
    from dockyard.train.preflight import deep_check, load_or_exit, report

    cfg = load_or_exit(args.config, args.overrides, "rm")  # the schema and the names
    # the loss (bradley_terry), the model, the data files, the output folders; no engine,
    # sandbox or transport
    skip = ("extras", "sandbox", "transport")
    if problems := deep_check(cfg, load=False, skip=skip, driver="rm") + _problems(cfg):
        report("rm", ConfigError(problems, args.config))

    from transformers import AutoTokenizer

    from dockyard.core.rl import BradleyTerryLoss
    from dockyard.torch.reward import TorchRewardWorker
    from dockyard.train.algorithms.dpo import load_data, loop_options
    from dockyard.train.algorithms.rm import parse_rm_pair, reward_modelling
    from dockyard.train.logging import MetricsLogger, plot_curves
    from dockyard.train.prompts import PromptRenderer
    from dockyard.train.runtime.stack import torch_worker_config

    p, g = cfg.policy, cfg.grpo
    out = args.output or cfg.checkpointing.export_hf or str(Path(cfg.logger.log_dir) / "model")
    train, val = load_data(cfg, parse_rm_pair)
    rows = {"train_micro_batch_size": 2 * p.train_micro_batch_size}  # two rows per pair
    worker = TorchRewardWorker({**torch_worker_config(cfg), **rows})
    tok = AutoTokenizer.from_pretrained(p.tokenizer.name or p.model_name)
    log = MetricsLogger(
        cfg.logger, g.max_num_steps, config_dict=cfg.model_dump(mode="json"),
        progress=not args.no_progress, desc="rm",
    )  # fmt: skip
    try:
        result = reward_modelling(
            worker,
            PromptRenderer.from_config(cfg, tok),  # chat template, prompt and system files
            train,
            val,
            BradleyTerryLoss.from_config(cfg.loss_fn),
            **loop_options(cfg),
            output_dir=out,
            log=log,
        )
    finally:
        log.close()
    plot = plot_curves(log, cfg.logger, "rm_accuracy", "reward model", ACCURACY_CURVES)
    print(
        f"reward model: {len(result.history)} steps on {len(train)} pairs, final loss "
        f"{result.history[-1]['loss']:.4f}; held-out pair accuracy {_accuracy(result.val)} on "
        f"{len(val)} pairs; model in {out}; logs in {log.dir}; plot: {plot}",
        flush=True,
    )
    return 0


def _accuracy(val: dict[int, dict[str, float]]) -> str:
    if not val:
        return "not measured (grpo.val_at_start, val_period and val_at_end are off)"
    steps = sorted({min(val), max(val)})
    return " -> ".join(f"{val[s]['rm_accuracy']:.3f} (step {s})" for s in steps)
