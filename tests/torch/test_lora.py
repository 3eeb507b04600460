"""LoRA via peft: only adapters train; merged and adapter exports; the base is the reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dockyard.core.rl import MaskedNLLLoss
from dockyard.torch.testing import random_batch
from dockyard.torch.worker import TorchPolicyWorker


@pytest.fixture(scope="module")
def lora_worker(base_config):
    cfg = {
        **base_config,
        "optimizer": {"lr": 1e-2},
        "lora": {"enabled": True, "rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
    }
    worker = TorchPolicyWorker(cfg)
    batch = random_batch(6, 24, seed=5)
    before = {k: v.detach().clone() for k, v in worker.model.named_parameters()}
    lp0 = worker.get_logprobs(batch)
    for _ in range(2):
        worker.train_step(batch, MaskedNLLLoss())
    return worker, batch, before, lp0


def test_lora_changes_only_adapter_weights(lora_worker):
    worker, _, before, _ = lora_worker
    changed = {
        k for k, v in worker.model.named_parameters() if not torch.equal(v.detach(), before[k])
    }
    assert changed, "training changed nothing"
    assert all(".lora_A." in k or ".lora_B." in k for k in changed), sorted(changed)
    # every adapted module's B moved off its zero init
    assert {k for k in changed if ".lora_B." in k} == {k for k in before if ".lora_B." in k}
    assert all(("q_proj" in k or "v_proj" in k) for k in before if ".lora_" in k)


def test_reference_is_the_base_model(lora_worker, qwen2_path):
    worker, batch, _, lp0 = lora_worker
    ref = worker.get_reference_logprobs(batch)
    np.testing.assert_allclose(ref, lp0, atol=1e-6)  # LoRA starts as the identity (B = 0)
    lp = worker.get_logprobs(batch)
    assert np.abs(lp - ref).max() > 1e-3


def test_merged_export_reproduces_the_adapted_model(lora_worker, tmp_path):
    from transformers import AutoModelForCausalLM

    worker, batch, _, _ = lora_worker
    merged = {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}
    assert not any("lora" in k or "base_layer" in k for k in merged)
    assert "model.layers.0.self_attn.q_proj.weight" in merged
    worker.export_hf(str(tmp_path / "hf"))
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.as_tensor(batch.input_ids[:1, : int(batch.attention_mask[0].sum())])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1], -1)
    expected = logp.gather(-1, ids[0, 1:, None])[:, 0].numpy()
    np.testing.assert_allclose(worker.get_logprobs(batch)[0, 1 : ids.shape[1]], expected, atol=2e-5)


def test_adapter_export_has_only_adapters(lora_worker):
    worker, *_ = lora_worker
    tensors = {k: v for b in worker.export_weights(1 << 20, mode="adapters") for k, v in b.items()}
    assert tensors
    assert all(k.endswith(("lora_A.weight", "lora_B.weight")) for k in tensors)
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert tensors[key].shape == (4, 64)
