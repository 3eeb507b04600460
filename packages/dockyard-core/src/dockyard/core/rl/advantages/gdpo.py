"""GDPO advantages for several named reward components (Liu et al. 2026, "GDPO: Group
reward-Decoupled Normalization Policy Optimization for Multi-reward RL", arXiv:2601.05242).

Summing components before GRPO normalisation lets one component with a large spread drown the
others; GDPO normalises each component within its group first:

  A_i^(k) = (r_i^(k) − mean_j r_j^(k)) / (σ^(k) + eps)       (per group, per component k)
  S_i = Σ_k A_i^(k),   A_i = (S_i − μ_batch) / (σ_batch + eps) (over all valid samples)

A component that is constant within a group contributes 0 for that group. ``components``
(``grpo.adv_estimator.reward_components``) restricts the sum over k to the named ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.advantages._group import valid_float, whiten
from dockyard.core.rl.advantages.grpo import grpo_advantages


def gdpo_advantages(
    rewards: Array | Mapping[str, Array],
    valid: Any = None,
    *,
    components: Sequence[str] | None = None,
    eps: float = 1e-6,
) -> Array:
    """GDPO advantages.

    Args:
        rewards: ``[P, G, K]`` K components stacked on the last axis, or a mapping
            ``name -> [P, G]``.
        valid: ``[P, G]`` bool (None: all valid).
        components: names of the components to use (None: all); needs the mapping form.
        eps: added to both standard deviations.

    Returns:
        ``[P, G]`` advantages (0 for invalid samples).
    """
    if isinstance(rewards, Mapping):
        comps = list(_select(rewards, components).values())
        if not comps:
            raise ValueError("gdpo_advantages: no reward components given")
    elif components is not None:
        raise ValueError("gdpo_advantages: components are named, so rewards must be a mapping")
    else:
        k = rewards.shape[-1]
        comps = [rewards[..., i] for i in range(k)]
    xp = namespace(*comps, valid)
    total = comps[0] * 0.0
    for r in comps:
        total = total + grpo_advantages(r, valid, eps=eps)
    return whiten(xp, total, valid_float(xp, comps[0], valid), eps)


def _select(rewards: Mapping[str, Array], components: Sequence[str] | None) -> dict[str, Array]:
    if components is None:
        return dict(rewards)
    missing = [c for c in components if c not in rewards]
    if missing:
        raise KeyError(
            f"grpo.adv_estimator.reward_components names {', '.join(map(repr, missing))}, "
            f"which the rewards do not have (they have: {', '.join(sorted(rewards))})"
        )
    return {c: rewards[c] for c in components}
