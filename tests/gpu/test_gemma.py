"""Gemma 2 / Gemma 3 (text) on CUDA: the bf16 worker's logprobs against transformers in float32
on a small model (hidden 256, 4 layers alternating sliding-window and global attention, 128-token
sequences across a 16-token window), and a finite bf16 GRPO step.

Under ``DOCKYARD_GPU_TESTS_ON_CPU=1`` the same bodies run on CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from dockyard.core.rl import PolicyLoss

torch = pytest.importorskip("torch")
TorchPolicyWorker = pytest.importorskip(
    "dockyard.torch.worker", reason="dockyard-torch not installed"
).TorchPolicyWorker

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("family", ["gemma2", "gemma3_text"])
def test_bf16_gemma_matches_hf_fp32(
    family, device, numerics_batch, hf_logprobs, logprob_errors, gpu_report
) -> None:
    from dockyard.torch.testing import build_tiny_model

    path = build_tiny_model(family=family, hidden_size=256, num_layers=4, num_heads=4,
                            num_kv_heads=2, intermediate_size=688)  # fmt: skip
    want = hf_logprobs(path, numerics_batch, device)
    worker = TorchPolicyWorker({"model_name": str(path), "precision": "bfloat16",
                                "reference_policy": False, "logprob_batch_size": 4})  # fmt: skip
    mean, worst = logprob_errors(worker.get_logprobs(numerics_batch), want, numerics_batch)
    m = worker.train_step(numerics_batch, PolicyLoss())
    gpu_report(f"{family}_bf16_logprobs", {"mean_abs": mean, "max_abs": worst,
                                           "step_s": m["step_time_s"]})  # fmt: skip
    assert mean < 1e-2
    assert worst < 0.1
    assert np.isfinite(m["loss"])
