"""REINFORCE++ advantages (Hu 2025, "REINFORCE++", arXiv:2501.03262).

a_i = r_i (``group_baseline=False``) or a_i = r_i − mean_{j in group} r_j (``True``, the
"REINFORCE++-baseline" variant), then whitened over every valid *token* of the batch: each
sequence's a_i counts once per loss token,

  μ = Σ_i n_i a_i / Σ_i n_i,  σ² = Σ_i n_i (a_i − μ)² / Σ_i n_i,  A_i = (a_i − μ) / (σ + eps),

with n_i the number of loss tokens of sample i (1 per sample when ``token_counts`` is None).

Departure: the paper folds a per-token KL penalty into the reward; dockyard keeps KL in the
loss only (``loss_fn.reference_policy_kl_penalty``), so KL is never counted twice.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.advantages._group import group_mean, valid_float, whiten


def reinforce_pp_advantages(
    rewards: Array,
    valid: Any = None,
    *,
    group_baseline: bool = True,
    token_counts: Any = None,
    eps: float = 1e-6,
) -> Array:
    """REINFORCE++ advantages.

    Args:
        rewards: ``[P, G]`` scalar rewards.
        valid: ``[P, G]`` bool (None: all valid).
        group_baseline: subtract the group mean before whitening.
        token_counts: ``[P, G]`` loss tokens per sample (the whitening weights); None: 1 each.
        eps: added to σ.

    Returns:
        ``[P, G]`` advantages (0 for invalid samples).
    """
    xp = namespace(rewards, valid, token_counts)
    v = valid_float(xp, rewards, valid)
    a = rewards - group_mean(xp, rewards, v) if group_baseline else rewards
    w = v if token_counts is None else v * xp.to_float(token_counts, rewards)
    return whiten(xp, a, w, eps)
