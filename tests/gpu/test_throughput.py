"""Throughput of a bf16 GRPO train step through the torch worker on a ~0.5B model.

The model has Qwen2.5-0.5B's shapes (494 M parameters, vocabulary 151,936, tied embeddings),
random-initialised here (no download). One step is a clipped-PG forward and backward over
16 × 512 tokens in micro-batches of 8, gradient clipping and AdamW. Reported: median step time,
tokens/s and an MFU estimate

    MFU = 6 · N · tokens / t_step / peak

(N: all parameters, the tied embedding counted once, as the LM head; attention FLOPs left out;
peak: dense bf16 FLOP/s of the GPU from a small table, or ``DOCKYARD_GPU_PEAK_TFLOPS``). The
asserts are loose on purpose (finite loss, tokens/s above a floor far below any GPU); the
figures are the point. ``bench/gpu/torch_checks.py`` has the padded-vs-packed comparison.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

QWEN25_05B = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
    "rope_theta": 1e6,
}
CPU_STANDIN = {
    **QWEN25_05B,
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity), by a substring of the device name.
PEAK_TFLOPS = {
    "H200": 989.0,
    "H100": 989.0,
    "GH200": 989.0,
    "B200": 2250.0,
    "A100": 312.0,
    "L40S": 362.0,
}
TOKENS_PER_S_FLOOR = 2000.0  # a GPU run is ~50× above it; CPU would be ~100× below
TIMED_STEPS = 3


def peak_tflops(name: str) -> float | None:
    if os.environ.get("DOCKYARD_GPU_PEAK_TFLOPS"):
        return float(os.environ["DOCKYARD_GPU_PEAK_TFLOPS"])
    for key in sorted(PEAK_TFLOPS, key=len, reverse=True):
        if key in name:
            return PEAK_TFLOPS[key]
    return None


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, device):
    """The random-initialised 0.5B folder (a 2-layer stand-in under the private CPU switch)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    folder = tmp_path_factory.mktemp("qwen2-0.5b")
    torch.manual_seed(0)
    config = Qwen2Config(**(QWEN25_05B if device == "cuda" else CPU_STANDIN))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    return folder


def grpo_batch(B: int, T: int, vocab: int):
    """Full-length sequences, the loss after a prompt of T/8 tokens, ±1 advantages."""
    from dockyard.core.experience import Batch

    rng = np.random.default_rng(0)
    ids = rng.integers(3, vocab, size=(B, T)).astype(np.int64)
    attn = np.ones((B, T), dtype=bool)
    loss_mask = attn & (np.arange(T)[None] >= T // 8)
    adv = (rng.choice([-1.0, 1.0], size=(B, 1)) * loss_mask).astype(np.float32)
    gen = (-np.log(vocab) * loss_mask).astype(np.float32)
    return Batch(ids, attn, loss_mask, adv, gen)


def timed_steps(worker, batch, loss, sync) -> tuple[list[float], dict]:
    worker.train_step(batch, loss)  # warm-up: kernels, allocator, autotuning
    times, metrics = [], {}
    for _ in range(TIMED_STEPS):
        sync()
        t0 = time.perf_counter()
        metrics = worker.train_step(batch, loss)
        sync()
        times.append(time.perf_counter() - t0)
    return times, metrics


def test_grpo_step_throughput_05b(model_folder, device, gpu_report) -> None:
    import torch

    from dockyard.core.rl import PolicyLoss
    from dockyard.torch.worker import TorchPolicyWorker

    cuda = device == "cuda"
    B, T = (16, 512) if cuda else (4, 64)
    worker = TorchPolicyWorker(
        {
            "model_name": str(model_folder),
            "precision": "bfloat16",
            "reference_policy": False,
            "train_micro_batch_size": B // 2,
            "optimizer": {"lr": 1e-6},
        }
    )
    assert worker.device.type == device
    n_params = sum(p.numel() for p in worker.model.parameters())
    vocab = worker.model.config.vocab_size
    batch = grpo_batch(B, T, vocab)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times, metrics = timed_steps(worker, batch, PolicyLoss(), sync)
    step_s = statistics.median(times)
    tokens = B * T
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    peak = peak_tflops(name) if cuda else None
    flops = 6 * n_params * tokens / step_s
    figures = {
        "device": name,
        "params": n_params,
        "batch": [B, T],
        "tokens_per_step": tokens,
        "step_s_median": step_s,
        "step_s_min": min(times),
        "tokens_per_s": tokens / step_s,
        "model_tflops_per_s": flops / 1e12,
        "peak_tflops": peak,
        "mfu": flops / (peak * 1e12) if peak else None,
        "loss": metrics["loss"],
        "grad_norm": metrics["grad_norm"],
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
    }
    gpu_report("throughput_05b", figures)
    assert np.isfinite(metrics["loss"])
    assert np.isfinite(metrics["grad_norm"])
    assert metrics["grad_norm"] > 0
    if cuda:
        assert 4.5e8 < n_params < 5.5e8
        assert figures["tokens_per_s"] > TOKENS_PER_S_FLOOR, figures
