"""Pieces shared by the policy-gradient losses: log-ratios, IS weights, KL, metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dockyard.core.rl._xp import Array, Namespace
from dockyard.core.rl.aggregate import aggregate, masked_mean
from dockyard.core.rl.importance import importance_weights, logprob_mismatch
from dockyard.core.rl.kl import kl_estimate

LOG_RATIO_CLAMP = 20.0


@dataclass
class PGInputs:
    """Validated, broadcast inputs of one policy-gradient loss call."""

    xp: Namespace
    logprobs: Array  # [B, T]
    prev: Array  # [B, T], no gradient
    adv: Array  # [B, T]
    mask: Array  # [B, T] bool
    m: Array  # [B, T] float


def prepare(
    xp: Namespace, logprobs: Array, advantages: Array, mask: Any, prev_logprobs: Any
) -> PGInputs:
    """Broadcast ``advantages`` ``[B]`` to ``[B, T]``; π_prev defaults to stop_grad(π) (on-policy)."""
    if mask is None:
        mask = logprobs == logprobs  # all True, same type
    m = xp.to_float(mask, logprobs)
    mask_b = m > 0
    adv = xp.to_float(advantages, logprobs)
    if len(adv.shape) == 1:
        adv = xp.expand_dims(adv, -1)
    adv = xp.where(mask_b, adv * m, 0.0)
    prev = xp.stop_gradient(logprobs) if prev_logprobs is None else xp.stop_gradient(prev_logprobs)
    return PGInputs(xp, logprobs, prev, adv, mask_b, m)


def log_ratio(p: PGInputs, sequence_level: bool) -> Array:
    """log r = log π − log π_prev per token (0 outside the mask, clamped to ±20); with
    ``sequence_level`` (GSPO) the sequence mean (1/|y|) Σ_t log r_t broadcast over its tokens."""
    xp = p.xp
    lr = xp.where(p.mask, p.logprobs - p.prev, 0.0)
    if sequence_level:
        lens = xp.maximum(xp.sum(p.m, axis=-1, keepdims=True), 1.0)
        lr = (xp.sum(lr * p.m, axis=-1, keepdims=True) / lens) * p.m
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
    kl = kl_estimate(p.logprobs, p.xp.stop_gradient(ref_logprobs), kind, mask=p.mask)  # type: ignore[arg-type]
    metrics["kl_ref"] = p.xp.stop_gradient(masked_mean(p.xp, kl, p.m))
    return per_token + beta * kl


def finish(
    p: PGInputs,
    per_token: Array,
    w: Array | None,
    agg: str,
    num_loss_tokens: Any,
    num_sequences: Any,
    norm_length: float | None,
    metrics: dict[str, Array],
) -> tuple[Array, dict[str, Array]]:
    """Apply IS weights, aggregate, and add the common metrics."""
    xp = p.xp
    if w is not None:
        per_token = per_token * w
    loss = aggregate(xp, per_token, p.m, agg, num_loss_tokens, num_sequences, norm_length)
    lr = xp.stop_gradient(xp.where(p.mask, p.logprobs - p.prev, 0.0))
    lr = xp.clip(lr, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    # KL(π_prev ‖ π) from samples of π_prev: k3 with x = log π − log π_prev.
    metrics["approx_kl"] = masked_mean(xp, xp.expm1(lr) - lr, p.m)
    metrics["ratio_mean"] = masked_mean(xp, xp.exp(lr), p.m)
    metrics["num_tokens"] = xp.sum(p.m)
    metrics["loss"] = xp.stop_gradient(loss)
    return loss, metrics
