"""A GRPO train step through dockyard's torch worker vs plain transformers on the same tokens.

Part 1 — overhead: for random-initialised Qwen2 models of about 1M, 10M and 50M parameters, one
optimizer step on the same batch (B sequences, long-tailed lengths ≤ T) through

* ``worker``: ``TorchPolicyWorker.train_step(batch, PolicyLoss())`` (one micro-batch, padded);
* ``plain``:  HF forward on the padded batch → token logprobs → the same core GRPO loss →
  backward → grad-norm clip → AdamW step, written inline.

Reports median step time and range over ``--repeats`` runs (after a warm-up; worker and plain
interleaved, so that a change in the machine's load hits both), tokens/s (real tokens) and the
ratio worker / plain (goal ≤ 1.1×). Both run on ``--threads`` torch threads (default: torch's).
``--shape short`` is the quickstart's GRPO batch instead: P = 8 prompts × G = 8 samples, prompts
of 12–20 tokens and ≤ 8 completion tokens (64 sequences of ~20–28 tokens); ``--ray`` also
times ``train_step`` through a ``PolicyHost`` Ray actor (the Batch serialised each call) on
the same threads, against the step time the worker reports from inside the actor.

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
    .venv/bin/python bench/torch_step.py --sizes 2.5m --shape short --threads 1 --repeats 15 \
        --skip-packing --ray                           # the quickstart-sized GRPO step
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dockyard.core.experience import Batch
from dockyard.core.rl import PolicyLoss, compute_advantages
from dockyard.torch.logprobs import token_logprobs
from dockyard.torch.packing import dynamic_batches, fixed_batches
from dockyard.torch.testing import build_tiny_model
from dockyard.torch.worker import TorchPolicyWorker

SIZES: dict[str, dict[str, Any]] = {  # name: build_tiny_model arguments (vocab 1024)
    "2.5m": {  # hidden 256, 2 layers: ~2.5M parameters, ~10 MB in float32 (head_dim 32)
        "hidden_size": 256,
        "num_layers": 2,
        "num_heads": 8,
        "num_kv_heads": 4,
        "intermediate_size": 1024,
    },
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


def short_batch(groups: int = 8, group_size: int = 8, new_tokens: int = 8, seed: int = 0) -> Batch:
    """The quickstart's GRPO batch: ``groups`` prompts of 12–20 tokens, ``group_size`` samples
    each of 1–``new_tokens`` completion tokens (the loss mask), right-padded to the longest."""
    rng = np.random.default_rng(seed)
    B = groups * group_size
    prompt = np.repeat(rng.integers(12, 21, size=groups), group_size)
    lengths = prompt + rng.integers(1, new_tokens + 1, size=B)
    cols = np.arange(int(lengths.max()))[None]
    attention = cols < lengths[:, None]
    ids = rng.integers(3, 1024, size=attention.shape) * attention
    loss_mask = attention & (cols >= prompt[:, None])
    rewards = rng.integers(0, 2, size=(groups, group_size)).astype(np.float32)
    adv = compute_advantages(rewards, np.ones_like(rewards, dtype=bool), estimator="grpo")
    adv = (np.asarray(adv).reshape(B, 1) * loss_mask).astype(np.float32)
    gen = (-np.log(1024.0) + rng.normal(0, 0.01, size=attention.shape)) * loss_mask
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
        "prev_logprobs": torch.as_tensor(np.asarray(batch.prev_logprobs)[:, :width]),
    }
    loss, _ = loss_fn(lp, fields)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def timed(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each of ``fns`` per run, ``repeats`` rounds after a warm-up; the functions
    take turns within a round (a change in the machine's load hits them alike)."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def spread(ts: list[float]) -> str:
    return f"{statistics.median(ts):.3f} [{min(ts):.3f}-{max(ts):.3f}]"


def overhead(size: str, batch: Batch, repeats: int, family: str = "qwen2") -> dict:
    from transformers import AutoModelForCausalLM

    path = build_tiny_model(family=family, **SIZES[size])
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
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    times = timed(
        {
            "worker": lambda: worker.train_step(batch, loss_fn),
            "plain": lambda: plain_step(model, opt, batch, loss_fn),
        },
        repeats,
    )
    tokens = int(batch.attention_mask.sum())
    t_worker, t_plain = (statistics.median(times[k]) for k in ("worker", "plain"))
    return {
        "size": size,
        "params": n_params,
        "cfg": cfg,
        "times": times,
        "worker": t_worker,
        "plain": t_plain,
        "tok_s_worker": tokens / t_worker,
        "tok_s_plain": tokens / t_plain,
    }


def ray_round_trip(cfg: dict, batch: Batch, repeats: int, threads: int) -> dict[str, list[float]]:
    """``train_step`` through a ``PolicyHost`` actor on ``threads`` threads: the driver's round
    trip (the Batch pickled each call) and the step time the worker measured inside."""
    import ray

    from dockyard.train.runtime.hosts import PolicyHost

    ray.init(num_cpus=max(threads, os.cpu_count() or 1), include_dashboard=False)
    try:
        host: Any = (
            ray.remote(PolicyHost)
            .options(num_cpus=threads)
            .remote("dockyard.torch.worker:TorchPolicyWorker", cfg, threads=threads)
        )
        loss_fn = PolicyLoss()
        ray.get(host.train_step.remote(batch, loss_fn))  # warm-up
        out: dict[str, list[float]] = {"round trip": [], "in the actor": [], "overhead": []}
        for _ in range(repeats):
            t0 = time.perf_counter()
            m: dict[str, float] = ray.get(host.train_step.remote(batch, loss_fn))
            rt = time.perf_counter() - t0
            out["round trip"].append(rt)
            out["in the actor"].append(m["step_time_s"])
            out["overhead"].append(rt - m["step_time_s"])
        return out
    finally:
        ray.shutdown()


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
        t = statistics.median(
            timed({mode: lambda w=worker: w.train_step(batch, loss_fn)}, repeats)[mode]
        )
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


def overhead_table(args: argparse.Namespace, batch: Batch) -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads (worker and plain), load "
        f"average {os.getloadavg()[0]:.1f}; batch {batch.shape[0]} × ≤{batch.shape[1]} tokens, "
        f"{int(batch.attention_mask.sum())} real; median [min-max] of {args.repeats}, "
        "interleaved\n"
    )
    print(
        f"{'model':>6} {'params':>8} {'worker s':>22} {'plain s':>22} {'ratio':>6} "
        f"{'worker tok/s':>13} {'plain tok/s':>12}"
    )
    for size in args.sizes.split(","):
        r = overhead(size.strip(), batch, args.repeats, args.family)
        print(
            f"{r['size']:>6} {r['params'] / 1e6:>7.1f}M {spread(r['times']['worker']):>22} "
            f"{spread(r['times']['plain']):>22} {r['worker'] / r['plain']:>5.2f}× "
            f"{r['tok_s_worker']:>13.0f} {r['tok_s_plain']:>12.0f}",
            flush=True,
        )
        if args.ray:
            rt = ray_round_trip(r["cfg"], batch, args.repeats, torch.get_num_threads())
            print(f"{'':>6} train_step through a PolicyHost actor, s:")
            for name, ts in rt.items():
                print(f"{'':>8} {name:>14} {spread(ts)}", flush=True)


def packing_table(args: argparse.Namespace) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="1m,10m,50m", help=f"of {', '.join(SIZES)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--family",
        default="qwen2",
        help="part 1's model family (dockyard.torch.testing.FAMILIES; qwen3_moe: the worker's "
        "grouped-GEMM MoE against transformers' own)",
    )
    parser.add_argument(
        "--shape", choices=("tail", "short"), default="tail", help="see the module docstring"
    )
    parser.add_argument("--groups", type=int, default=2, help="prompts per step (tail)")
    parser.add_argument("--group-size", type=int, default=4, help="G samples per prompt (tail)")
    parser.add_argument("--max-len", type=int, default=256, help="(tail)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (both sides)")
    parser.add_argument("--ray", action="store_true", help="also through a PolicyHost actor")
    parser.add_argument("--skip-packing", action="store_true")
    parser.add_argument("--mb-size", type=int, default=4, help="m: sequences per micro-batch")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.shape == "short":
        batch = short_batch()
    else:
        batch = grpo_batch(args.groups, args.group_size, args.max_len)
    overhead_table(args, batch)
    if not args.skip_packing:
        packing_table(args)


if __name__ == "__main__":
    main()
