"""The clipped policy-gradient loss: PPO / GRPO / DAPO / GSPO in one function.

Per loss token t of sequence b, with advantage A, ratio r = π(y_t)/π_prev(y_t) and bounds
ε_low, ε_high (``ratio_clip_min``, ``ratio_clip_max``):

  J_t = min(r·A, clip(r, 1 − ε_low, 1 + ε_high)·A)                     (PPO, Schulman 2017)
  J_t ← max(J_t, c·A)  where A < 0, if the dual-clip constant c > 1 is set
                                                     (Ye et al. 2020, arXiv:1912.09729)
  ℓ_t = −w_t · J_t + β · w_t · KL_t(π ‖ π_ref)                          (GRPO, arXiv:2402.03300)

* ε_high > ε_low is DAPO's clip-higher (Yu et al. 2025, arXiv:2503.14476).
* ``sequence_level_ratio`` is GSPO (Zheng et al. 2025, arXiv:2507.18071): every token of a
  sequence uses s_b = exp((1/|y_b|) Σ_t log(π/π_prev)) — the geometric mean of the token ratios.
  Use it with a sequence-level aggregation (``seq-mean-token-mean``), as the paper does.
* w_t: importance-sampling correction for the engine/trainer gap (``importance.py``); 1 when off.
* KL_t: ``kl.py`` (k1/k2/k3, standard direction).
* ℓ is aggregated by ``aggregate.py`` (token-mean = token-level loss, or sequence-level).

Departures: log r is clamped to ±20 before exp (finite values and gradients for
pathological tokens; any such ratio is far outside every clip range); when ``prev_logprobs`` is
None, π_prev = stop_grad(π), i.e. r = 1 with the on-policy gradient A·∇log π.

Metrics: ``clip_fraction`` (loss tokens where the clipped branch is the active one),
``dual_clip_fraction``, ``approx_kl`` (KL(π_prev ‖ π), k3), ``ratio_mean``, IS stats,
``logprob_mismatch_mean/max`` (|log π_prev − log π_gen|), ``kl_ref``, ``loss``.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.losses._common import add_kl, finish, is_weights, log_ratio, prepare


def clipped_pg_loss(
    logprobs: Array,
    advantages: Array,
    mask: Any = None,
    *,
    prev_logprobs: Any = None,
    gen_logprobs: Any = None,
    ref_logprobs: Any = None,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    dual_clip_c: float | None = None,
    sequence_level_ratio: bool = False,
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
    """Clipped policy-gradient loss (formulas in the module docstring).

    Args:
        logprobs: ``[B, T]`` log π(y_t) of the current policy (differentiable).
        advantages: ``[B, T]`` or ``[B]`` (broadcast over tokens).
        mask: ``[B, T]`` bool loss mask (None: all tokens).
        prev_logprobs: ``[B, T]`` log π_prev (None: stop_grad(logprobs)).
        gen_logprobs: ``[B, T]`` engine logprobs (IS correction and mismatch metrics).
        ref_logprobs: ``[B, T]`` reference logprobs (needed when ``kl_beta > 0``).
        eps_low, eps_high: ε_low, ε_high; ``eps_high=None`` means ε_high = ε_low.
        dual_clip_c: c > 1 for dual clip, or None.
        sequence_level_ratio: GSPO's sequence-level ratio.
        kl_beta, kl_type: β and the KL estimator (``k1``/``k2``/``k3``).
        is_correction, is_type, is_ratio_max, is_ratio_min: importance-sampling correction.
        agg: aggregation mode (``token-mean``, ``seq-mean-token-mean``, ...).
        num_loss_tokens, num_sequences: global normalisers (None: this batch's counts).
        norm_length: the constant L of ``seq-mean-token-sum-norm``.

    Returns:
        ``(loss, metrics)``: a 0-d array of the input's type, and a dict of 0-d arrays.
    """
    if eps_high is None:
        eps_high = eps_low
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual clip constant c must be > 1, got {dual_clip_c}")
    xp = namespace(logprobs, advantages, mask, prev_logprobs, gen_logprobs, ref_logprobs)
    p = prepare(xp, logprobs, advantages, mask, prev_logprobs)
    metrics: dict[str, Array] = {}
    w = is_weights(p, gen_logprobs, is_correction, is_type, is_ratio_max, is_ratio_min, metrics)

    lr = log_ratio(p, sequence_level_ratio)
    r = xp.exp(lr)
    unclipped = r * p.adv
    clipped = xp.clip(r, 1.0 - eps_low, 1.0 + eps_high) * p.adv
    obj = xp.minimum(unclipped, clipped)
    # Outside the mask r = 1, so neither clip branch can be active there: count without masking.
    metrics["clip_fraction"] = (
        xp.to_float(xp.count(xp.stop_gradient(clipped < unclipped)), p.m) / p.n
    )
    if dual_clip_c is not None:
        neg = p.adv < 0
        floor = dual_clip_c * p.adv
        active = xp.stop_gradient(xp.logical_and(neg, obj < floor))
        metrics["dual_clip_fraction"] = xp.to_float(xp.count(active), p.m) / p.n
        obj = xp.where(neg, xp.maximum(obj, floor), obj)
    per_token = add_kl(p, -obj, ref_logprobs, kl_beta, kl_type, metrics)
    return finish(p, per_token, lr, r, w, agg, num_loss_tokens, num_sequences, norm_length, metrics)
