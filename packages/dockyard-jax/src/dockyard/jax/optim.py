"""The run config's optimizer and schedule (``dockyard.core.config.optim``) in optax, with the
torch worker's semantics, and grad-norm clipping.

=======  ============================================================================
adamw    ``optax.adamw`` (decay on all parameters, as ``torch.optim.AdamW`` with one group)
adam     ``add_decayed_weights`` then ``optax.adam``: L2, as ``torch.optim.Adam``
sgd      ``add_decayed_weights`` then ``optax.sgd``: L2, as ``torch.optim.SGD`` (no momentum)
=======  ============================================================================

* Schedule: core's :func:`~dockyard.core.config.optim.lr_factor` over ``jax.numpy``; optax
  evaluates it at its update count t = 0, 1, …, i.e. the lr of the t-th step is η·f(t), as
  torch's ``LambdaLR`` gives it to ``optimizer.step()``.
* Clipping, as ``torch.nn.utils.clip_grad_norm_``: with n = ‖g‖₂ over all parameters,
  ``g ← g · min(1, c / (n + 1e-6))``; the reported grad norm is n (before clipping). It runs
  before the optimizer, so the L2 term λθ is added to the clipped gradient, as in torch.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dockyard.core.config.optim import OptimizerConfig, SchedulerConfig, lr_factor


@functools.cache
def build_optimizer(opt: OptimizerConfig, sched: SchedulerConfig) -> optax.GradientTransformation:
    """``opt.name``'s optax transformation whose learning rate at update count t is
    ``opt.lr · lr_factor(t)`` (see the module docstring).

    Cached: equal configs give the same (stateless) transformation, so workers share its
    compiled update."""

    def lr(count: Any) -> Any:
        return opt.lr * lr_factor(count, sched, jnp)

    if opt.name == "adamw":
        b1, b2 = opt.betas
        return optax.adamw(lr, b1=b1, b2=b2, eps=opt.eps, weight_decay=opt.weight_decay)
    if opt.name == "adam":
        b1, b2 = opt.betas
        adam = optax.adam(lr, b1=b1, b2=b2, eps=opt.eps)
        return optax.chain(optax.add_decayed_weights(opt.weight_decay), adam)
    if opt.name == "sgd":
        return optax.chain(optax.add_decayed_weights(opt.weight_decay), optax.sgd(lr))
    raise ValueError(f"policy.optimizer.name {opt.name!r} has no optax equivalent")


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
