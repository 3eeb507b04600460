"""GPU checks for the JAX policy worker (run on a lent CUDA machine with jax[cuda]; ~5 min).

1. torch parity on GPU, fp32: the JAX and torch workers take the same GRPO step on a ~0.5B
   random-initialised Qwen2 (Qwen2.5-0.5B shapes; ``--layers`` fewer to compile faster); loss
   and grad norm agree (relative 1e-3: GPU reductions are reordered; fp32 matmuls run at
   "highest" precision, no TF32, in both).
2. bf16 vs fp32 numerics of the JAX worker: logprob differences, loss / grad-norm relative
   differences and the cosine between the two updates.
3. Throughput: median bf16 step time and tokens/s of both workers on the same batch, ratio.

Prints PASS/FAIL lines and a table; exits 1 on a failed check. With ``DOCKYARD_GPU_REPORT_DIR``
set, the checks and figures also go to ``$DOCKYARD_GPU_REPORT_DIR/bench_jax_checks.json``
(``scripts/gpu_checks.sh`` puts them in its report). JAX does not preallocate the GPU here
(``XLA_PYTHON_CLIENT_PREALLOCATE=false``): the torch worker shares it.

    python bench/gpu/jax_checks.py             # on a CUDA machine
    python bench/gpu/jax_checks.py --smoke     # the same code on CPU with a tiny model
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# Qwen2.5-0.5B's shapes (494 M parameters); rope_theta: the keyword transformers 4 and 5 accept.
QWEN25_05B = {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
              "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
              "max_position_embeddings": 4096, "tie_word_embeddings": True, "rope_theta": 1e6}  # fmt: skip
FAILED: list[str] = []
FIGURES: dict = {"checks": {}, "throughput": {}}


def check(name: str, ok: bool, detail: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    FIGURES["checks"][name] = {"ok": bool(ok), "detail": detail}
    if not ok:
        FAILED.append(name)


def write_figures() -> None:
    """The checks and figures as JSON in ``$DOCKYARD_GPU_REPORT_DIR``, when it is set."""
    folder = os.environ.get("DOCKYARD_GPU_REPORT_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "bench_jax_checks.json"), "w") as f:
            json.dump({**FIGURES, "failed": FAILED}, f, indent=1, default=float)


def build_model(folder: str, smoke: bool, layers: int = 24) -> str:
    if smoke:
        from dockyard.torch.testing import build_tiny_model

        return str(build_tiny_model(family="qwen2"))
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**{**QWEN25_05B, "num_hidden_layers": layers})
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(folder)
    return folder


def make_batch(B: int, T: int, vocab: int, seed: int = 0):
    from dockyard.core.experience import Batch

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(T / 2), 0.5, size=B).astype(int), 32, T)
    lengths[0] = T
    cols = np.arange(T)[None]
    attn = cols < lengths[:, None]
    ids = rng.integers(3, vocab, size=(B, T)) * attn
    loss_mask = attn & (cols >= 16)
    adv = (rng.normal(size=(B, 1)) * loss_mask).astype(np.float32)
    return Batch(ids.astype(np.int64), attn, loss_mask, adv, np.zeros((B, T), np.float32))


def weights(worker) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float32) for b in worker.export_weights(1 << 30) for k, v in b.items()}


def timed(worker, batch, loss, repeats: int, sync=lambda: None) -> float:
    worker.train_step(batch, loss)  # compile / warm up
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        worker.train_step(batch, loss)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def torch_cfg(cfg: dict, precision: str) -> dict:
    return {**{k: v for k, v in cfg.items() if k != "pad_to_multiple"}, "precision": precision}


def torch_parity(cfg: dict, batch, loss, m32: dict) -> None:
    """1. The torch worker's fp32 step on the same batch (TF32 off)."""
    try:
        import torch

        from dockyard.torch.worker import TorchPolicyWorker
    except ImportError as e:
        check("torch parity fp32", False, f"torch worker unavailable: {e}")
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tw = TorchPolicyWorker(torch_cfg(cfg, "float32"))
    mt = tw.train_step(batch, loss)
    rel_l = abs(mt["loss"] - m32["loss"]) / max(abs(mt["loss"]), 1e-8)
    rel_g = abs(mt["grad_norm"] - m32["grad_norm"]) / mt["grad_norm"]
    check("torch parity fp32", rel_l < 1e-3 and rel_g < 1e-3,
          f"loss rel {rel_l:.2e}, grad-norm rel {rel_g:.2e}")  # fmt: skip
    del tw


def bf16_numerics(bf16, batch, loss, ref, m32: dict, w0: dict, w32: dict) -> None:
    """2. bf16 vs fp32 numerics of the same step."""
    lp_diff = np.abs(bf16.get_logprobs(batch) - ref)[batch.loss_mask]
    m16 = bf16.train_step(batch, loss)
    w16 = weights(bf16)
    d32 = np.concatenate([(w32[k] - w0[k]).ravel() for k in w0])
    d16 = np.concatenate([(w16[k] - w0[k]).ravel() for k in w0])
    cos = float(d32 @ d16 / (np.linalg.norm(d32) * np.linalg.norm(d16) + 1e-30))
    rel_g = abs(m16["grad_norm"] - m32["grad_norm"]) / m32["grad_norm"]
    check("bf16 logprobs", float(np.mean(lp_diff)) < 0.05,
          f"mean |Δlogprob| {np.mean(lp_diff):.3e}, max {np.max(lp_diff):.3e}")  # fmt: skip
    check("bf16 update", cos > 0.9 and rel_g < 0.05,
          f"update cosine {cos:.4f}, grad-norm rel {rel_g:.2e}, "
          f"loss {m16['loss']:.5f} vs {m32['loss']:.5f}")  # fmt: skip


def throughput(bf16, cfg: dict, batch, loss, repeats: int, platform: str) -> None:
    """3. Median bf16 step time of both workers on the same batch."""
    B, T = batch.shape
    tokens = int(batch.attention_mask.sum())
    rows = [("jax", timed(bf16, batch, loss, repeats))]
    try:
        import torch

        from dockyard.torch.worker import TorchPolicyWorker

        tw = TorchPolicyWorker(torch_cfg(cfg, "bfloat16"))
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        rows.append(("torch", timed(tw, batch, loss, repeats, sync)))
    except ImportError:
        pass
    print(f"\n| backend | median step ms | tokens/s |  (B={B}, T≤{T}, bf16, {platform})")
    print("|---|---|---|")
    for name, t in rows:
        print(f"| {name} | {t * 1e3:.1f} | {tokens / t:,.0f} |")
        FIGURES["throughput"][name] = {"step_s": t, "tokens_per_s": tokens / t}
    if len(rows) == 2:
        print(f"jax / torch step time: {rows[0][1] / rows[1][1]:.2f}×")


def run(args) -> None:
    import jax

    from dockyard.core.rl import PolicyLoss
    from dockyard.jax import JaxPolicyWorker

    platform = jax.devices()[0].platform
    FIGURES["device"] = jax.devices()[0].device_kind
    check("device", args.smoke or platform == "gpu", f"jax platform {platform}")
    if not args.smoke and platform != "gpu":
        return
    B, T = (4, 64) if args.smoke else (args.batch, args.seq)
    FIGURES.update(batch=[B, T], layers=None if args.smoke else args.layers)
    folder = build_model(tempfile.mkdtemp(prefix="jaxgpu-"), args.smoke, args.layers)
    cfg = {"model_name": folder, "train_micro_batch_size": B // 2, "logprob_batch_size": B,
           "max_grad_norm": 1.0, "optimizer": {"lr": 1e-5}, "pad_to_multiple": 64}  # fmt: skip
    loss = PolicyLoss("clipped_pg", {"kl_beta": 0.01, "agg": "token-mean"})
    fp32 = JaxPolicyWorker({**cfg, "precision": "float32"})
    with jax.default_matmul_precision("highest"):  # fp32 reference: no TF32
        base = make_batch(B, T, fp32.model_cfg.vocab_size)
        ref = fp32.get_reference_logprobs(base)
        batch = dataclasses.replace(base, gen_logprobs=ref * base.loss_mask, ref_logprobs=ref)
        w0 = weights(fp32)
        m32 = fp32.train_step(batch, loss)
        w32 = weights(fp32)
    del fp32
    torch_parity(cfg, batch, loss, m32)
    bf16 = JaxPolicyWorker({**cfg, "precision": "bfloat16"})
    bf16_numerics(bf16, batch, loss, ref, m32, w0, w32)
    throughput(bf16, cfg, batch, loss, args.repeats, platform)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny model (checks the script)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--layers", type=int, default=24, help="decoder layers (24: Qwen2.5-0.5B)")
    args = ap.parse_args()
    try:
        run(args)
    finally:
        write_figures()  # what was measured, also when a check raised
    print("FAILED: " + ", ".join(FAILED) if FAILED else "ALL PASS")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
