"""On-policy distillation as an advantage (``adv_estimator: opd``), from several teachers.

For a sample y ~ π_θ of prompt x, response token t, N frozen teachers T_k with weights w_k
(w̃_k = w_k / Σ_j w_j over the teachers that score token t), and the environment reward's
GRPO group advantage A^r_i of the sample (:mod:`.grpo`):

    A_t = Σ_k w̃_k · log π_Tk(y_t | x, y_<t) − log π_θ(y_t | x, y_<t)  +  λ · A^r_i

The first two terms are the per-token reward of on-policy distillation: the negative
single-sample estimate of the reverse KL(π_θ ‖ π_T), with discount 0 (each token's advantage is
its own reward) — Thinking Machines Lab, "On-Policy Distillation" (K. Lu et al., 2025,
thinkingmachines.ai/blog/on-policy-distillation), after Agarwal et al. 2024 (GKD,
arXiv:2306.13649) and Gu et al. 2024 (MiniLLM, arXiv:2306.08543); the Qwen3 report (arXiv:
2505.09388) uses on-policy distillation for its small models. With several teachers,
Σ_k w̃_k log π_Tk is the log of their weighted geometric mean (a product of experts,
unnormalised), so A_t estimates −Σ_k w̃_k KL(π_θ ‖ π_Tk) per token. λ (``reward_weight``) adds the
task reward's group advantage, as MiMo and prime-rl combine a distillation signal with the
verifiable reward; λ = 0 is pure distillation.

Departures, on purpose:

* log π_θ is the trainer's own log-probability of the token (stop-gradient, the weights being
  trained), not the sampler's: the blog takes the sampler's; the trainer's keeps the
  engine/trainer numerics mismatch out of the advantage (the policy loss's importance-sampling
  correction handles that, as in GRPO).
* A token no teacher scores (a cross-tokenizer teacher's unaligned position,
  :mod:`dockyard.core.rl.cross_tokenizer`) gets only λ · A^r_i.

:func:`opd_advantages` is the estimator registered as ``opd``: the ``[P, G]`` sequence part
λ · A^r (what the batch builder computes from rewards); :func:`opd_token_advantages` adds the
per-token teacher part in the trainer, where the teachers' log-probabilities are
(:class:`dockyard.core.rl.losses.opd.OPDPolicyLoss`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.advantages.grpo import grpo_advantages


def opd_advantages(
    rewards: Array,
    valid: Any = None,
    *,
    reward_weight: float = 0.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Array:
    """The sequence part λ · A^r ``[P, G]``: ``reward_weight`` λ times GRPO's advantage of
    ``rewards [P, G]`` (σ-normalised unless ``normalize_std`` is false); 0 when λ = 0."""
    adv = grpo_advantages(rewards, valid, normalize_std=normalize_std, eps=eps)
    return adv * float(reward_weight)


def opd_token_advantages(
    student_logprobs: Array,
    teacher_logprobs: Array,
    weights: Sequence[float],
    sequence_advantages: Any = None,
    *,
    teacher_mask: Any = None,
    mask: Any = None,
) -> Array:
    """Per-token OPD advantages (module docstring).

    Args:
        student_logprobs: ``[B, T]`` log π_θ(y_t) of the sampled tokens (no gradient flows).
        teacher_logprobs: ``[N, B, T]`` log π_Tk(y_t) of the same tokens, one row per teacher.
        weights: the N teacher weights w_k (> 0; normalised over the teachers scoring a token).
        sequence_advantages: ``[B]`` or ``[B, T]`` λ · A^r (None: 0).
        teacher_mask: ``[N, B, T]`` bool, where teacher k scores token t (None: everywhere).
        mask: ``[B, T]`` loss mask; the result is 0 outside it (None: no masking).

    Returns:
        ``[B, T]`` advantages, the array type of ``student_logprobs``.
    """
    xp = namespace(student_logprobs, teacher_logprobs)
    s = xp.stop_gradient(xp.promote_half(student_logprobs))
    t = xp.stop_gradient(xp.promote_half(teacher_logprobs))
    n = t.shape[0]
    if len(weights) != n:
        raise ValueError(f"{n} teachers' logprobs but {len(weights)} weights")
    if any(w <= 0 for w in weights):
        raise ValueError(f"teacher weights must be > 0, got {list(weights)}")
    w = xp.asarray(list(weights), s)
    w = xp.expand_dims(xp.expand_dims(w, -1), -1)  # [N, 1, 1]
    on = s * 0.0 + 1.0 if teacher_mask is None else xp.to_float(teacher_mask, s)
    on = on * (t * 0.0 + 1.0)  # [N, B, T]
    wsum = xp.sum(w * on, axis=0)  # [B, T]
    scored = wsum > 0
    mix = xp.sum(w * on * xp.where(on > 0, t, 0.0), axis=0) / xp.maximum(wsum, 1e-30)
    adv = xp.where(scored, mix - s, 0.0)
    if sequence_advantages is not None:
        seq = xp.to_float(sequence_advantages, s)
        adv = adv + (xp.expand_dims(seq, -1) if seq.ndim == 1 else seq)
    if mask is not None:
        adv = xp.where(xp.to_float(mask, s) > 0, adv, 0.0)
    return adv
