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

import argparse
from pathlib import Path
from typing import Any

CURVES = (("val/preference_accuracy", "o-"), ("train/preference_accuracy", "-"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config (examples/configs/dpo.yaml)")
    parser.add_argument("--output", default=None, help="folder for the trained HF model")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("overrides", nargs="*", help="dotted overrides: loss_fn.beta=0.2")


def _problems(cfg: Any) -> list[str]:
    problems = []
    if not cfg.data.train_path:
        problems.append(
            "data.train_path: dockyard dpo needs a JSONL or Parquet file of "
            "{prompt, chosen, rejected} pairs"
        )
    if cfg.policy.jax_cfg.enabled:
        problems.append("policy.jax_cfg.enabled: dockyard dpo trains on the torch worker")
    return problems


def run(args: argparse.Namespace) -> int:
    from dockyard.core.config.errors import ConfigError
    from dockyard.train.preflight import deep_check, load_or_exit, report

    cfg = load_or_exit(args.config, args.overrides, "dpo")  # the schema and the names
    # the loss (a preference loss), the model, the data files, the output folders; DPO starts
    # no engine or sandbox and needs no generation or transport extra
    skip = ("extras", "sandbox", "transport")
    if problems := deep_check(cfg, load=False, skip=skip, driver="dpo") + _problems(cfg):
        report("dpo", ConfigError(problems, args.config))

    from transformers import AutoTokenizer

    from dockyard.core.rl import PreferenceLoss
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.algorithms.dpo import dpo, load_data, loop_options
    from dockyard.train.logging import MetricsLogger, plot_curves
    from dockyard.train.prompts import PromptRenderer
    from dockyard.train.runtime.stack import torch_worker_config

    p, g = cfg.policy, cfg.grpo
    out = args.output or cfg.checkpointing.export_hf or str(Path(cfg.logger.log_dir) / "model")
    train, val = load_data(cfg)
    # π_ref's logprobs come from the policy before its first step: no second copy of the model
    worker = TorchPolicyWorker(
        {
            **torch_worker_config(cfg),
            "reference_policy": False,
            "train_micro_batch_size": 2 * p.train_micro_batch_size,  # rows: two per pair
        }
    )
    tok = AutoTokenizer.from_pretrained(p.tokenizer.name or p.model_name)
    log = MetricsLogger(
        cfg.logger, g.max_num_steps, config_dict=cfg.model_dump(mode="json"),
        progress=not args.no_progress, desc="dpo",
    )  # fmt: skip
    try:
        result = dpo(
            worker,
            PromptRenderer.from_config(cfg, tok),  # chat template, prompt and system files
            train,
            val,
            PreferenceLoss.from_config(cfg.loss_fn),
            **loop_options(cfg),
            output_dir=out,
            log=log,
        )
    finally:
        log.close()
    plot = plot_curves(log, cfg.logger, "dpo_accuracy", f"DPO ({cfg.loss_fn.type})", CURVES)
    print(
        f"DPO ({cfg.loss_fn.type}): {len(result.history)} steps on {len(train)} pairs, final loss "
        f"{result.history[-1]['loss']:.4f}; held-out preference accuracy {_accuracy(result.val)}"
        f" on {len(val)} pairs; model in {out}; logs in {log.dir}; plot: {plot}",
        flush=True,
    )
    return 0


def _accuracy(val: dict[int, dict[str, float]]) -> str:
    if not val:
        return "not measured (grpo.val_at_start, val_period and val_at_end are off)"
    steps = sorted({min(val), max(val)})
    return " -> ".join(f"{val[s]['preference_accuracy']:.3f} (step {s})" for s in steps)
