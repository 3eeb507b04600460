"""GPU checks for the torch policy worker (run on a lent CUDA machine; ~5 minutes on an H200).

1. NCCL + FSDP2 on one device: a 1-rank ``nccl`` process group with ``fully_shard`` gives the
   same fp32 step as the unsharded worker (the multi-GPU code path, exercised on one chip).
2. bf16 vs fp32 numerics on a ~0.5B random-initialised Qwen2 (Qwen2.5-0.5B shapes): logprob
   differences, loss / grad-norm relative differences and the cosine between the two updates.
3. Throughput and MFU of a bf16 GRPO train step (padded and packed micro-batches).
   MFU = tokens/s · F / peak, F = 6·N_matmul + 12·L·d·T̄ FLOPs per token (N_matmul: parameters
   of the matrix multiplies incl. the LM head; the attention term with T̄ the mean context),
   peak = ``--peak-tflops`` (H200 dense bf16: 989).

Prints PASS/FAIL lines and a table; exits 1 on a failed check. With ``DOCKYARD_GPU_REPORT_DIR``
set, the checks and figures also go to ``$DOCKYARD_GPU_REPORT_DIR/bench_torch_checks.json``
(``scripts/gpu_checks.sh`` puts them in its report).

    python bench/gpu/torch_checks.py               # on a CUDA machine
    python bench/gpu/torch_checks.py --smoke       # the same code on CPU with a tiny model
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

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
        with open(os.path.join(folder, "bench_torch_checks.json"), "w") as f:
            json.dump({**FIGURES, "failed": FAILED}, f, indent=1, default=float)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_model(folder: str, smoke: bool) -> str:
    """A random-initialised Qwen2 folder (0.5B shapes, or tiny with --smoke)."""
    if smoke:
        from dockyard.torch.testing import build_tiny_model

        return str(build_tiny_model(family="qwen2"))
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(**QWEN25_05B)
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
    gen = (-np.log(vocab) * loss_mask).astype(np.float32)
    return Batch(ids.astype(np.int64), attn, loss_mask, adv, gen)


def weights(worker) -> dict[str, np.ndarray]:
    return {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}


def nccl_one_device(path: str, batch, device: str) -> None:
    import torch.distributed as dist

    from dockyard.core.rl import PolicyLoss
    from dockyard.torch.worker import TorchPolicyWorker

    cfg = {
        "model_name": path,
        "precision": "float32",
        "reference_policy": False,
        "train_micro_batch_size": 4,
        "optimizer": {"lr": 1e-5},
    }
    plain = TorchPolicyWorker(cfg)
    m_plain = plain.train_step(batch, PolicyLoss())
    w_plain = weights(plain)
    del plain
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
    try:
        sharded = TorchPolicyWorker({**cfg, "fsdp": {"enabled": True}})
        m_sharded = sharded.train_step(batch, PolicyLoss())
        w_sharded = weights(sharded)
        diff = max(float(np.abs(w_sharded[k] - w_plain[k]).max()) for k in w_plain)
        check(
            "fsdp2-1rank-equals-plain",
            diff < 1e-5 and abs(m_sharded["loss"] - m_plain["loss"]) < 1e-5,
            f"max |Δw| {diff:.2e}, loss {m_sharded['loss']:.6f} vs {m_plain['loss']:.6f}",
        )
        del sharded
    finally:
        dist.destroy_process_group()


def bf16_numerics(path: str, batch) -> None:
    from dockyard.core.rl import PolicyLoss
    from dockyard.torch.worker import TorchPolicyWorker

    results = {}
    for precision in ("float32", "bfloat16"):
        w = TorchPolicyWorker(
            {
                "model_name": path,
                "precision": precision,
                "reference_policy": False,
                "train_micro_batch_size": 4,
                "optimizer": {"lr": 1e-5},
                "max_grad_norm": None,
            }
        )
        before = weights(w)
        lp = w.get_logprobs(batch)
        m = w.train_step(batch, PolicyLoss())
        after = weights(w)
        delta = np.concatenate([(after[k] - before[k]).ravel() for k in before])
        results[precision] = (lp, m, delta)
        del w
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    (lp32, m32, d32), (lp16, m16, d16) = results["float32"], results["bfloat16"]
    mask = batch.attention_mask.copy()
    mask[:, 0] = False
    err = np.abs(lp16 - lp32)[mask]
    check(
        "bf16-logprobs",
        err.mean() < 0.05,
        f"mean |Δlogp| {err.mean():.4f}, max {err.max():.4f} (fp32 mean {lp32[mask].mean():.3f})",
    )
    rel_loss = abs(m16["loss"] - m32["loss"]) / max(abs(m32["loss"]), 1e-6)
    rel_gn = abs(m16["grad_norm"] - m32["grad_norm"]) / m32["grad_norm"]
    cos = float(d16 @ d32 / (np.linalg.norm(d16) * np.linalg.norm(d32) + 1e-30))
    check(
        "bf16-step",
        rel_gn < 0.05 and cos > 0.5,
        f"loss rel Δ {rel_loss:.2e}, grad-norm rel Δ {rel_gn:.2e}, cos(Δθ16, Δθ32) {cos:.3f}",
    )


def flops_per_token(model, mean_ctx: float) -> float:
    cfg = model.config
    n_matmul = sum(
        p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed_tokens" not in n
    )
    if cfg.tie_word_embeddings:
        n_matmul += cfg.vocab_size * cfg.hidden_size  # the LM head reuses the embedding
    return 6 * n_matmul + 12 * cfg.num_hidden_layers * cfg.hidden_size * mean_ctx


def throughput(path: str, batch, peak_tflops: float, repeats: int) -> None:
    from dockyard.core.rl import PolicyLoss
    from dockyard.torch.worker import TorchPolicyWorker

    tokens = int(batch.attention_mask.sum())
    lengths = batch.attention_mask.sum(1)
    mean_ctx = float((lengths**2).sum() / (2 * lengths.sum()))
    print(f"\n{'mode':>8} {'step s':>8} {'tok/s':>10} {'MFU':>6}")
    for mode, extra in (
        ("padded", {"train_micro_batch_size": 8}),
        ("packed", {"sequence_packing": {"enabled": True, "train_mb_tokens": 8192}}),
    ):
        w = TorchPolicyWorker(
            {"model_name": path, "reference_policy": False, "optimizer": {"lr": 1e-6}, **extra}
        )
        f = flops_per_token(w.model, mean_ctx)
        w.train_step(batch, PolicyLoss())  # warm-up
        times = []
        for _ in range(repeats):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            w.train_step(batch, PolicyLoss())
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        mfu = tokens / t * f / (peak_tflops * 1e12)
        print(f"{mode:>8} {t:>8.3f} {tokens / t:>10.0f} {mfu:>6.1%}", flush=True)
        FIGURES["throughput"][mode] = {"step_s": t, "tokens_per_s": tokens / t, "mfu": mfu}
        del w
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny model (code check)")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32, help="throughput batch: sequences")
    parser.add_argument("--seq", type=int, default=1024, help="throughput batch: max length")
    args = parser.parse_args()
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA GPU visible (use --smoke to run the code path on CPU)")
    FIGURES["device"] = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    print(f"torch {torch.__version__}, device {FIGURES['device']}", flush=True)
    B, T = (8, 64) if args.smoke else (args.batch, args.seq)
    FIGURES.update(batch=[B, T], peak_tflops=args.peak_tflops)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            path = build_model(tmp, args.smoke)
            vocab = 1024 if args.smoke else 151936
            batch = make_batch(B, T, vocab)
            print(f"model ready in {time.perf_counter() - t0:.1f}s; batch {B} × ≤{T}", flush=True)
            nccl_one_device(path, make_batch(8, T // 2, vocab, seed=1), device)
            bf16_numerics(path, make_batch(8, T // 2, vocab, seed=2))
            throughput(path, batch, args.peak_tflops, 2 if args.smoke else args.repeats)
    finally:
        write_figures()  # what was measured, also when a check raised
    print(f"\n{len(FAILED)} failed: {FAILED}" if FAILED else "\nall checks passed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
