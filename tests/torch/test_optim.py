"""Every optimizer and schedule of the run config (``dockyard.core.config.optim``) in the torch
trainer: a step moves the weights as that optimizer's formula says (float64, by hand), the t-th
step runs at lr·f(t), and the worker trains with the optimizer it is given."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dockyard.core.config.optim import OptimizerConfig, SchedulerConfig, lr_factor
from dockyard.core.rl import MaskedNLLLoss
from dockyard.torch.optim import build_optimizer
from dockyard.torch.testing import random_batch
from dockyard.torch.worker import TorchPolicyWorker

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


@pytest.mark.parametrize("name", ["adamw", "adam", "sgd"])
def test_each_optimizer_steps_as_its_formula(name: str) -> None:
    rng = np.random.default_rng(0)
    theta0 = rng.normal(size=7)
    grads = [rng.normal(size=7) for _ in range(3)]
    p = torch.nn.Parameter(torch.tensor(theta0))
    opt, sched = build_optimizer([p], OptimizerConfig(name=name, **OPT), SchedulerConfig())
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
        sched.step()
    np.testing.assert_allclose(p.detach().numpy(), by_hand(name, theta0, grads), rtol=1e-12)


def test_one_sgd_step_is_p_minus_lr_g() -> None:
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt, _ = build_optimizer(
        [p], OptimizerConfig(name="sgd", lr=0.5, weight_decay=0.0), SchedulerConfig()
    )
    p.grad = torch.tensor([0.2, 0.4], dtype=torch.float64)
    opt.step()
    assert p.detach().tolist() == pytest.approx([1.0 - 0.5 * 0.2, -2.0 - 0.5 * 0.4])


@pytest.mark.parametrize("name", ["constant", "linear", "cosine"])
def test_each_schedule_sets_the_rate_of_each_step(name: str) -> None:
    cfg = SchedulerConfig(name=name, warmup_steps=2, total_steps=7, min_lr_ratio=0.1)
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt, sched = build_optimizer([p], OptimizerConfig(name="sgd", lr=0.5, weight_decay=0.0), cfg)
    for t in range(9):  # SGD with g = 1 moves θ by exactly the step's rate
        before = float(p.item())
        p.grad = torch.ones(1, dtype=torch.float64)
        opt.step()
        sched.step()
        assert before - float(p.item()) == pytest.approx(0.5 * float(lr_factor(t, cfg)), rel=1e-12)


def _weights(worker: TorchPolicyWorker) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for b in worker.export_weights(1 << 30) for k, v in b.items()}


def test_the_worker_trains_with_the_optimizer_it_is_given(base_config) -> None:
    """One step of each optimizer on the worker: SGD at lr 1 gives the gradient g, and Adam's
    first step (m̂ = g, v̂ = g²) is then known in closed form: θ − η·g/(|g| + ε)."""
    batch = random_batch(4, 24, seed=5)
    base = {
        **base_config,
        "reference_policy": False,
        "max_grad_norm": None,
        "scheduler": {"name": "constant"},
    }

    def one_step(**opt: float | str) -> dict[str, np.ndarray]:
        worker = TorchPolicyWorker({**base, "optimizer": opt})
        worker.train_step(batch, MaskedNLLLoss())
        return _weights(worker)

    theta = _weights(TorchPolicyWorker(base))
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
