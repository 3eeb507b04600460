"""Shared-prefix training: the torch worker's train step with ``shared_prefix`` on and off.

GRPO-shaped batches (``--prompts`` prompts × ``--group`` samples, a ``--prompt-len``-token
prompt shared by a group, completions of ``--completion-len`` tokens ± 25%) on a random-init
Qwen2 (``--hidden``, ``--layers``); the same batch and weights for both layouts. Prints, per
layout, the median train-step time over ``--steps`` steps after one warm-up, the batch's tokens
and those the forwards processed (``num_tokens_forwarded``: padding included, a tree once), and
the ratio of the step times.

    uv run --no-sync python bench/shared_prefix.py                    # the long-prompt shape
    uv run --no-sync python bench/shared_prefix.py --prompt-len 48 --completion-len 24
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.rl import PolicyLoss
from dockyard.torch.testing import build_tiny_model
from dockyard.torch.worker import TorchPolicyWorker


def grpo_batch(args: argparse.Namespace) -> Batch:
    """``prompts × group`` rows: a shared prompt per group, then a random completion."""
    rng = np.random.default_rng(0)
    c = args.completion_len
    seqs = []
    for _ in range(args.prompts):
        prompt = rng.integers(3, 1024, size=args.prompt_len).tolist()
        for _ in range(args.group):
            n = int(rng.integers(max(1, c - c // 4), c + c // 4 + 1))
            seqs.append(prompt + rng.integers(3, 1024, size=n).tolist())
    T = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), T), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
    cols = np.arange(T)[None]
    attention = cols < np.asarray([len(s) for s in seqs])[:, None]
    loss_mask = attention & (cols >= args.prompt_len)
    adv = (rng.normal(size=(len(seqs), 1)) * loss_mask).astype(np.float32)
    gen = (rng.normal(-2.0, 0.5, size=ids.shape) * loss_mask).astype(np.float32)
    return Batch(ids, attention, loss_mask, adv, gen)


def measure(args: argparse.Namespace, model: str, batch: Batch, shared: bool) -> dict:
    worker = TorchPolicyWorker(
        {
            "model_name": model,
            "precision": "float32",
            "train_micro_batch_size": args.micro_batch,
            "reference_policy": False,
            "shared_prefix": shared,
        }
    )
    loss = PolicyLoss(options={"kl_beta": 0.0})
    times = []
    for _ in range(args.steps + 1):
        t0 = time.perf_counter()
        m = worker.train_step(batch, loss)
        times.append(time.perf_counter() - t0)
    return {
        "median_step_s": statistics.median(times[1:]),
        "tokens": m["num_tokens"],
        "tokens_forwarded": m["num_tokens_forwarded"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--completion-len", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    model = str(
        build_tiny_model(
            family="qwen2", hidden_size=args.hidden, num_layers=args.layers,
            num_heads=args.hidden // 32, num_kv_heads=max(1, args.hidden // 128),
        )
    )  # fmt: skip
    batch = grpo_batch(args)
    off = measure(args, model, batch, shared=False)
    on = measure(args, model, batch, shared=True)
    print(
        json.dumps(
            {
                "shape": vars(args),
                "unshared": off,
                "shared": on,
                "step_ratio_shared_over_unshared": on["median_step_s"] / off["median_step_s"],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
