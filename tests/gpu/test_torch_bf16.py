"""bf16 numerics of the torch worker on CUDA against fp32.

``precision: bfloat16`` is mixed precision (``dockyard.torch.model``): float32 parameters, the
forward under ``torch.autocast(bfloat16)``, logprobs taken in float32 from bf16 logits. Against
a plain transformers forward in float32 (TF32 off: torch's default matmul precision "highest")
the logprobs may differ by the bf16 rounding of activations and logits (relative 2⁻⁸); a train
step's loss, gradient norm and direction stay close to the fp32 worker's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dockyard.core.rl import PolicyLoss

torch = pytest.importorskip("torch")
TorchPolicyWorker = pytest.importorskip(
    "dockyard.torch.worker", reason="dockyard-torch not installed"
).TorchPolicyWorker

pytestmark = pytest.mark.gpu

# Per-token |logprob(bf16 worker) − logprob(HF fp32)| on the small Qwen2 (logprobs ≈ −7; on CPU
# autocast the mean is 2e-3 and the max 7e-3).
LOGPROB_MEAN_TOL = 1e-2
LOGPROB_MAX_TOL = 0.1


def weights(worker) -> dict[str, np.ndarray]:
    return {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}


def test_bf16_logprobs_match_hf_fp32(
    small_model_path, numerics_batch, device, hf_logprobs, logprob_errors, gpu_report
) -> None:
    """Padded and packed bf16 logprobs of the worker on CUDA equal an HF fp32 forward of the
    same model within bf16 tolerance (and not trivially: the logprobs are far from 0)."""
    batch = numerics_batch
    want = hf_logprobs(small_model_path, batch, device)
    cfg = {
        "model_name": str(small_model_path),
        "precision": "bfloat16",
        "reference_policy": False,
        "logprob_batch_size": 4,
    }
    packed = {"sequence_packing": {"enabled": True, "logprob_mb_tokens": 512}}
    figures = {"mean_logp_fp32": float(want[batch.loss_mask].mean())}
    assert figures["mean_logp_fp32"] < -1.0
    for mode, extra in (("padded", {}), ("packed", packed)):
        worker = TorchPolicyWorker({**cfg, **extra})
        assert worker.device.type == device
        assert worker.dtype == torch.bfloat16
        got = worker.get_logprobs(batch)
        assert np.isfinite(got).all()
        mean, worst = logprob_errors(got, want, batch)
        figures[f"{mode}_mean_abs_dlogp"], figures[f"{mode}_max_abs_dlogp"] = mean, worst
        del worker
    gpu_report("torch_bf16_logprobs", figures)
    for mode in ("padded", "packed"):
        assert figures[f"{mode}_mean_abs_dlogp"] < LOGPROB_MEAN_TOL, figures
        assert figures[f"{mode}_max_abs_dlogp"] < LOGPROB_MAX_TOL, figures


def test_bf16_step_is_finite_and_close_to_fp32(
    small_model_path, numerics_batch, device, gpu_report
) -> None:
    """One clipped-PG step in bf16 and in fp32 from the same weights and batch (π_prev: the
    fp32 policy's logprobs plus noise, so ratios and clipping are live; SGD, so that the update
    is −η·g): finite loss and grad norm, close to the fp32 ones, and the two updates point the
    same way (cosine > 0.99)."""
    cfg = {
        "model_name": str(small_model_path),
        "reference_policy": False,
        "train_micro_batch_size": 4,
        "max_grad_norm": None,
        "optimizer": {"name": "sgd", "lr": 1e-2, "weight_decay": 0.0},
    }
    loss = PolicyLoss("clipped_pg", {"eps_low": 0.2, "eps_high": 0.28, "agg": "token-mean"})
    batch = numerics_batch
    runs = {}
    for precision in ("float32", "bfloat16"):
        worker = TorchPolicyWorker({**cfg, "precision": precision})
        assert worker.device.type == device
        if precision == "float32":
            noise = np.random.default_rng(0).normal(0.0, 0.1, batch.input_ids.shape)
            prev = ((worker.get_logprobs(batch) + noise) * batch.loss_mask).astype(np.float32)
            batch = dataclasses.replace(batch, gen_logprobs=prev, prev_logprobs=prev)
        before = weights(worker)
        metrics = worker.train_step(batch, loss)
        after = weights(worker)
        runs[precision] = (
            metrics,
            np.concatenate([(after[k] - before[k]).ravel() for k in before]),
        )
        del worker
    (m32, d32), (m16, d16) = runs["float32"], runs["bfloat16"]
    rel_loss = abs(m16["loss"] - m32["loss"]) / max(abs(m32["loss"]), 1e-3)
    rel_gn = abs(m16["grad_norm"] - m32["grad_norm"]) / m32["grad_norm"]
    cos = float(d16 @ d32 / (np.linalg.norm(d16) * np.linalg.norm(d32)))
    gpu_report(
        "torch_bf16_step",
        {
            "loss_fp32": m32["loss"],
            "loss_bf16": m16["loss"],
            "grad_norm_fp32": m32["grad_norm"],
            "grad_norm_bf16": m16["grad_norm"],
            "loss_rel_diff": rel_loss,
            "grad_norm_rel_diff": rel_gn,
            "update_cosine": cos,
            "clip_fraction_fp32": m32.get("clip_fraction"),
        },
    )
    assert np.isfinite([m16["loss"], m16["grad_norm"], m32["loss"], m32["grad_norm"]]).all()
    assert m32["grad_norm"] > 0
    assert rel_loss < 2e-2
    assert rel_gn < 3e-2
    assert cos > 0.99
