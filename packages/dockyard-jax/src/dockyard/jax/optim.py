"""AdamW, the learning-rate schedule and grad-norm clipping, with the torch worker's semantics.

* AdamW: ``optax.adamw`` (decay applied to all parameters, as ``torch.optim.AdamW`` with one
  parameter group).
* Schedule: :func:`lr_factor` — the same f(t) as ``dockyard.torch.optim.lr_factor``; optax
  evaluates it at its update count t = 0, 1, …, i.e. the lr of the t-th step is η·f(t), as torch's
  ``LambdaLR`` gives it to ``optimizer.step()``.
* Clipping, as ``torch.nn.utils.clip_grad_norm_``: with n = ‖g‖₂ over all parameters,
  ``g ← g · min(1, c / (n + 1e-6))``; the reported grad norm is n (before clipping).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dockyard.jax.config import OptimizerConfig, SchedulerConfig


def lr_factor(step: Any, cfg: SchedulerConfig) -> Any:
    """f(t) (see the module docstring); ``step`` may be an int or a traced integer array."""
    W = cfg.warmup_steps
    t = jnp.asarray(step, jnp.float32)
    warm = (t + 1.0) / max(W, 1)
    if cfg.type == "constant":
        after = jnp.ones_like(t)
    else:
        span = max(cfg.total_steps - W, 1)
        progress = jnp.clip((t - W) / span, 0.0, 1.0)
        r = cfg.min_lr_ratio
        if cfg.type == "cosine":
            after = r + (1.0 - r) * 0.5 * (1.0 + jnp.cos(math.pi * progress))
        else:
            after = r + (1.0 - r) * (1.0 - progress)
    return jnp.where(t < W, warm, after)


@functools.cache
def build_optimizer(opt: OptimizerConfig, sched: SchedulerConfig) -> optax.GradientTransformation:
    """``optax.adamw`` whose learning rate at update count t is ``opt.lr · lr_factor(t)``.

    Cached: equal configs give the same (stateless) transformation, so workers share its
    compiled update."""
    return optax.adamw(
        learning_rate=lambda count: opt.lr * lr_factor(count, sched),
        b1=opt.betas[0],
        b2=opt.betas[1],
        eps=opt.eps,
        weight_decay=opt.weight_decay,
    )


def global_norm(tree: Any) -> jax.Array:
    """‖g‖₂ over every leaf, accumulated in float32."""
    leaves = jax.tree.leaves(tree)
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))


def clip_by_global_norm(grads: Any, max_norm: float | None) -> tuple[Any, jax.Array]:
    """``(clipped grads, norm before clipping)``, as ``torch.nn.utils.clip_grad_norm_``."""
    norm = global_norm(grads)
    if max_norm is None:
        return grads, norm
    coef = jnp.minimum(max_norm / (norm + 1e-6), 1.0)
    return jax.tree.map(lambda g: (g * coef).astype(g.dtype), grads), norm
