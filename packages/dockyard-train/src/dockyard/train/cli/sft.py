"""`dockyard sft --config FILE [overrides...]`: masked-NLL SFT on chat data.

The data is ``data.train_path``: JSONL of ``{"messages": [..., {"role": "assistant", ...}]}``.
Steps: ``grpo.max_num_steps``; batch: ``policy.train_global_batch_size``; the trained model is
written as a Hugging Face folder to ``--output``.
"""

from __future__ import annotations

import argparse

from dockyard.core.config.errors import ConfigError
from dockyard.core.rl import MaskedNLLLoss
from dockyard.train.algorithms.configs import prompt_renderer, torch_worker_config
from dockyard.train.algorithms.sft import sft
from dockyard.train.data import read_jsonl
from dockyard.train.preflight import load_or_exit, report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config")
    parser.add_argument("--output", required=True, help="folder for the trained HF model")
    parser.add_argument("overrides", nargs="*", help="dotted overrides")


def run(args: argparse.Namespace) -> int:
    # the model, the data files, the names; SFT starts no engine, sandbox or run folders
    skip = ("loss", "extras", "engine", "sandbox", "transport", "outputs")
    cfg = load_or_exit(args.config, args.overrides, "sft", deep=True, load=False, skip=skip)
    if not cfg.data.train_path:
        problem = "data.train_path: dockyard sft needs a JSONL file of chat examples"
        report("sft", ConfigError([problem], args.config))

    from transformers import AutoTokenizer  # lazy: transformers is optional (torch extra)

    # lazy: dockyard-torch is optional (the torch extra)
    from dockyard.torch.worker import TorchPolicyWorker

    wcfg = {**torch_worker_config(cfg), "reference_policy": False}
    worker = TorchPolicyWorker(wcfg)
    tok = AutoTokenizer.from_pretrained(cfg.policy.tokenizer.name or cfg.policy.model_name)
    # loss_fn.type: nll sets the NLL's normalisation; a GRPO config's loss is not SFT's
    loss = MaskedNLLLoss.from_config(cfg.loss_fn) if cfg.loss_fn.type == "nll" else None
    hist = sft(
        worker,
        prompt_renderer(cfg, tok),  # chat template, prompt and system files
        read_jsonl(cfg.data.train_path),
        steps=cfg.grpo.max_num_steps,
        batch_size=cfg.policy.train_global_batch_size,
        seed=cfg.grpo.seed,
        output_dir=args.output,
        loss_fn=loss,
    )
    print(f"SFT: {len(hist)} steps, final loss {hist[-1]['loss']:.4f}; model in {args.output}")
    return 0
