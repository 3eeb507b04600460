"""CISPO: clipped importance-sampling-weight policy optimisation (MiniMax 2025, "MiniMax-M1",
arXiv:2506.13585, §3.1).

PPO's clip zeroes the gradient of tokens whose ratio left the trust region — often the rare,
"fork" tokens of long reasoning. CISPO clips the *weight* instead and keeps every token:

  ℓ_t = −sg(clip(r_t, 1 − ε_low, 1 + ε_high)) · A_t · log π(y_t)  (+ β·KL_t, × IS weight w_t)

with r_t = π(y_t)/π_prev(y_t) and sg the stop-gradient, so ∇ℓ_t = −r̂_t A_t ∇log π(y_t). The
paper effectively uses no lower bound (large ε_low) and tunes ε_high only.

The scalar value of the loss is not meaningful (it multiplies log π); its gradient is.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.aggregate import masked_mean
from dockyard.core.rl.losses._common import add_kl, finish, is_weights, log_ratio, prepare


def cispo_loss(
    logprobs: Array,
    advantages: Array,
    mask: Any = None,
    *,
    prev_logprobs: Any = None,
    gen_logprobs: Any = None,
    ref_logprobs: Any = None,
    eps_low: float = 1.0,
    eps_high: float = 0.28,
    kl_beta: float = 0.0,
    kl_type: str = "k3",
    is_correction: bool = False,
    is_type: str | None = "tis",
    is_ratio_max: float | None = None,
    is_ratio_min: float | None = None,
    agg: str = "token-mean",
    num_loss_tokens: Any = None,
    num_sequences: Any = None,
    norm_length: float | None = None,
) -> tuple[Array, dict[str, Array]]:
    """CISPO loss. Arguments and shapes as :func:`clipped_pg_loss` (no dual clip, no GSPO).

    Returns ``(loss, metrics)``; ``clip_fraction`` is the share of loss tokens whose weight
    was clipped.
    """
    xp = namespace(logprobs, advantages, mask, prev_logprobs, gen_logprobs, ref_logprobs)
    p = prepare(xp, logprobs, advantages, mask, prev_logprobs)
    metrics: dict[str, Array] = {}
    w = is_weights(p, gen_logprobs, is_correction, is_type, is_ratio_max, is_ratio_min, metrics)
    lr = log_ratio(p, False)
    r = xp.stop_gradient(xp.exp(lr))
    r_hat = xp.clip(r, 1.0 - eps_low, 1.0 + eps_high)
    metrics["clip_fraction"] = masked_mean(
        xp, xp.to_float(xp.logical_or(r_hat < r, r_hat > r), p.m), p.m
    )
    lp = xp.where(p.mask, logprobs, 0.0)
    per_token = add_kl(p, -r_hat * p.adv * lp, ref_logprobs, kl_beta, kl_type, metrics)
    return finish(p, per_token, lr, r, w, agg, num_loss_tokens, num_sequences, norm_length, metrics)
