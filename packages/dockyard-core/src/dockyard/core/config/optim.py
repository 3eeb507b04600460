"""``policy.optimizer`` and ``policy.scheduler``: one schema for both trainers, and the schedule.

Both trainers (``dockyard-torch``: ``torch.optim``; ``dockyard-jax``: optax) hold these models as
they are and implement every choice they offer; a parity test per trainer takes one step of each
optimizer by hand. With g the (clipped) gradient, λ ``weight_decay`` and η_t the scheduled rate:

* ``adamw`` (Loshchilov & Hutter 2019, ``torch.optim.AdamW`` / ``optax.adamw``):
  m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g², θ ← θ − η_t·(m̂/(√v̂ + ε) + λ·θ), with the bias
  corrections m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ). The decay is decoupled from the moments.
* ``adam`` (Kingma & Ba 2015, ``torch.optim.Adam``): g ← g + λ·θ (L2, inside the moments, as
  torch does), then the same step without the λ·θ term.
* ``sgd`` (``torch.optim.SGD`` without momentum): θ ← θ − η_t·(g + λ·θ). ``betas`` and ``eps``
  are not used.

Schedule (:func:`lr_factor`), η_t = ``lr``·f(t) for the t-th optimizer step, t = 0, 1, …:
warm-up f = (t+1)/W for t < W; then ``constant`` f = 1, ``linear`` f = r + (1−r)(1−p),
``cosine`` f = r + (1−r)·½(1 + cos πp), with p = min((t−W)/(S−W), 1), W ``warmup_steps``,
S ``total_steps`` and r ``min_lr_ratio``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, PositiveInt

from dockyard.core.config._base import ConfigModel


class OptimizerConfig(ConfigModel):
    """The optimizer; both trainers implement each choice (``dockyard.core.config.optim``)."""

    model_config = ConfigDict(frozen=True)  # hashable: the JAX trainer caches its update on it

    name: Literal["adamw", "adam", "sgd"] = "adamw"
    """Optimizer: adamw (decoupled decay), adam (L2 decay), sgd (no momentum)."""
    lr: float = Field(default=1.0e-6, gt=0)
    """Peak learning rate η."""
    weight_decay: float = Field(default=0.01, ge=0)
    """Weight decay λ: decoupled for adamw, added to the gradient (L2) for adam and sgd."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam (β1, β2) (adamw / adam)."""
    eps: float = Field(default=1.0e-8, gt=0)
    """Adam ε (adamw / adam)."""


class SchedulerConfig(ConfigModel):
    """The learning-rate schedule η_t = lr·f(t): warm-up over W steps, then constant, or linear
    / cosine down to r·lr at step S."""

    model_config = ConfigDict(frozen=True)

    name: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate schedule after warm-up."""
    warmup_steps: int = Field(default=0, ge=0)
    """W: linear warm-up steps (step t < W runs at lr·(t+1)/W)."""
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    """r: final learning rate as a fraction of ``lr`` (linear / cosine)."""
    total_steps: PositiveInt | None = None
    """S: the optimizer step where the linear / cosine decay reaches r; null: the run's length
    (``grpo.max_num_steps``)."""


def lr_factor(step: Any, cfg: SchedulerConfig, xp: Any = np) -> Any:
    """f(t) of the module docstring, written once for both trainers (array-API style).

    Args:
        step: t, an int or an integer array (a traced one under ``jax.jit``).
        cfg: the schedule; ``total_steps`` must be set for linear / cosine.
        xp: the array namespace (``numpy`` for torch's ``LambdaLR``, ``jax.numpy`` for optax).

    Returns:
        f(t) as a 0-d float array of ``xp`` (float64 under numpy, float32 under JAX).
    """
    W = cfg.warmup_steps
    t = xp.asarray(step) * 1.0  # an integer t becomes xp's default float
    warm = (t + 1.0) / max(W, 1)
    if cfg.name == "constant":
        return xp.where(t < W, warm, 1.0)
    if cfg.total_steps is None:
        raise ValueError(
            f"scheduler.total_steps is needed by the {cfg.name} schedule (S: where it ends)"
        )
    progress = xp.clip((t - W) / max(cfg.total_steps - W, 1), 0.0, 1.0)
    r = cfg.min_lr_ratio
    if cfg.name == "cosine":
        after = r + (1.0 - r) * 0.5 * (1.0 + xp.cos(math.pi * progress))
    else:
        after = r + (1.0 - r) * (1.0 - progress)
    return xp.where(t < W, warm, after)
