"""A GRPO train step through dockyard's torch worker vs plain transformers on the same tokens.

Part 1 — overhead: for random-initialised Qwen2 models of about 1M, 10M and 50M parameters, one
optimizer step on the same batch (B sequences, long-tailed lengths ≤ T) through

* ``worker``: ``TorchPolicyWorker.train_step(batch, PolicyLoss())`` (one micro-batch, padded);
* ``plain``:  HF forward on the padded batch → token logprobs → the same core GRPO loss →
  backward → grad-norm clip → AdamW step, written inline.

Reports median step time over ``--repeats`` runs (after a warm-up), tokens/s (real tokens) and
the ratio worker / plain (goal ≤ 1.1×).

Part 2 — packing: on the ~10M model and a long-tailed length mix (32 sequences, log-normal
lengths with median T/4, clipped to [24, T]: most short, a few near T, as GRPO rollouts are),
real tokens/s of one train step in three batching modes with the same peak activation size
(m sequences of T tokens, m = ``--mb-size``):

* ``padded``:  fixed micro-batches of m sequences in rollout order, each padded to its longest;
* ``dynamic``: sequences sorted by length, cut so that b · T_max ≤ m·T (dynamic batching);
* ``packed``:  first-fit-decreasing into rows of ≤ m·T tokens (sequence packing).

``fill`` is real tokens / tokens computed (padding included). Ratios are against ``padded``.

    .venv/bin/python bench/torch_step.py                     # all sizes (a few minutes on CPU)
    .venv/bin/python bench/torch_step.py --sizes 1m,10m --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

from dockyard.core.experience import Batch
from dockyard.core.rl import PolicyLoss, compute_advantages
from dockyard.torch.logprobs import token_logprobs
from dockyard.torch.packing import dynamic_batches, fixed_batches
from dockyard.torch.testing import build_tiny_model
from dockyard.torch.worker import TorchPolicyWorker

SIZES = {  # name: build_tiny_model arguments (vocab 1024)
    "1m": {
        "hidden_size": 128,
        "num_layers": 4,
        "num_heads": 4,
        "num_kv_heads": 2,
        "intermediate_size": 384,
    },
    "10m": {
        "hidden_size": 256,
        "num_layers": 10,
        "num_heads": 8,
        "num_kv_heads": 4,
        "intermediate_size": 1024,
    },
    "50m": {
        "hidden_size": 512,
        "num_layers": 12,
        "num_heads": 8,
        "num_kv_heads": 4,
        "intermediate_size": 2048,
    },
}


def grpo_batch(groups: int, group_size: int, max_len: int, seed: int = 0) -> Batch:
    """Long-tailed lengths (log-normal, clipped to max_len), GRPO advantages from random
    0/1 rewards, prompt of 16 tokens, generation logprobs near the policy's."""
    rng = np.random.default_rng(seed)
    B = groups * group_size
    lengths = np.clip(rng.lognormal(np.log(max_len / 4), 0.7, size=B).astype(int), 24, max_len)
    cols = np.arange(max_len)[None]
    attention = cols < lengths[:, None]
    ids = rng.integers(3, 1024, size=(B, max_len)) * attention
    loss_mask = attention & (cols >= 16)
    rewards = rng.integers(0, 2, size=(groups, group_size)).astype(np.float32)
    adv = compute_advantages(rewards, np.ones_like(rewards, dtype=bool), estimator="grpo")
    adv = (np.asarray(adv).reshape(B, 1) * loss_mask).astype(np.float32)
    gen = (-np.log(1024.0) + rng.normal(0, 0.01, size=(B, max_len))) * loss_mask
    return Batch(ids.astype(np.int64), attention, loss_mask, adv, gen.astype(np.float32))


def plain_step(model, optimizer, batch: Batch, loss_fn) -> float:
    """Inline HF forward + backward + AdamW on the padded batch (the baseline)."""
    width = int(batch.attention_mask.sum(1).max())
    ids = torch.as_tensor(batch.input_ids[:, :width])
    mask = torch.as_tensor(batch.attention_mask[:, :width])
    logits = model(input_ids=ids, attention_mask=mask.long(), use_cache=False).logits
    lp = token_logprobs(logits, ids) * mask
    fields = {
        "advantages": torch.as_tensor(batch.advantages[:, :width]),
        "loss_mask": torch.as_tensor(batch.loss_mask[:, :width]),
        "gen_logprobs": torch.as_tensor(batch.gen_logprobs[:, :width]),
        "prev_logprobs": torch.as_tensor(batch.prev_logprobs[:, :width]),
    }
    loss, _ = loss_fn(lp, fields)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def overhead(size: str, batch: Batch, repeats: int) -> dict:
    from transformers import AutoModelForCausalLM

    path = build_tiny_model(family="qwen2", **SIZES[size])
    cfg = {
        "model_name": str(path),
        "reference_policy": False,
        "precision": "float32",
        "train_micro_batch_size": batch.shape[0],
        "optimizer": {"lr": 1e-6},
    }
    worker = TorchPolicyWorker(cfg)
    n_params = sum(p.numel() for p in worker.model.parameters())
    batch.prev_logprobs = worker.get_logprobs(batch)
    loss_fn = PolicyLoss()
    t_worker = timed(lambda: worker.train_step(batch, loss_fn), repeats)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    t_plain = timed(lambda: plain_step(model, opt, batch, loss_fn), repeats)
    tokens = int(batch.attention_mask.sum())
    return {
        "size": size,
        "params": n_params,
        "worker": t_worker,
        "plain": t_plain,
        "tok_s_worker": tokens / t_worker,
        "tok_s_plain": tokens / t_plain,
    }


def computed_tokens(lengths: np.ndarray, mode: str, mb_size: int, budget: int) -> int:
    """Tokens the forward pass runs on (padding included) under a batching mode."""
    if mode == "packed":
        return int(lengths.sum())
    plan = (
        dynamic_batches(lengths, budget)
        if mode == "dynamic"
        else fixed_batches(len(lengths), mb_size)
    )
    return sum(len(mb) * int(lengths[mb].max()) for mb in plan)


def packing(batch: Batch, mb_size: int, repeats: int) -> list[dict]:
    path = build_tiny_model(family="qwen2", **SIZES["10m"])
    T = batch.shape[1]
    budget = mb_size * T
    base = {
        "model_name": str(path),
        "reference_policy": False,
        "precision": "float32",
        "optimizer": {"lr": 1e-6},
        "train_micro_batch_size": mb_size,
    }
    modes = {
        "padded": base,
        "dynamic": {**base, "dynamic_batching": {"enabled": True, "train_mb_tokens": budget}},
        "packed": {**base, "sequence_packing": {"enabled": True, "train_mb_tokens": budget}},
    }
    lengths = batch.attention_mask.sum(1)
    tokens = int(lengths.sum())
    loss_fn = PolicyLoss()
    rows = []
    for mode, cfg in modes.items():
        worker = TorchPolicyWorker(cfg)
        if batch.prev_logprobs is None:
            batch.prev_logprobs = worker.get_logprobs(batch)
        t = timed(lambda w=worker: w.train_step(batch, loss_fn), repeats)
        rows.append(
            {
                "mode": mode,
                "time": t,
                "tok_s": tokens / t,
                "fill": tokens / computed_tokens(lengths, mode, mb_size, budget),
            }
        )
        del worker
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1m,10m,50m")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--groups", type=int, default=2, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=4, help="G samples per prompt")
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--skip-packing", action="store_true")
    parser.add_argument("--mb-size", type=int, default=4, help="m: sequences per micro-batch")
    args = parser.parse_args()
    torch.manual_seed(0)
    batch = grpo_batch(args.groups, args.group_size, args.max_len)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
        f"{os.getloadavg()[0]:.1f}; batch "
        f"{batch.shape[0]} × ≤{batch.shape[1]} tokens, {int(batch.attention_mask.sum())} real; "
        f"median of {args.repeats}\n"
    )
    print(
        f"{'model':>6} {'params':>8} {'worker s':>9} {'plain s':>9} {'ratio':>6} "
        f"{'worker tok/s':>13} {'plain tok/s':>12}"
    )
    for size in args.sizes.split(","):
        r = overhead(size.strip(), batch, args.repeats)
        print(
            f"{r['size']:>6} {r['params'] / 1e6:>7.1f}M {r['worker']:>9.3f} {r['plain']:>9.3f} "
            f"{r['worker'] / r['plain']:>5.2f}× {r['tok_s_worker']:>13.0f} "
            f"{r['tok_s_plain']:>12.0f}"
        )
    if args.skip_packing:
        return
    mix = grpo_batch(4, 8, 2 * args.max_len, seed=1)
    rows = packing(mix, args.mb_size, args.repeats)
    T = mix.shape[1]
    print(
        f"\nbatching modes (10m model, {mix.shape[0]} sequences, long-tailed lengths ≤ {T}, "
        f"{int(mix.attention_mask.sum())} real tokens, micro-batch budget "
        f"{args.mb_size}×{T} tokens; median of {args.repeats}):"
    )
    print(f"{'mode':>8} {'step s':>8} {'fill':>6} {'real tok/s':>11} {'vs padded':>10}")
    pad = rows[0]["tok_s"]
    for r in rows:
        print(
            f"{r['mode']:>8} {r['time']:>8.2f} {r['fill']:>6.0%} {r['tok_s']:>11.0f} "
            f"{r['tok_s'] / pad:>9.2f}×"
        )


if __name__ == "__main__":
    main()
