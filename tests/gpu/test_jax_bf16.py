"""bf16 numerics of the JAX worker on GPU against fp32.

``precision: bfloat16`` computes in bf16 with float32 parameters and optimizer state
(``dockyard.jax.config``). Its logprobs are compared with a plain transformers forward of the
same HF folder in float32 (torch on CPU, so that the reference shares nothing with XLA), and
one train step with the same step of the fp32 JAX worker (its matmuls at "highest" precision:
no TF32). Skips, with the reason, when JAX sees no GPU.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

LOGPROB_MEAN_TOL = 1e-2  # as for the torch worker (tests/gpu/test_torch_bf16.py)
LOGPROB_MAX_TOL = 0.1


def _worker(path, precision: str, **extra):
    from dockyard.jax import JaxPolicyWorker

    return JaxPolicyWorker(
        {
            "model_name": str(path),
            "precision": precision,
            "reference_policy": False,
            "logprob_batch_size": 4,
            "pad_to_multiple": 64,
            **extra,
        }
    )


def test_jax_bf16_logprobs_match_hf_fp32(
    jax_gpu, small_model_path, numerics_batch, device, hf_logprobs, logprob_errors, gpu_report
) -> None:
    """bf16 logprobs of the JAX worker on the GPU equal HF fp32 logprobs within bf16
    tolerance."""
    batch = numerics_batch
    want = hf_logprobs(small_model_path, batch, "cpu")
    worker = _worker(small_model_path, "bfloat16")
    assert worker.mesh.devices.flat[0].platform == ("gpu" if device == "cuda" else "cpu")
    assert worker.compute_dtype == np.dtype(jax_gpu.numpy.bfloat16)
    got = worker.get_logprobs(batch)
    assert np.isfinite(got).all()
    mean, worst = logprob_errors(got, want, batch)
    gpu_report(
        "jax_bf16_logprobs",
        {
            "mean_abs_dlogp": mean,
            "max_abs_dlogp": worst,
            "platform": worker.mesh.devices.flat[0].platform,
            "device_kind": worker.mesh.devices.flat[0].device_kind,
        },
    )
    assert mean < LOGPROB_MEAN_TOL
    assert worst < LOGPROB_MAX_TOL


def test_jax_bf16_step_is_finite_and_close_to_fp32(
    jax_gpu, small_model_path, numerics_batch, gpu_report
) -> None:
    """One clipped-PG step (SGD: the update is −η·g) of the bf16 and the fp32 JAX workers from
    the same weights: finite, grad norms within 3 %, updates with cosine > 0.99."""
    from dockyard.core.rl import PolicyLoss

    loss = PolicyLoss("clipped_pg", {"eps_low": 0.2, "eps_high": 0.28, "agg": "token-mean"})
    extra = {
        "train_micro_batch_size": 4,
        "max_grad_norm": None,
        "optimizer": {"name": "sgd", "lr": 1e-2, "weight_decay": 0.0},
    }
    batch = numerics_batch
    runs = {}
    for precision in ("float32", "bfloat16"):
        worker = _worker(small_model_path, precision, **extra)
        with jax_gpu.default_matmul_precision("highest" if precision == "float32" else "default"):
            if precision == "float32":
                noise = np.random.default_rng(0).normal(0.0, 0.1, batch.input_ids.shape)
                prev = ((worker.get_logprobs(batch) + noise) * batch.loss_mask).astype(np.float32)
                batch = dataclasses.replace(batch, gen_logprobs=prev, prev_logprobs=prev)
            before = dict(worker.iter_weights())
            metrics = worker.train_step(batch, loss)
        after = dict(worker.iter_weights())
        runs[precision] = (
            metrics,
            np.concatenate([(after[k] - before[k]).ravel() for k in before]),
        )
        del worker
    (m32, d32), (m16, d16) = runs["float32"], runs["bfloat16"]
    rel_gn = abs(m16["grad_norm"] - m32["grad_norm"]) / m32["grad_norm"]
    cos = float(d16 @ d32 / (np.linalg.norm(d16) * np.linalg.norm(d32)))
    gpu_report(
        "jax_bf16_step",
        {
            "loss_fp32": m32["loss"],
            "loss_bf16": m16["loss"],
            "grad_norm_fp32": m32["grad_norm"],
            "grad_norm_bf16": m16["grad_norm"],
            "grad_norm_rel_diff": rel_gn,
            "update_cosine": cos,
        },
    )
    assert np.isfinite([m16["loss"], m16["grad_norm"], m32["loss"], m32["grad_norm"]]).all()
    assert abs(m16["loss"] - m32["loss"]) < 2e-2 * max(abs(m32["loss"]), 1e-3)
    assert rel_gn < 3e-2
    assert cos > 0.99
