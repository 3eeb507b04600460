"""Pieces shared by the policy-gradient losses: log-ratios, IS weights, KL, metrics.

Written for few passes over the ``[B, T]`` arrays (the benchmark ``bench/core_loss.py`` holds
the overhead against hand-written torch): ``[B]`` advantages stay ``[B, 1]`` and broadcast,
masked sums are single dot products, metrics use detached arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dockyard.core.rl._xp import Array, Namespace
from dockyard.core.rl.aggregate import aggregate
from dockyard.core.rl.importance import importance_weights, logprob_mismatch
from dockyard.core.rl.kl import kl_estimate

LOG_RATIO_CLAMP = 20.0


@dataclass
class PGInputs:
    """Validated, broadcast inputs of one policy-gradient loss call."""

    xp: Namespace
    logprobs: Array  # [B, T]
    prev: Array  # [B, T], no gradient
    adv: Array  # [B, 1] or [B, T] (0 where masked)
    mask: Array  # [B, T] bool
    m: Array  # [B, T] float
    n: Array  # 0-d: number of loss tokens in this batch (≥ 1)


def _is_bool(x: Any) -> bool:
    return str(getattr(x, "dtype", "")).endswith("bool")


def prepare(
    xp: Namespace, logprobs: Array, advantages: Array, mask: Any, prev_logprobs: Any
) -> PGInputs:
    """Broadcast ``advantages`` ``[B]`` to ``[B, 1]``; π_prev defaults to stop_grad(π) (on-policy)."""
    logprobs = xp.promote_half(logprobs)  # bf16 / fp16 logprobs: compute the loss in float32
    if mask is None:
        mask = logprobs == logprobs  # all True, same array type
    m = xp.to_float(mask, logprobs)
    mask_b = mask if _is_bool(mask) else m > 0
    adv = xp.to_float(advantages, logprobs)
    adv = xp.expand_dims(adv, -1) if len(adv.shape) == 1 else xp.where(mask_b, adv, 0.0)
    prev = xp.stop_gradient(logprobs if prev_logprobs is None else prev_logprobs)
    n = xp.maximum(xp.sum(m), 1.0)
    return PGInputs(xp, logprobs, prev, adv, mask_b, m, n)


def log_ratio(p: PGInputs, sequence_level: bool) -> Array:
    """log r = log π − log π_prev per token (0 outside the mask, clamped to ±20); with
    ``sequence_level`` (GSPO) the sequence mean (1/|y|) Σ_t log r_t broadcast over its tokens."""
    xp = p.xp
    lr = xp.where(p.mask, p.logprobs - p.prev, 0.0)
    if sequence_level:
        lens = xp.maximum(xp.sum(p.m, axis=-1, keepdims=True), 1.0)
        lr = (xp.sum(lr, axis=-1, keepdims=True) / lens) * p.m
    return xp.clip(lr, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def is_weights(
    p: PGInputs,
    gen_logprobs: Any,
    enabled: bool,
    kind: str | None,
    ratio_max: float | None,
    ratio_min: float | None,
    metrics: dict[str, Array],
) -> Array | None:
    """Importance weights ``[B, T]`` (None when disabled); adds IS and mismatch metrics."""
    if gen_logprobs is None:
        if enabled:
            raise ValueError("use_importance_sampling_correction needs gen_logprobs in the batch")
        return None
    metrics.update(logprob_mismatch(p.prev, gen_logprobs, p.mask))
    if not enabled:
        return None
    w, m = importance_weights(
        p.prev, gen_logprobs, p.mask, kind=kind, ratio_max=ratio_max, ratio_min=ratio_min
    )
    metrics.update(m)
    return w


def add_kl(
    p: PGInputs,
    per_token: Array,
    ref_logprobs: Any,
    beta: float,
    kind: str,
    metrics: dict[str, Array],
) -> Array:
    """per_token + β · k(log π, log π_ref); records the mean KL as ``kl_ref``."""
    if beta == 0.0:
        return per_token
    if ref_logprobs is None:
        raise ValueError("a KL penalty (reference_policy_kl_penalty > 0) needs ref_logprobs")
    xp = p.xp
    # x = 0 where masked gives k = 0 for k1, k2 and k3, so no second masking pass is needed.
    kl = kl_estimate(p.logprobs, xp.where(p.mask, xp.stop_gradient(ref_logprobs), p.logprobs), kind)  # type: ignore[arg-type]
    metrics["kl_ref"] = xp.dot_all(xp.stop_gradient(kl), p.m) / p.n
    return per_token + beta * kl


def finish(
    p: PGInputs,
    per_token: Array,
    lr: Array,
    r: Array,
    w: Array | None,
    agg: str,
    num_loss_tokens: Any,
    num_sequences: Any,
    norm_length: float | None,
    metrics: dict[str, Array],
) -> tuple[Array, dict[str, Array]]:
    """Apply IS weights, aggregate, and add the common metrics (``lr``, ``r``: the log-ratio
    and ratio the loss used)."""
    xp = p.xp
    if w is not None:
        per_token = per_token * w
    if agg == "token-mean":
        n = p.n if num_loss_tokens is None else xp.maximum(num_loss_tokens, 1.0)
        loss = xp.dot_all(per_token, p.m) / n
    else:
        loss = aggregate(xp, per_token, p.m, agg, num_loss_tokens, num_sequences, norm_length)
    lr, r = xp.stop_gradient(lr), xp.stop_gradient(r)
    # KL(π_prev ‖ π) from samples of π_prev: k3 with x = log π − log π_prev, i.e. r − 1 − log r.
    metrics["approx_kl"] = xp.dot_all(r - lr, p.m) / p.n - xp.sum(p.m) / p.n
    metrics["ratio_mean"] = xp.dot_all(r, p.m) / p.n
    metrics["num_tokens"] = xp.sum(p.m)
    metrics["loss"] = xp.stop_gradient(loss)
    return loss, metrics
