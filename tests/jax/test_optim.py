"""Every optimizer and schedule of the run config (``dockyard.core.config.optim``) in the JAX
trainer: a step moves the weights as that optimizer's formula says (by hand, float64 reference),
the t-th step runs at lr·f(t), and the worker trains with the optimizer it is given."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dockyard.core.config.optim import OptimizerConfig, SchedulerConfig, lr_factor
from dockyard.core.rl import MaskedNLLLoss
from dockyard.jax import JaxPolicyWorker
from dockyard.jax.optim import build_optimizer

LR, WD, B1, B2, EPS = 0.1, 0.05, 0.8, 0.9, 1e-3
OPT = {"lr": LR, "weight_decay": WD, "betas": (B1, B2), "eps": EPS}


def by_hand(name: str, theta: np.ndarray, grads: list[np.ndarray]) -> np.ndarray:
    """The module docstring of ``dockyard.core.config.optim``, at a constant rate."""
    m = v = np.zeros_like(theta)
    for t, g in enumerate(grads, start=1):
        if name == "sgd":
            theta = theta - LR * (g + WD * theta)
            continue
        if name == "adam":
            g = g + WD * theta
        m, v = B1 * m + (1 - B1) * g, B2 * v + (1 - B2) * g * g
        step = (m / (1 - B1**t)) / (np.sqrt(v / (1 - B2**t)) + EPS)
        theta = theta - LR * (step + WD * theta if name == "adamw" else step)
    return theta


def _run(tx: optax.GradientTransformation, theta: np.ndarray, grads: list[np.ndarray]):
    params = jnp.asarray(theta, jnp.float32)
    state = tx.init(params)
    for g in grads:
        updates, state = tx.update(jnp.asarray(g, jnp.float32), state, params)
        params = optax.apply_updates(params, updates)
    return np.asarray(params, np.float64)


@pytest.mark.parametrize("name", ["adamw", "adam", "sgd"])
def test_each_optimizer_steps_as_its_formula(name: str) -> None:
    rng = np.random.default_rng(0)
    theta0 = rng.normal(size=7)
    grads = [rng.normal(size=7) for _ in range(3)]
    tx = build_optimizer(OptimizerConfig(name=name, **OPT), SchedulerConfig())
    np.testing.assert_allclose(_run(tx, theta0, grads), by_hand(name, theta0, grads), rtol=2e-6)


def test_one_sgd_step_is_p_minus_lr_g() -> None:
    tx = build_optimizer(OptimizerConfig(name="sgd", lr=0.5, weight_decay=0.0), SchedulerConfig())
    got = _run(tx, np.array([1.0, -2.0]), [np.array([0.2, 0.4])])
    np.testing.assert_allclose(got, [1.0 - 0.5 * 0.2, -2.0 - 0.5 * 0.4], rtol=1e-6)


@pytest.mark.parametrize("name", ["constant", "linear", "cosine"])
def test_each_schedule_sets_the_rate_of_each_step(name: str) -> None:
    cfg = SchedulerConfig(name=name, warmup_steps=2, total_steps=7, min_lr_ratio=0.1)
    tx = build_optimizer(OptimizerConfig(name="sgd", lr=0.5, weight_decay=0.0), cfg)
    params, state = jnp.zeros(1), tx.init(jnp.zeros(1))
    for t in range(9):  # SGD with g = 1 moves θ by exactly the step's rate
        updates, state = tx.update(jnp.ones(1), state, params)
        assert -float(updates[0]) == pytest.approx(0.5 * float(lr_factor(t, cfg)), rel=1e-6)


def _weights(worker: JaxPolicyWorker) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in worker.iter_weights()}


def test_the_worker_trains_with_the_optimizer_it_is_given(tiny_qwen2, make_grpo_batch) -> None:
    """One step of each optimizer on the worker: SGD at lr 1 gives the gradient g, and Adam's
    first step (m̂ = g, v̂ = g²) is then known in closed form: θ − η·g/(|g| + ε)."""
    batch = make_grpo_batch(96)
    base = {
        "model_name": str(tiny_qwen2),
        "train_micro_batch_size": 2,
        "precision": "float32",
        "reference_policy": False,
        "max_grad_norm": None,
    }

    def one_step(**opt: float | str) -> dict[str, np.ndarray]:
        worker = JaxPolicyWorker({**base, "optimizer": opt})
        worker.train_step(batch, MaskedNLLLoss())
        return _weights(worker)

    theta = _weights(JaxPolicyWorker(base))
    sgd = one_step(name="sgd", lr=1.0, weight_decay=0.0)
    grad = {k: theta[k] - sgd[k] for k in theta}
    lr, wd, eps = 1e-3, 0.1, 1e-4

    def expected(name: str, k: str) -> np.ndarray:
        g = grad[k] + wd * theta[k] if name == "adam" else grad[k]
        if name == "sgd":
            return theta[k] - lr * (g + wd * theta[k])
        step = g / (np.abs(g) + eps)
        return theta[k] - lr * (step + wd * theta[k] if name == "adamw" else step)

    for name in ("adamw", "adam", "sgd"):
        got = one_step(name=name, lr=lr, weight_decay=wd, eps=eps)
        for k in theta:
            np.testing.assert_allclose(
                got[k], expected(name, k), rtol=0, atol=lr * 1e-3, err_msg=f"{name}: {k}"
            )
