"""GDPO advantages for several named reward components (Liu et al. 2026, "GDPO: Group
reward-Decoupled Normalization Policy Optimization for Multi-reward RL", arXiv:2601.05242).

Summing components before GRPO normalisation lets one component with a large spread drown the
others; GDPO normalises each component within its group first:

  A_i^(k) = (r_i^(k) − mean_j r_j^(k)) / (σ^(k) + eps)       (per group, per component k)
  S_i = Σ_k A_i^(k),   A_i = (S_i − μ_batch) / (σ_batch + eps) (over all valid samples)

A component that is constant within a group contributes 0 for that group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.advantages._group import valid_float, whiten
from dockyard.core.rl.advantages.grpo import grpo_advantages


def gdpo_advantages(
    rewards: Array | Mapping[str, Array],
    valid: Any = None,
    *,
    eps: float = 1e-6,
) -> Array:
    """GDPO advantages.

    Args:
        rewards: ``[P, G, K]`` K named components stacked on the last axis, or a mapping
            ``name -> [P, G]``.
        valid: ``[P, G]`` bool (None: all valid).
        eps: added to both standard deviations.

    Returns:
        ``[P, G]`` advantages (0 for invalid samples).
    """
    if isinstance(rewards, Mapping):
        comps = list(rewards.values())
        if not comps:
            raise ValueError("gdpo_advantages: no reward components given")
    else:
        k = rewards.shape[-1]
        comps = [rewards[..., i] for i in range(k)]
    xp = namespace(*comps, valid)
    total = comps[0] * 0.0
    for r in comps:
        total = total + grpo_advantages(r, valid, eps=eps)
    return whiten(xp, total, valid_float(xp, comps[0], valid), eps)
