"""Qwen3-Next (Gated DeltaNet) in the JAX worker on CUDA: the chunked form against the
recurrence at Qwen3-Next's head width (values, and both forms' forward + backward time), the
bf16 worker's logprobs on a small Qwen3-Next against transformers in float32, and vLLM (its
Triton / FLA kernels on GPU) serving the worker's weights with its logprobs.

Under ``DOCKYARD_GPU_TESTS_ON_CPU=1`` the same bodies run on CPU with smaller shapes.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

SMALL_NEXT = {
    "family": "qwen3_next", "hidden_size": 256, "num_layers": 4, "num_heads": 4,
    "num_kv_heads": 2, "num_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 128, "vocab_size": 1024,
}  # fmt: skip


def _worker(path: Path, precision: str):
    from dockyard.jax import JaxPolicyWorker

    return JaxPolicyWorker({"model_name": str(path), "precision": precision,
                            "reference_policy": False, "logprob_batch_size": 4})  # fmt: skip


def test_chunked_equals_recurrent_at_qwen3_next_width(jax_gpu, device, gpu_report) -> None:
    """B 2 × T 4096, 16 value heads × 128 (CPU: T 256, 4 × 64); forward + backward timed."""
    jnp = jax_gpu.numpy
    from dockyard.jax.models.gated_delta import gated_delta_chunked, gated_delta_recurrent

    big = device == "cuda"
    B, T, H, d = (2, 4096, 16, 128) if big else (1, 256, 4, 64)
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(B, T, H, d)), jnp.float32) for _ in range(3))
    g = jnp.asarray(-np.exp(rng.normal(size=(B, T, H))) * 0.1, jnp.float32)
    beta = jnp.asarray(1 / (1 + np.exp(-rng.normal(size=(B, T, H)))), jnp.float32)
    forms = {"chunked": gated_delta_chunked, "recurrent": gated_delta_recurrent}
    outs, times = {}, {}
    for name, form in forms.items():
        step = jax_gpu.jit(jax_gpu.value_and_grad(lambda *a, f=form: jnp.sum(f(*a) ** 2)))
        jax_gpu.block_until_ready(step(q, k, v, g, beta))
        t = time.perf_counter()
        for _ in range(3):
            jax_gpu.block_until_ready(step(q, k, v, g, beta))
        times[name] = (time.perf_counter() - t) / 3
        outs[name] = np.asarray(jax_gpu.jit(form)(q, k, v, g, beta))
    err = float(np.abs(outs["chunked"] - outs["recurrent"]).max())
    scale = float(np.abs(outs["recurrent"]).max())
    gpu_report("gated_delta_forms", {"B": B, "T": T, "heads": H, "head_dim": d, "max_abs": err,
                                     "scale": scale, "chunked_ms": times["chunked"] * 1e3,
                                     "recurrent_ms": times["recurrent"] * 1e3,
                                     "speedup": times["recurrent"] / times["chunked"]})  # fmt: skip
    assert err <= 1e-4 * max(scale, 1.0)


def test_jax_bf16_qwen3_next_matches_hf_fp32(
    jax_gpu, device, numerics_batch, hf_logprobs, logprob_errors, gpu_report
) -> None:
    """Within 2× transformers' own bf16 error on the same model (mean and max)."""
    from dockyard.torch.testing import build_tiny_model

    path = build_tiny_model(**SMALL_NEXT)
    want = hf_logprobs(path, numerics_batch, "cpu")
    got = _worker(path, "bfloat16").get_logprobs(numerics_batch)
    mean, worst = logprob_errors(got, want, numerics_batch)
    hf_bf16 = hf_logprobs(path, numerics_batch, device, "bfloat16")
    hf_mean, hf_worst = logprob_errors(hf_bf16, want, numerics_batch)
    gpu_report("jax_bf16_qwen3_next", {"mean_abs": mean, "max_abs": worst,
                                       "hf_bf16_mean_abs": hf_mean, "hf_bf16_max_abs": hf_worst})  # fmt: skip
    assert mean < max(2 * hf_mean, 1e-3)
    assert worst < max(2 * hf_worst, 1e-2)


def test_vllm_serves_the_jax_workers_qwen3_next(
    jax_gpu, device, numerics_batch, hf_logprobs, logprob_errors, gpu_report
) -> None:
    """The folder the worker pushes (HF names), served by vLLM in bf16, against the worker's
    fp32 logprobs: within 2× transformers' own bf16 error against the same fp32 logprobs."""
    from dockyard.torch import testing

    path = testing.build_tiny_model(**SMALL_NEXT)
    worker = _worker(path, "float32")
    mine = worker.get_logprobs(numerics_batch)
    folder = Path(worker.export_hf(tempfile.mkdtemp(prefix="dockyard-next-")))
    for f in path.glob("*token*"):
        shutil.copy(f, folder / f.name)
    batch = numerics_batch
    prompts = [batch.input_ids[b, : int(batch.attention_mask[b].sum())].tolist()
               for b in range(batch.input_ids.shape[0])]  # fmt: skip
    served = np.zeros_like(mine)
    for b, lps in enumerate(testing.vllm_prompt_logprobs(folder, prompts, "bfloat16")):
        served[b, : len(lps)] = lps
    mean, worst = logprob_errors(served, mine, batch)
    hf_mean, hf_worst = logprob_errors(hf_logprobs(folder, batch, device, "bfloat16"), mine, batch)
    gpu_report("vllm_qwen3_next", {"mean_abs": mean, "max_abs": worst,
                                   "hf_bf16_mean_abs": hf_mean, "hf_bf16_max_abs": hf_worst})  # fmt: skip
    assert mean < max(2 * hf_mean, 1e-3)
    assert worst < max(2 * hf_worst, 1e-2)
