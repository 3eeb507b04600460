"""`dockyard sft --config FILE [overrides...]`: masked-NLL SFT on chat data.

The data is ``data.train_path``: JSONL of ``{"messages": [..., {"role": "assistant", ...}]}``.
Steps: ``grpo.max_num_steps``; batch: ``policy.train_global_batch_size``; the trained model is
written as a Hugging Face folder to ``--output``.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config")
    parser.add_argument("--output", required=True, help="folder for the trained HF model")
    parser.add_argument("overrides", nargs="*", help="dotted overrides")


def run(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from dockyard.core.config import load_config
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.algorithms.sft import sft
    from dockyard.train.data import read_jsonl
    from dockyard.train.runtime.stack import torch_worker_config

    cfg = load_config(args.config, args.overrides)
    if not cfg.data.train_path:
        raise SystemExit("dockyard sft: set data.train_path to a JSONL file of chat examples")
    wcfg = {**torch_worker_config(cfg), "reference_policy": False}
    worker = TorchPolicyWorker(wcfg)
    tok = AutoTokenizer.from_pretrained(cfg.policy.tokenizer.name or cfg.policy.model_name)
    hist = sft(
        worker,
        tok,
        read_jsonl(cfg.data.train_path),
        steps=cfg.grpo.max_num_steps,
        batch_size=cfg.policy.train_global_batch_size,
        seed=cfg.grpo.seed,
        output_dir=args.output,
    )
    print(f"SFT: {len(hist)} steps, final loss {hist[-1]['loss']:.4f}; model in {args.output}")
    return 0
