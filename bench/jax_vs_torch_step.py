"""One GRPO train step through the JAX worker vs the torch worker, same model and batch, on CPU.

For random-initialised Qwen2 models of about 1M and 10M parameters (``dockyard.torch.testing``),
both workers take an optimizer step on the same batch of B sequences of at most T tokens with
core's ``PolicyLoss`` (clipped PG + k3 KL), float32, one process. Reports, per backend, the
median step time over ``--repeats`` steps after ``--warmup`` steps (JAX compiles on the first),
real tokens/s, the first-step (compile) time, and the ratio jax / torch. The two backends'
losses on the first step are printed too (they agree to fp32 tolerance, see
tests/jax/test_torch_parity.py).

    .venv/bin/python bench/jax_vs_torch_step.py                  # 1m,10m (a few minutes)
    .venv/bin/python bench/jax_vs_torch_step.py --sizes 1m --repeats 5
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import numpy as np

from dockyard.core.rl import PolicyLoss
from dockyard.jax import JaxPolicyWorker
from dockyard.torch.testing import build_tiny_model, random_batch
from dockyard.torch.worker import TorchPolicyWorker

SIZES = {  # name: build_tiny_model arguments (vocab 1024), as bench/torch_step.py
    "1m": {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2,
           "intermediate_size": 384},
    "10m": {"hidden_size": 256, "num_layers": 10, "num_heads": 8, "num_kv_heads": 4,
            "intermediate_size": 1024},
    "50m": {"hidden_size": 512, "num_layers": 12, "num_heads": 8, "num_kv_heads": 4,
            "intermediate_size": 2048},
}  # fmt: skip


def time_steps(worker, batch, loss, warmup: int, repeats: int) -> tuple[float, list[float], float]:
    """``(first step s, step times s, first-step loss)``."""
    t0 = time.perf_counter()
    first = worker.train_step(batch, loss)
    compile_s = time.perf_counter() - t0
    for _ in range(warmup - 1):
        worker.train_step(batch, loss)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        worker.train_step(batch, loss)
        times.append(time.perf_counter() - t0)
    return compile_s, times, first["loss"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1m,10m", help="comma list of " + ",".join(SIZES))
    ap.add_argument("--batch", type=int, default=8, help="B sequences per step")
    ap.add_argument("--seq", type=int, default=128, help="T: maximum sequence length")
    ap.add_argument("--micro", type=int, default=8, help="train_micro_batch_size")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    cfg = {"precision": "float32", "train_micro_batch_size": args.micro,
           "logprob_batch_size": args.batch, "max_grad_norm": 1.0,
           "optimizer": {"lr": 1e-5}}  # fmt: skip
    loss = PolicyLoss("clipped_pg", {"kl_beta": 0.01, "agg": "token-mean"})
    rows = []
    for name in args.sizes.split(","):
        path = build_tiny_model(**SIZES[name])
        base = random_batch(args.batch, args.seq, vocab_size=1024, seed=0)
        tw = TorchPolicyWorker({"model_name": str(path), **cfg})
        ref = tw.get_reference_logprobs(base)
        batch = dataclasses.replace(base, gen_logprobs=ref * base.loss_mask, ref_logprobs=ref)
        n_params = sum(
            int(np.prod(a.shape)) for b in tw.export_weights(1 << 30) for a in b.values()
        )
        tokens = int(batch.attention_mask.sum())
        res = {"torch": time_steps(tw, batch, loss, args.warmup, args.repeats)}
        del tw
        jw = JaxPolicyWorker({"model_name": str(path), **cfg, "pad_to_multiple": args.seq})
        res["jax"] = time_steps(jw, batch, loss, args.warmup, args.repeats)
        del jw
        rows.append((name, n_params, tokens, res))

    print(f"\nGRPO train step, CPU float32, B={args.batch}, T≤{args.seq}, "
          f"micro-batch {args.micro}; median of {args.repeats} after {args.warmup} warm-up\n")  # fmt: skip
    head = ("model", "params", "backend", "first step s", "median ms", "tokens/s", "jax/torch",
            "loss@1")  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, n_params, tokens, res in rows:
        med = {k: statistics.median(v[1]) for k, v in res.items()}
        for backend in ("torch", "jax"):
            compile_s, _, first_loss = res[backend]
            ratio = f"{med['jax'] / med['torch']:.2f}×" if backend == "jax" else ""
            print(f"| {name} | {n_params / 1e6:.1f}M | {backend} | {compile_s:.2f} | "
                  f"{med[backend] * 1e3:.1f} | {tokens / med[backend]:,.0f} | {ratio} | "
                  f"{first_loss:.6f} |")  # fmt: skip


if __name__ == "__main__":
    main()
