"""`dockyard osworld warmstart --config grpo_osworld.yaml`: the model an OSWorld GRPO run starts
from, written where the config's ``policy.model_name`` points.

1. a tiny random Qwen2-VL (vision tower, tokenizer, chat template, image processor) is built
   locally (``--base``: start from a model folder of yours instead);
2. the scripted oracle plays the ``demo`` split of ``data.dataset_name`` (osworld_toy: tasks of
   their own seeds, not GRPO's training tasks) on sandboxed desktops
   configured as ``env.<name>.options`` say (screenshots on; the same screen size, settle time
   and turn limit the GRPO run uses), and every solved episode becomes a multi-turn SFT example
   in TRL's vision-language layout (``demos.jsonl`` beside the model: each action trained, each
   screenshot an image part);
3. SFT on them, and the model is written as a Hugging Face folder.

A local sandbox service is started for the demonstrations unless ``--sandbox URL`` names one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from dockyard.core.config import MasterConfig
from dockyard.core.config.sections import EnvConfig
from dockyard.envs.osworld.demos import Demonstration, demonstrate
from dockyard.envs.osworld.env import OSWorldEnvironment
from dockyard.sandbox.launch import start_service
from dockyard.train.algorithms.configs import prompt_renderer
from dockyard.train.algorithms.sft import sft
from dockyard.train.cli.quickstart_common import ProgressBar, sft_worker
from dockyard.train.environments import env_type, load_dataset
from dockyard.train.preflight import load_or_exit
from dockyard.train.prompts import PromptRenderer


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="the GRPO config (grpo_osworld.yaml)")
    p.add_argument(
        "--output", default=None, help="the model folder (default: the config's policy.model_name)"
    )
    p.add_argument(
        "--base",
        default=None,
        help="a vision-language model folder to start from "
        "(default: a tiny random Qwen2-VL built here)",
    )
    p.add_argument("--seed", type=int, default=0, help="the tiny model's and SFT's seed")
    p.add_argument("--demos", type=int, default=64, help="demonstration tasks the oracle plays")
    p.add_argument("--steps", type=int, default=600, help="SFT steps")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--sandbox", default=None, help="a sandbox service URL (default: start one)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", help="dotted overrides of the config")  # fmt: skip


def demo_example(demo: Demonstration) -> dict[str, Any]:
    """A demonstration as an SFT example (``messages`` + ``images``), the conversation laid out
    as a rollout lays out the episode (PromptRenderer's first observation and observations)."""
    layout = PromptRenderer(tokenizer=None)  # only the message layout: no tokenizer needed
    first = demo.first
    convo = layout.with_first_observation(demo.prompt, first.observation, len(first.screenshots))
    images = list(first.screenshots)
    for i, turn in enumerate(demo.turns):
        convo.append({"role": "assistant", "content": turn.action})
        if i < len(demo.turns) - 1:
            convo += layout.observation_messages(turn.observation, None, len(turn.screenshots))
            images += turn.screenshots
    return {"messages": convo, "images": images, "task_id": demo.task_id}


async def collect(
    url: str,
    tasks: list[dict[str, Any]],
    options: dict[str, Any],
    concurrency: int = 2,
    progress: bool = False,
) -> list[Demonstration]:
    """The oracle's solved episodes on ``tasks`` (a desktop per task, ``concurrency`` at once;
    ``progress``: a bar of the episodes done, with how many were solved)."""
    env = OSWorldEnvironment(url, **{**options, "screenshots": True, "replay_dir": None})
    gate = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(tasks), desc="demonstrations", file=sys.stdout, disable=not progress)
    solved = 0

    async def one(task: dict[str, Any]) -> Demonstration | None:
        nonlocal solved
        async with gate:
            demo = await demonstrate(env, task)
        solved += demo is not None
        bar.set_postfix(solved=solved, refresh=False)
        bar.update(1)
        return demo

    try:
        demos = await asyncio.gather(*(one(t) for t in tasks))
    finally:
        bar.close()
        await env.aclose()
    return [d for d in demos if d is not None]


def demo_tasks(dataset: str, n: int) -> list[dict[str, Any]]:
    """The first ``n`` tasks of ``dataset``'s ``demo`` split, the demonstrations' own where the
    dataset has one (osworld_toy: tasks GRPO's train split does not hold; a dataset of fixed
    tasks gives the same tasks for every split); a dataset without one (a plugin's that
    refuses the name) gives its train split's, and says so."""
    try:
        return load_dataset(dataset, "demo")[:n]
    except (ValueError, KeyError) as e:
        print(f"{dataset} has no demo split ({e}): the demonstrations are of its train split, "
              "the tasks GRPO trains on", flush=True)  # fmt: skip
        return load_dataset(dataset, "train")[:n]


def _osworld_env(cfg: MasterConfig) -> tuple[str, EnvConfig]:
    names = [n for n, e in cfg.env.items() if env_type(n, e) == "osworld"]
    if len(names) != 1:
        raise SystemExit(
            f"dockyard osworld warmstart: the config needs one osworld env, has {names}"
        )
    return names[0], cfg.env[names[0]]


def run(args: argparse.Namespace) -> int:
    # lazy: transformers is optional (the torch extra)
    from transformers import AutoConfig, AutoTokenizer

    # lazy: the tiny model's builder needs dockyard-serve's transformers extra
    from dockyard.serve.testing import tiny_vlm_dir

    # lazy: dockyard-torch is optional (the torch extra)
    from dockyard.torch.vision import ImageInputs, is_vision_language

    # the schema and the names: the model it names is the one this writes
    cfg = load_or_exit(args.config, args.overrides, "osworld warmstart")
    name, env_cfg = _osworld_env(cfg)
    out = Path(args.output or cfg.policy.model_name)
    out.parent.mkdir(parents=True, exist_ok=True)
    base = Path(args.base) if args.base else tiny_vlm_dir(out.parent / "base_model", seed=args.seed)
    config = AutoConfig.from_pretrained(base)
    if not is_vision_language(config):
        raise SystemExit(f"dockyard osworld warmstart: {base} is not a vision-language model")
    tasks = demo_tasks(cfg.data.dataset_name or "osworld_toy", args.demos)
    t0 = time.perf_counter()
    print(f"oracle demonstrations: {len(tasks)} tasks on sandboxed desktops", flush=True)
    options, progress = dict(env_cfg.options), not args.no_progress
    if args.sandbox:
        demos = asyncio.run(collect(args.sandbox, tasks, options, progress=progress))
    else:
        with start_service(workers=2) as svc:
            demos = asyncio.run(collect(svc.url, tasks, options, progress=progress))
    if not demos:
        raise SystemExit("dockyard osworld warmstart: the oracle solved no task (see the sandbox)")
    examples = [demo_example(d) for d in demos]
    data = out.parent / "demos.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in examples))
    print(f"  {len(demos)}/{len(tasks)} solved in {time.perf_counter() - t0:.0f} s -> {data}")

    worker = sft_worker(base, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    log = None if args.no_progress else ProgressBar(args.steps, "sft")
    hist = sft(
        worker, prompt_renderer(cfg, AutoTokenizer.from_pretrained(base)), examples,
        steps=args.steps,
        batch_size=args.batch_size, seed=args.seed, output_dir=out, log=log,
        image_tokens=ImageInputs(str(base), config),
    )  # fmt: skip
    if log is not None:
        log.close()
    print(f"SFT: {args.steps} steps, loss {hist[0]['loss']:.3f} -> {hist[-1]['loss']:.3f}; "
          f"model in {out} (env {name})")  # fmt: skip
    return 0
