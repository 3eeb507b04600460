"""Per-group and whole-batch statistics over a ``[P, G]`` reward table with a validity mask.

``P`` prompts (groups), ``G`` samples per prompt; ``valid[p, g]`` is False for padding and for
samples masked out (infra errors). All functions take and return arrays of the caller's type.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.rl._xp import Array, Namespace

_BIG = 3.0e38


def valid_float(xp: Namespace, rewards: Array, valid: Any) -> Array:
    """``valid`` as a float array like ``rewards`` (all ones when ``valid`` is None)."""
    if valid is None:
        return rewards * 0.0 + 1.0
    return xp.to_float(valid, rewards)


def group_count(xp: Namespace, v: Array) -> Array:
    """``[P, 1]`` number of valid samples per group."""
    return xp.sum(v, axis=1, keepdims=True)


def group_mean(xp: Namespace, r: Array, v: Array) -> Array:
    """``[P, 1]`` mean of the valid rewards of each group (0 for an empty group)."""
    n = group_count(xp, v)
    return xp.sum(r * v, axis=1, keepdims=True) / xp.maximum(n, 1.0)


def group_std(xp: Namespace, r: Array, v: Array) -> Array:
    """``[P, 1]`` sample standard deviation (Bessel-corrected, N-1) of each group's valid rewards;
    0 for groups of fewer than 2 valid samples."""
    n = group_count(xp, v)
    mean = group_mean(xp, r, v)
    var = xp.sum(v * (r - mean) ** 2, axis=1, keepdims=True) / xp.maximum(n - 1.0, 1.0)
    return xp.sqrt(var)


def group_is_degenerate(xp: Namespace, r: Array, v: Array) -> Array:
    """``[P, 1]`` bool: the group has < 2 valid samples or all its valid rewards are equal.

    Tested with exact equality (max == min), not ``std < eps``: a mean of equal floats is not
    always bit-equal to them, and dividing that rounding error by ``std + eps`` must not turn an
    uninformative group into a non-zero advantage.
    """
    hi = xp.max(xp.where(v > 0, r, -_BIG), axis=1, keepdims=True)
    lo = xp.min(xp.where(v > 0, r, _BIG), axis=1, keepdims=True)
    return xp.logical_or(group_count(xp, v) < 2, hi <= lo)


def whiten(xp: Namespace, a: Array, w: Array, eps: float) -> Array:
    """Whiten ``a`` over the whole batch with non-negative weights ``w`` (same shape):

    μ = Σ w·a / Σ w,  σ² = Σ w·(a − μ)² / Σ w,  â = (a − μ) / (σ + eps), and 0 where ``w = 0``.
    A batch whose weighted entries are all equal gives 0 everywhere.
    """
    total = xp.maximum(xp.sum(w), 1e-12)
    mu = xp.sum(w * a) / total
    var = xp.sum(w * (a - mu) ** 2) / total
    hi = xp.max(xp.where(w > 0, a, -_BIG))
    lo = xp.min(xp.where(w > 0, a, _BIG))
    out = (a - mu) / (xp.sqrt(var) + eps)
    return xp.where(xp.logical_and(w > 0, hi > lo), out, 0.0)
