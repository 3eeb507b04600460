"""A GRPO train step through dockyard's torch worker vs plain transformers on the same tokens.

Part 1 — overhead: for random-initialised Qwen2 models of about 1M, 10M and 50M parameters, one
optimizer step on the same batch (B sequences, long-tailed lengths ≤ T) through

* ``worker``: ``TorchPolicyWorker.train_step(batch, PolicyLoss())`` (one micro-batch, padded);
* ``plain``:  HF forward on the padded batch → token logprobs → the same core GRPO loss →
  backward → grad-norm clip → AdamW step, written inline.

Reports median step time over ``--repeats`` runs (after a warm-up), tokens/s (real tokens) and
the ratio worker / plain (goal ≤ 1.1×).

Part 2 — packing: on the ~10M model and a long-tailed length mix (log-normal, a few sequences
near T), real tokens/s of FFD sequence packing (``train_mb_tokens``) vs fixed padded
micro-batches of the same token budget.

    .venv/bin/python bench/torch_step.py                     # all sizes (a few minutes on CPU)
    .venv/bin/python bench/torch_step.py --sizes 1m,10m --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from dockyard.core.experience import Batch
from dockyard.core.rl import PolicyLoss, compute_advantages
from dockyard.torch.logprobs import token_logprobs
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


def packing(batch: Batch, budget: int, repeats: int) -> dict:
    path = build_tiny_model(family="qwen2", **SIZES["10m"])
    T = batch.shape[1]
    base = {
        "model_name": str(path),
        "reference_policy": False,
        "precision": "float32",
        "optimizer": {"lr": 1e-6},
        "train_micro_batch_size": max(budget // T, 1),
    }
    padded = TorchPolicyWorker(base)
    packed = TorchPolicyWorker(
        {**base, "sequence_packing": {"enabled": True, "train_mb_tokens": budget}}
    )
    batch.prev_logprobs = padded.get_logprobs(batch)
    loss_fn = PolicyLoss()
    t_pad = timed(lambda: padded.train_step(batch, loss_fn), repeats)
    t_pack = timed(lambda: packed.train_step(batch, loss_fn), repeats)
    tokens = int(batch.attention_mask.sum())
    return {
        "padded": tokens / t_pad,
        "packed": tokens / t_pack,
        "tokens": tokens,
        "fill": tokens / batch.attention_mask.size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1m,10m,50m")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--groups", type=int, default=2, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=4, help="G samples per prompt")
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--skip-packing", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    batch = grpo_batch(args.groups, args.group_size, args.max_len)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; batch "
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
    mix = grpo_batch(4, 8, 4 * args.max_len, seed=1)
    p = packing(mix, budget=4 * args.max_len, repeats=args.repeats)
    print(
        f"\npacking (10m model, {mix.shape[0]} sequences, long-tailed lengths, "
        f"{p['fill']:.0%} of the padded batch is real tokens):"
    )
    print(f"{'padded tok/s':>13} {'packed tok/s':>13} {'packed/padded':>14}")
    print(f"{p['padded']:>13.0f} {p['packed']:>13.0f} {p['packed'] / p['padded']:>13.2f}×")


if __name__ == "__main__":
    main()
