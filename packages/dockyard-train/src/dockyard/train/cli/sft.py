"""`dockyard sft --config FILE [overrides...]`: masked-NLL SFT on chat data.

The data is ``data.train_path``: JSONL of ``{"messages": [..., {"role": "assistant", ...}]}``
(every assistant message is trained); with ``"images"`` (base64 PNGs or files relative to the
data file, one per ``{"type": "image"}`` part), a vision-language model learns from them.
Steps: ``grpo.max_num_steps``; batch: ``policy.train_global_batch_size``; the trained model is
written as a Hugging Face folder to ``--output``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

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


def image_tokens(model_name: str, examples: list[dict[str, Any]], where: str) -> Any:
    """The model's image tokens when the examples have images (None otherwise); images with a
    text model: a clear error before training. Image files are relative to ``where``'s folder."""
    if not any(e.get("images") for e in examples):
        return None
    from transformers import AutoConfig  # lazy: transformers is optional (torch extra)

    # lazy: dockyard-torch is optional (the torch extra)
    from dockyard.torch.vision import ImageInputs, is_vision_language

    config = AutoConfig.from_pretrained(model_name)
    if not is_vision_language(config):
        raise SystemExit(
            f"dockyard sft: {where} has images but {model_name} is a text model: SFT a "
            "vision-language model (Qwen2-VL / Qwen2.5-VL), or drop the images"
        )
    base = Path(where).parent
    for e in examples:  # image files relative to the data file, as the data file says
        e["images"] = [
            str(base / im) if isinstance(im, str) and (base / im).is_file() else im
            for im in e.get("images") or []
        ]
    return ImageInputs(model_name, config)


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
    examples = read_jsonl(cfg.data.train_path)
    hist = sft(
        worker,
        prompt_renderer(cfg, tok),  # chat template, prompt and system files
        examples,
        steps=cfg.grpo.max_num_steps,
        batch_size=cfg.policy.train_global_batch_size,
        seed=cfg.grpo.seed,
        output_dir=args.output,
        loss_fn=loss,
        image_tokens=image_tokens(cfg.policy.model_name, examples, cfg.data.train_path),
    )
    print(f"SFT: {len(hist)} steps, final loss {hist[-1]['loss']:.4f}; model in {args.output}")
    return 0
