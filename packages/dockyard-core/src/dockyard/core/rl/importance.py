"""Importance-sampling correction for the gap between the generating engine and the trainer.

Tokens were sampled by the inference engine (log π_gen: a stale policy version in async mode,
and a different numerical implementation in any mode), while the clipped objective's ratio is
taken against the trainer's π_prev. Per token,

  w_t = exp(log π_prev(y_t) − log π_gen(y_t))       (no gradient: neither depends on θ)

multiplies the per-token loss, with one of three truncations (bounds [w_min, w_max]):

* ``tis``          w_t ← clip(w_t, w_min, w_max)  (truncated IS; Yao et al. 2025, "Your
                   Efficient RL Framework Secretly Brings You Off-Policy RL Training";
                   Ionides 2008). w_min defaults to 0 (upper truncation only).
* ``icepop``       w_t ← w_t · 1[w_min ≤ w_t ≤ w_max]: tokens outside the band are masked, the
                   rest keep their exact weight (IcePop, Ling Team 2025, "Every Step Evolves:
                   Scaling RL for Trillion-Scale Thinking Model", arXiv:2510.18855).
* ``seq-mask-tis`` ŵ_b = exp(mean_t log w_bt) (the geometric mean over a sequence's tokens); a
                   whole sequence is masked when ŵ_b ∉ [w_min, w_max], kept tokens use their
                   untruncated w_t (NeMo-RL's ``seq-mask-tis``).

Log-weights are clamped to ±20 before the exponential (no overflow for pathological tokens).
"""

from __future__ import annotations

from typing import Any, Literal

from dockyard.core.rl._xp import Array, namespace

ISType = Literal["tis", "icepop", "seq-mask-tis"]
IS_TYPES: tuple[str, ...] = ("tis", "icepop", "seq-mask-tis")
LOG_W_CLAMP = 20.0
_BIG = 3.0e38


def importance_weights(
    prev_logprobs: Array,
    gen_logprobs: Array,
    mask: Any,
    *,
    kind: str | None = "tis",
    ratio_max: float | None = None,
    ratio_min: float | None = None,
) -> tuple[Array, dict[str, Array]]:
    """Per-token importance weights w = exp(log π_prev − log π_gen), truncated or masked.

    Args:
        prev_logprobs: ``[B, T]`` trainer logprobs of the sampled tokens (before the update).
        gen_logprobs: ``[B, T]`` engine logprobs of the same tokens.
        mask: ``[B, T]`` bool, the loss tokens.
        kind: ``"tis"``, ``"icepop"``, ``"seq-mask-tis"`` or None (plain, untruncated weights).
        ratio_max: upper bound w_max (None: no upper bound; required for icepop/seq-mask-tis).
        ratio_min: lower bound w_min (None: 0).

    Returns:
        ``(w [B, T], metrics)``: w is 0 outside ``mask`` and where masked by the truncation, and
        carries no gradient. Metrics (0-d arrays): ``is_weight_mean/min/max`` over loss tokens
        before truncation, ``is_masked_fraction`` (share of loss tokens zeroed by the
        truncation), ``is_truncated_fraction`` (share clipped by ``tis``).
    """
    xp = namespace(prev_logprobs, gen_logprobs, mask)
    m = xp.to_float(mask, prev_logprobs)
    log_w = xp.stop_gradient(xp.where(mask, prev_logprobs - gen_logprobs, 0.0))
    log_w = xp.clip(log_w, -LOG_W_CLAMP, LOG_W_CLAMP)
    w = xp.exp(log_w)
    n = xp.maximum(xp.sum(m), 1.0)
    metrics: dict[str, Array] = {
        "is_weight_mean": xp.sum(w * m) / n,
        "is_weight_max": xp.max(xp.where(mask, w, -_BIG)),
        "is_weight_min": xp.min(xp.where(mask, w, _BIG)),
    }
    lo = 0.0 if ratio_min is None else ratio_min
    keep = m
    if kind is None:
        out = w
    elif kind == "tis":
        out = xp.clip(w, lo, ratio_max)
        changed = xp.to_float(xp.logical_or(w > out, w < out), m)
        metrics["is_truncated_fraction"] = xp.sum(changed * m) / n
    elif kind in ("icepop", "seq-mask-tis"):
        if ratio_max is None:
            raise ValueError(f"importance sampling {kind!r} needs ratio_max (w_max)")
        if kind == "icepop":
            inside = xp.logical_and(w >= lo, w <= ratio_max)
            keep = m * xp.to_float(inside, m)
        else:
            lens = xp.maximum(xp.sum(m, axis=-1, keepdims=True), 1.0)
            seq_w = xp.exp(xp.sum(log_w * m, axis=-1, keepdims=True) / lens)
            inside = xp.logical_and(seq_w >= lo, seq_w <= ratio_max)
            keep = m * xp.to_float(inside, m)
        out = w
    else:
        raise ValueError(
            f"unknown importance sampling type {kind!r}; use one of {', '.join(IS_TYPES)}"
        )
    metrics["is_masked_fraction"] = xp.sum(m - keep) / n
    return xp.stop_gradient(out * keep), metrics


def logprob_mismatch(prev_logprobs: Array, gen_logprobs: Array, mask: Any) -> dict[str, Array]:
    """Train-vs-generation logprob mismatch over loss tokens: mean and max of
    |log π_prev − log π_gen| (0-d arrays, no gradient)."""
    xp = namespace(prev_logprobs, gen_logprobs, mask)
    m = xp.to_float(mask, prev_logprobs)
    d = xp.stop_gradient(xp.abs(xp.where(mask, prev_logprobs - gen_logprobs, 0.0)))
    return {
        "logprob_mismatch_mean": xp.sum(d * m) / xp.maximum(xp.sum(m), 1.0),
        "logprob_mismatch_max": xp.max(d * m),
    }
