"""Parity with the torch trainer: the same GRPO steps on the same tiny model and batch give the
same loss, grad norm and updated weights in both backends (fp32 tolerance).

Both workers get the same config keys; the loss is core's ``PolicyLoss`` (clipped PG with a k3
KL to the reference), applied to torch tensors in one and to jax arrays in the other.

Why the weights are not compared with one fixed tolerance: Adam moves each weight by
``lr · m̂ / (√v̂ + ε)``, whose derivative in the gradient g reaches ``1/ε`` (10⁸ here) where |g| is
near ε. The two backends sum the same float32 products in different orders, so their gradients
differ by ~1e-9 where cancellation leaves |g| ≈ 1e-8: a handful of weights then move up to a
tenth of a step apart on one CPU and not on another (an AMD EPYC saw 1 of 8192 at 1.4e-5). So the
test checks each backend's Adam moments (linear in g and g²: no amplification) elementwise, and
the final weights against a per-element bound propagated from the two backends' own moment
differences through AdamW's step — the divergence Adam's division causes, and nothing more.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import optax
import pytest

from dockyard.core.rl import PolicyLoss
from dockyard.jax import JaxPolicyWorker
from dockyard.jax.models.hf import iter_hf_weights

torch_worker = pytest.importorskip("dockyard.torch.worker", reason="dockyard-torch not installed")
testing = pytest.importorskip("dockyard.torch.testing")

pytestmark = pytest.mark.slow

CONFIG = {
    "precision": "float32",
    "train_micro_batch_size": 3,
    "logprob_batch_size": 6,
    "max_grad_norm": 0.5,  # below the first step's norm: clipping is exercised
    "generation_temperature": 0.9,
    "optimizer": {"lr": 1e-3, "weight_decay": 0.01, "betas": (0.9, 0.99), "eps": 1e-8},
    "scheduler": {"name": "cosine", "warmup_steps": 1, "total_steps": 4, "min_lr_ratio": 0.1},
}


@pytest.mark.parametrize(
    "model", [{"family": "qwen2"}, {"family": "llama", "tie_word_embeddings": True}],
    ids=["qwen2", "llama-tied"],
)  # fmt: skip
def test_grpo_steps_match_torch(model, tmp_path) -> None:
    path = testing.build_tiny_model(tmp_path / "m", vocab_size=320, **model)
    tw = torch_worker.TorchPolicyWorker({"model_name": str(path), **CONFIG})
    jw = JaxPolicyWorker({"model_name": str(path), **CONFIG})
    batch = testing.random_batch(6, 24, vocab_size=320, seed=1)

    lp_t, lp_j = tw.get_logprobs(batch), jw.get_logprobs(batch)
    np.testing.assert_allclose(lp_j, lp_t, rtol=1e-5, atol=2e-5)
    ref = tw.get_reference_logprobs(batch)
    np.testing.assert_allclose(jw.get_reference_logprobs(batch), ref, rtol=1e-5, atol=2e-5)
    noise = np.random.default_rng(2).normal(0, 0.1, lp_t.shape).astype(np.float32)
    batch = dataclasses.replace(
        batch, gen_logprobs=(lp_t + noise) * batch.loss_mask, ref_logprobs=ref
    )
    loss = PolicyLoss("clipped_pg", {"kl_beta": 0.05, "kl_type": "k3", "eps_low": 0.2,
                                     "eps_high": 0.28, "agg": "token-mean"})  # fmt: skip
    initial = dict(jw.iter_weights())
    norms, lrs, moments = [], [], []
    for step in range(2):
        mt, mj = tw.train_step(batch, loss), jw.train_step(batch, loss)
        lrs.append(mt["lr"])
        moments.append((_torch_moments(tw), _jax_moments(jw)))
        assert mj["loss"] == pytest.approx(mt["loss"], rel=1e-5, abs=1e-6), step
        assert mj["grad_norm"] == pytest.approx(mt["grad_norm"], rel=1e-5), step
        assert mj["num_loss_tokens"] == mt["num_loss_tokens"]
        assert mj["num_tokens"] == mt["num_tokens"]
        norms.append(mt["grad_norm"])
        # timings, and the tokens each layout forwarded (torch: a prefix tree or packed rows;
        # JAX: padded rows) are not parity metrics
        for key in set(mt) & set(mj) - {
            "lr",
            "step_time_s",
            "tokens_per_s",
            "num_tokens_forwarded",
        }:
            assert mj[key] == pytest.approx(mt[key], rel=1e-4, abs=1e-6), key
    assert max(norms) > CONFIG["max_grad_norm"]  # clipping was exercised
    print(
        f"parity {model}: loss/grad_norm torch={mt['loss']:.7f}/{mt['grad_norm']:.7f} "
        f"jax={mj['loss']:.7f}/{mj['grad_norm']:.7f}"
    )
    torch_weights = {k: v for b in tw.export_weights(1 << 30) for k, v in b.items()}
    jax_weights = {k: v for b in jw.export_weights(1 << 30) for k, v in b.items()}
    assert set(torch_weights) == set(jax_weights)
    moved = max(float(np.abs(jax_weights[k] - initial[k]).max()) for k in initial)
    assert moved > 1e-4
    diff = max(float(np.abs(jax_weights[k] - w).max()) for k, w in torch_weights.items())
    print(f"parity {model}: max |Δw| jax vs torch {diff:.2e}, max step {moved:.2e}")
    # The gradients agree, seen through Adam's moments (m linear in g, √v in |g|), elementwise.
    # Step 1 starts from equal weights: float32 rounding only. Later steps start from weights
    # already apart by the bound below, so their gradients get the metrics' rtol (1e-4).
    for t, ((m_t, v_t), (m_j, v_j)) in enumerate(moments):
        rel = 1e-5 if t == 0 else 1e-4
        for name in torch_weights:
            _assert_close_to_scale(m_j[name], m_t[name], rel, f"step {t + 1} m {name}")
            _assert_close_to_scale(np.sqrt(v_j[name]), np.sqrt(v_t[name]), rel,
                                   f"step {t + 1} √v {name}")  # fmt: skip
    bound = _adamw_divergence_bound(moments, lrs, CONFIG["optimizer"])
    every = np.concatenate([b.ravel() for b in bound.values()])
    # not vacuous: only the few weights whose |g| sits near ε get a bound near a step
    assert np.quantile(every, 0.999) < 1e-6, np.quantile(every, [0.5, 0.999, 1.0])
    widest = {}
    for name, w in torch_weights.items():
        gap = np.abs(jax_weights[name].astype(np.float64) - w)
        # the bound, plus float32 rounding of the weights and of each step's arithmetic
        allowed = bound[name] + 1e-6 * np.abs(w) + 1e-7
        bad = gap > allowed
        assert not bad.any(), (
            f"{name}: {int(bad.sum())} of {gap.size} weights apart by more than AdamW's step "
            f"explains: gap {gap[bad].max():.2e}, allowed {allowed[bad].min():.2e}"
        )
        widest[name] = float(bound[name].max())
    print(f"parity {model}: AdamW bound median {np.median(every):.1e}, "
          f"largest {max(widest.values()):.2e} ({max(widest, key=widest.__getitem__)})")  # fmt: skip
    np.testing.assert_allclose(jw.get_logprobs(batch), tw.get_logprobs(batch), atol=5e-5)


def _torch_moments(worker) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(m, v)`` by HF name: ``torch.optim.AdamW``'s ``exp_avg`` / ``exp_avg_sq``."""
    state = worker.optimizer.state
    named = worker.model.named_parameters()  # tied weights once, under their first name
    m = {k: state[p]["exp_avg"].detach().double().numpy().copy() for k, p in named}
    named = worker.model.named_parameters()
    v = {k: state[p]["exp_avg_sq"].detach().double().numpy().copy() for k, p in named}
    return m, v


def _jax_moments(worker) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(m, v)`` by HF name: optax's ``mu`` / ``nu``, trees shaped like the parameters."""
    mu, nu = (optax.tree_utils.tree_get(worker.opt_state, k) for k in ("mu", "nu"))
    m = dict(iter_hf_weights(worker.model_cfg, mu, np.float64))
    return m, dict(iter_hf_weights(worker.model_cfg, nu, np.float64))


def _assert_close_to_scale(actual: np.ndarray, desired: np.ndarray, rel: float, what: str) -> None:
    """Equal to ``rel`` of the tensor's largest entry: a near-zero moment is the remainder of a
    cancellation between terms of that size, exact only to their rounding."""
    scale = float(np.abs(desired).max())
    np.testing.assert_allclose(actual, desired, rtol=10 * rel, atol=rel * scale, err_msg=what)


def _adamw_divergence_bound(moments, lrs, opt) -> dict[str, np.ndarray]:
    """Per weight, how far apart two AdamW trajectories can end from the same start when their
    moments differ as measured, to first order (float64).

    Step t moves θ by ``-η_t (λθ + d_t)``, ``d = m̂ / (√v̂ + ε)``, ``m̂ = m/(1-β₁ᵗ)``,
    ``v̂ = v/(1-β₂ᵗ)``. A difference Δm, Δv changes d by at most
    ``|Δm̂| / (√v̂ + ε) + |m̂| |Δ√v̂| / (√v̂ + ε)²`` (evaluated at the smaller √v̂ of the two, so
    it stays an upper bound); the decay term carries the previous gap by ``(1 + η_t λ)``.
    """
    b1, b2 = opt["betas"]
    eps, wd = opt["eps"], opt["weight_decay"]
    bound: dict[str, np.ndarray] = {}
    for t, (((m_t, v_t), (m_j, v_j)), lr) in enumerate(zip(moments, lrs, strict=True), 1):
        for name in m_t:
            mh_t, mh_j = m_t[name] / (1 - b1**t), m_j[name] / (1 - b1**t)
            sv_t = np.sqrt(np.maximum(v_t[name], 0) / (1 - b2**t))
            sv_j = np.sqrt(np.maximum(v_j[name], 0) / (1 - b2**t))
            den = np.minimum(sv_t, sv_j) + eps
            step_gap = np.abs(mh_j - mh_t) / den
            step_gap += np.maximum(np.abs(mh_t), np.abs(mh_j)) * np.abs(sv_j - sv_t) / den**2
            prev = bound.get(name, 0.0)
            bound[name] = prev * (1 + lr * wd) + lr * step_gap
    return bound
