"""The transformers engine on a GRPO step's generation vs one padded ``model.generate`` (TRL's way).

    .venv/bin/python bench/hf_engine.py                          # quickstart model, 8 tokens
    .venv/bin/python bench/hf_engine.py --model 25m --new-tokens 128 --runs 5
    .venv/bin/python bench/hf_engine.py --engine mymod:OldEngine # another engine class

One round = ``--prompts`` requests sent at once (``asyncio.gather``, as the collector does),
each ``n = --samples`` samples of one prompt, temperature 1, top-p 1, no top-k, seeded, at most
``--new-tokens`` tokens. The reference round: the same ``prompts × samples`` rows left-padded
into one ``model.generate(do_sample=True)`` call. Rounds alternate (engine, generate, engine,
...) after one warm-up each, so drifting machine load hits both alike. Prints one JSON line:
per system the median, min and max seconds of a round and the tokens it produced, and the ratio
of the medians (engine / generate).

Models (built locally, cached): ``quickstart`` is ``dockyard quickstart``'s ~2.4 M Qwen2
(hidden 128, 2 layers); ``25m`` is ``bench/vs_trl.py``'s regime-b 25 M Qwen2 (hidden 512,
8 layers, 16 heads, 4 KV heads). Prompt lengths are uniform in ``--prompt-len ± 4``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

MODELS: dict[str, dict[str, int]] = {
    "quickstart": {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
                   "intermediate_size": 384, "vocab_size": 1024},
    "25m": {"hidden_size": 512, "num_layers": 8, "num_heads": 16, "num_kv_heads": 4,
            "intermediate_size": 1024, "vocab_size": 1024},
}  # fmt: skip


def build(name: str) -> Path:
    from dockyard.torch.testing import build_tiny_model

    m = MODELS[name]
    return build_tiny_model(
        hidden_size=m["hidden_size"],
        num_layers=m["num_layers"],
        num_heads=m["num_heads"],
        num_kv_heads=m["num_kv_heads"],
        intermediate_size=m["intermediate_size"],
        vocab_size=m["vocab_size"],
        max_position_embeddings=2048,
        seed=0,
    )


def load_engine(spec: str) -> Any:
    import importlib

    mod, _, cls = spec.partition(":")
    return getattr(importlib.import_module(mod), cls)


def prompts(count: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [
        [rng.randrange(4, vocab) for _ in range(rng.randint(length - 4, length + 4))]
        for _ in range(count)
    ]


async def engine_round(engine: Any, ps: list[list[int]], args: argparse.Namespace, seed: int):
    from dockyard.core.interfaces import SamplingParams

    def params(i: int) -> SamplingParams:
        return SamplingParams(
            n=args.samples, max_tokens=args.new_tokens, temperature=1.0, seed=seed + 100 * i
        )

    t0 = time.perf_counter()
    groups = await asyncio.gather(*(engine.generate(p, params(i)) for i, p in enumerate(ps)))
    dt = time.perf_counter() - t0
    return dt, sum(len(r.token_ids) for g in groups for r in g)


def generate_round(model: Any, ps: list[list[int]], args: argparse.Namespace, pad: int, eos: int):
    import torch

    rows = [p for p in ps for _ in range(args.samples)]
    width = max(len(p) for p in rows)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in rows])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows])
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=args.new_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
        )
    dt = time.perf_counter() - t0
    new = out[:, width:].tolist()
    return dt, sum(r.index(eos) + 1 if eos in r else len(r) for r in new)


def summary(times: list[float], tokens: list[int]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "tokens": statistics.median(tokens),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    if args.threads:
        torch.set_num_threads(args.threads)
    path = build(args.model)
    engine = await load_engine(args.engine)(str(path)).start()
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    gc = model.generation_config
    pad, eos = int(gc.pad_token_id), int(gc.eos_token_id)
    ps = prompts(args.prompts, args.prompt_len, model.config.vocab_size, args.seed)
    eng_t, eng_n, gen_t, gen_n = [], [], [], []
    for r in range(args.runs + 1):  # round 0 warms up
        dt, n = await engine_round(engine, ps, args, args.seed + r)
        dg, m = generate_round(model, ps, args, pad, eos)
        if r:
            eng_t.append(dt)
            eng_n.append(n)
            gen_t.append(dg)
            gen_n.append(m)
    e, g = summary(eng_t, eng_n), summary(gen_t, gen_n)
    return {
        "model": args.model,
        "engine": args.engine,
        "rows": args.prompts * args.samples,
        "new_tokens": args.new_tokens,
        "threads": torch.get_num_threads(),
        "engine_round": e,
        "generate_round": g,
        "ratio": round(e["median_s"] / g["median_s"], 2),
    }


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="quickstart")
    p.add_argument("--engine", default="dockyard.serve.engines.hf_engine:TransformersEngine")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(parse(sys.argv[1:])))), flush=True)
