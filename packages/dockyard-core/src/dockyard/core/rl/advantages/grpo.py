"""GRPO, Dr.GRPO and RLOO advantages: a per-group baseline, optionally std-normalised.

For a group of G rewards r_1..r_G of one prompt (only valid samples count):

* GRPO (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300):
  A_i = (r_i − b_i) / (σ + eps) with b_i = mean_j r_j and σ the group's sample std (N−1);
  ``leave_one_out=True`` uses b_i = mean_{j≠i} r_j; ``normalize_std=False`` drops the division.
* Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training", arXiv:2503.20783):
  A_i = r_i − mean_j r_j  (no std division; pair it with a length-unbiased loss aggregation).
* RLOO (Ahmadian et al. 2024, arXiv:2402.14740): A_i = r_i − mean_{j≠i} r_j
  = G/(G−1) · (r_i − mean_j r_j).

Departure from the papers, on purpose: a group with fewer than 2 valid samples or with all
rewards equal gives A = 0 exactly (no signal; no rounding noise amplified by 1/eps).
"""

from __future__ import annotations

from typing import Any

from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.advantages._group import (
    group_count,
    group_is_degenerate,
    group_mean,
    group_std,
    valid_float,
)


def grpo_advantages(
    rewards: Array,
    valid: Any = None,
    *,
    leave_one_out: bool = False,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Array:
    """GRPO advantages.

    Args:
        rewards: ``[P, G]`` scalar rewards, P groups of G samples.
        valid: ``[P, G]`` bool (None: all valid); invalid samples get 0 and do not enter the
            group statistics.
        leave_one_out: baseline b_i = mean over the *other* valid samples of the group.
        normalize_std: divide by the group's std σ + eps (GRPO); False gives Dr.GRPO.
        eps: added to σ.

    Returns:
        ``[P, G]`` advantages, same array type and float dtype as ``rewards``.
    """
    xp = namespace(rewards, valid)
    v = valid_float(xp, rewards, valid)
    n = group_count(xp, v)
    mean = group_mean(xp, rewards, v)
    baseline = (mean * n - rewards) / xp.maximum(n - 1.0, 1.0) if leave_one_out else mean
    adv = rewards - baseline
    if normalize_std:
        adv = adv / (group_std(xp, rewards, v) + eps)
    dead = group_is_degenerate(xp, rewards, v)
    return xp.where(xp.logical_and(v > 0, xp.logical_not(dead)), adv, 0.0)


def dr_grpo_advantages(rewards: Array, valid: Any = None) -> Array:
    """Dr.GRPO advantages ``[P, G]``: r_i − mean_j r_j (no std normalisation)."""
    return grpo_advantages(rewards, valid, normalize_std=False)


def rloo_advantages(rewards: Array, valid: Any = None) -> Array:
    """RLOO advantages ``[P, G]``: r_i − mean_{j≠i} r_j."""
    return grpo_advantages(rewards, valid, leave_one_out=True, normalize_std=False)
