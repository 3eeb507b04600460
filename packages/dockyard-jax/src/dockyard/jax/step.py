"""The jitted pieces of the worker: logprobs, gradient of a core loss, optimizer update.

Alignment of logprobs (the ``PolicyWorker`` contract, identical to the torch worker): for tokens
``y [b, T]`` and logits ``z [b, T, V]`` (``z[:, t]`` predicts ``y[:, t+1]``),

    logprobs[b, t] = z'[b, t−1, y_bt] − logsumexp_v z'[b, t−1, v],   z' = z / τ,

for t ≥ 1, and 0 at t = 0 and on padding. Top-k logits use the same shift and are unscaled.

A train step accumulates ``∇ L_μ`` over micro-batches μ, where the core loss ``L_μ`` is
normalised by the *global* counts (``num_loss_tokens``, ``num_sequences``), so Σ_μ ∇L_μ is the
gradient of the whole batch's loss whatever the micro-batch size; then clip and AdamW.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from dockyard.jax.models.hf import apply, apply_with_router_load
from dockyard.jax.models.moe import RouterOptions
from dockyard.jax.optim import clip_by_global_norm

_CACHE: dict[Any, Any] = {}


def _memo(key: Any, build: Callable[[], Any]) -> Any:
    """Jitted functions are shared by every worker with the same model, loss and layout, so a
    second worker (a reference copy, a test, a restart) does not compile again."""
    if key not in _CACHE:
        if len(_CACHE) >= 64:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = build()
    return _CACHE[key]


def loss_key(loss_fn: Any) -> Any:
    """Equal losses share one compiled step: the object itself when hashable, a dataclass by
    its repr (its fields, e.g. ``PolicyLoss(options={...})``), anything else by identity (the
    cache then holds the object, so the id is never reused)."""
    try:
        hash(loss_fn)
        return loss_fn
    except TypeError:
        if dataclasses.is_dataclass(loss_fn):
            return (type(loss_fn), repr(loss_fn))
        return (id(loss_fn), loss_fn.__call__)


def _tree_key(tree: Any) -> Any:
    leaves, treedef = jax.tree.flatten(tree)
    return (treedef, tuple(leaves))


def token_logprobs(logits: jax.Array, input_ids: jax.Array, temperature: float) -> jax.Array:
    """``[b, T, V]`` logits, ``[b, T]`` ids → ``[b, T] float32`` (0 at t = 0)."""
    z = logits[:, :-1].astype(jnp.float32)
    if temperature != 1.0:
        z = z / temperature
    picked = jnp.take_along_axis(z, input_ids[:, 1:, None], axis=-1)[..., 0]
    lp = picked - jax.nn.logsumexp(z, axis=-1)
    return jnp.pad(lp, ((0, 0), (1, 0)))


def make_logprob_fn(
    graphdef: nnx.GraphDef, temperature: float, router: RouterOptions | None = None
) -> Callable[..., jax.Array]:
    """``fn(params, ids [b, T], mask [b, T], bias=None) -> [b, T]`` logprobs, 0 where ``mask``
    is False (``router`` / ``bias``: a Mixture-of-Experts model's routing, :func:`apply`)."""

    def fn(params: Any, ids: jax.Array, mask: jax.Array, bias: Any = None) -> jax.Array:
        logits = apply(graphdef, params, ids, mask, router=router, bias=bias)
        return jnp.where(mask, token_logprobs(logits, ids, temperature), 0.0)

    return _memo(("logprobs", graphdef, temperature, router), lambda: jax.jit(fn))


def make_entropy_fn(
    graphdef: nnx.GraphDef, temperature: float, router: RouterOptions | None = None
) -> Callable[..., jax.Array]:
    """``fn(params, ids, mask, bias=None) -> [b, T] float32``: the entropy (nats) of the
    distribution of each token at temperature τ, aligned like the logprobs (0 at t = 0 and where
    ``mask`` is False)."""

    def fn(params: Any, ids: jax.Array, mask: jax.Array, bias: Any = None) -> jax.Array:
        logits = apply(graphdef, params, ids, mask, router=router, bias=bias)
        z = logits[:, :-1].astype(jnp.float32) / temperature
        h = jax.nn.logsumexp(z, axis=-1) - jnp.sum(jax.nn.softmax(z, axis=-1) * z, axis=-1)
        return jnp.where(mask, jnp.pad(h, ((0, 0), (1, 0))), 0.0)

    return _memo(("entropy", graphdef, temperature, router), lambda: jax.jit(fn))


def make_topk_fn(
    graphdef: nnx.GraphDef, k: int, router: RouterOptions | None = None
) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """``fn(params, ids, mask, bias=None) -> (values [b, T, k] float32, indices [b, T, k]
    int32)``."""

    def fn(params: Any, ids: jax.Array, mask: jax.Array, bias: Any = None):
        logits = apply(graphdef, params, ids, mask, router=router, bias=bias)[:, :-1]
        values, indices = jax.lax.top_k(logits, k)
        values = jnp.pad(values, ((0, 0), (1, 0), (0, 0)))
        indices = jnp.pad(indices, ((0, 0), (1, 0), (0, 0)))
        keep = mask[..., None]
        return jnp.where(keep, values, 0.0), jnp.where(keep, indices, 0)

    return _memo(("topk", graphdef, k, router), lambda: jax.jit(fn))


def make_grad_fn(
    graphdef: nnx.GraphDef,
    loss_fn: Callable[[Any, Mapping[str, Any]], tuple[Any, dict[str, Any]]],
    temperature: float,
    grad_shardings: Any = None,
    router: RouterOptions | None = None,
    aux_loss_coeff: float = 0.0,
) -> Callable[..., tuple[Any, jax.Array, dict[str, jax.Array], jax.Array | None]]:
    """``fn(params, ids, mask, fields, bias=None, aux_weight=0) -> (grads, loss, scalar
    metrics, router stats)`` for one micro-batch (stats: ``[MoE layers, E + 2]`` of its real
    tokens, :func:`~dockyard.jax.models.moe.router_stats`; None when dense).

    ``fields``: the loss's batch (``loss_mask``, ``advantages``, ..., ``num_loss_tokens``).
    ``grad_shardings``: constrain gradients to the parameters' shardings (reduce-scatter).
    ``router`` / ``bias``: the routing (:func:`apply`). ``aux_loss_coeff`` α > 0: the gradient
    is that of ``loss + α · aux_weight · mean over layers of L_aux`` (the Switch loss;
    ``aux_weight``: this micro-batch's share of the step's loss tokens), as the torch worker's;
    ``loss`` stays the core loss.
    """

    def loss_of(params, ids, mask, fields, bias, aux_weight):
        logits, stats = apply_with_router_load(graphdef, params, ids, mask, router=router,
                                               bias=bias)  # fmt: skip
        lp = jnp.where(mask, token_logprobs(logits, ids, temperature), 0.0)
        loss, metrics = loss_fn(lp, fields)
        scalars = {
            k: jnp.asarray(v, jnp.float32)
            for k, v in metrics.items()
            if isinstance(v, int | float | jax.Array) and jnp.ndim(v) == 0
        }
        loss = jnp.asarray(loss, jnp.float32)
        total = loss
        if stats is not None and aux_loss_coeff > 0:
            total = loss + aux_loss_coeff * aux_weight * jnp.mean(stats[:, -1])
        return total, (loss, scalars, stats)

    def fn(params, ids, mask, fields, bias=None, aux_weight=0.0):
        (_, (loss, metrics, stats)), grads = jax.value_and_grad(loss_of, has_aux=True)(
            params, ids, mask, fields, bias, jnp.float32(aux_weight)
        )
        if grad_shardings is not None:
            grads = jax.lax.with_sharding_constraint(grads, grad_shardings)
        return grads, loss, metrics, None if stats is None else jax.lax.stop_gradient(stats)

    key = ("grad", graphdef, loss_key(loss_fn), temperature, _tree_key(grad_shardings), router,
           aux_loss_coeff)  # fmt: skip
    return _memo(key, lambda: jax.jit(fn))


@jax.jit
def tree_add(a: Any, b: Any) -> Any:
    return jax.tree.map(jnp.add, a, b)


def make_update_fn(
    tx: optax.GradientTransformation, max_grad_norm: float | None, out_shardings: Any = None
) -> Callable[..., tuple[Any, Any, jax.Array]]:
    """``fn(params, opt_state, grads) -> (params, opt_state, grad_norm before clipping)``.

    ``out_shardings``: ``(params, opt_state, norm)`` shardings, so that every step sees the
    same input layout (one compilation for the whole run)."""

    def fn(params: Any, opt_state: Any, grads: Any):
        grads, norm = clip_by_global_norm(grads, max_grad_norm)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, norm

    key = ("update", id(tx), tx, max_grad_norm, _tree_key(out_shardings))
    return _memo(key, lambda: jax.jit(fn, out_shardings=out_shardings))
