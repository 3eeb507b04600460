"""Advantage estimators, by name (the config's ``grpo.adv_estimator.name``).

======================  ==================================================================
name                    A_i for sample i of a group (details in each module)
======================  ==================================================================
``grpo``                (r_i − mean_j r_j) / (σ_group + eps); ``leave_one_out``, ``normalize_std``
``dr_grpo``             r_i − mean_j r_j
``rloo``                r_i − mean_{j≠i} r_j
``reinforce_plus_plus`` (r_i [− group mean]) whitened over the batch's valid tokens
``gdpo``                per-component GRPO advantages, summed, whitened over the batch
``opd``                 λ·A_grpo here; the trainer adds Σ_k w̃_k log π_Tk(y_t) − log π_θ(y_t)
                        per token (on-policy distillation from several teachers, :mod:`.opd`)
======================  ==================================================================

Every estimator takes ``rewards: [P, G]`` (``[P, G, K]`` for gdpo) and ``valid: [P, G]`` and
returns ``[P, G]`` advantages of the same array type; single-sample and equal-reward groups
give 0. :func:`compute_advantages` adds optional clipping to ``[-clip, clip]``.

Adding an estimator: write ``my_est.py`` with a function
``my_advantages(rewards, valid=None, *, option=...) -> [P, G]`` whose docstring states the
formula and cites the paper, register it below with ``ADVANTAGE_ESTIMATORS.register("my_est")``,
add its config class to ``dockyard.core.config.schema`` (``AdvEstimatorConfig`` union), and add
an independent float64 reference test in ``tests/core/test_advantages.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dockyard.core.registry import Registry
from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.advantages.gdpo import gdpo_advantages
from dockyard.core.rl.advantages.grpo import dr_grpo_advantages, grpo_advantages, rloo_advantages
from dockyard.core.rl.advantages.opd import opd_advantages, opd_token_advantages
from dockyard.core.rl.advantages.reinforce_pp import reinforce_pp_advantages

ADVANTAGE_ESTIMATORS: Registry[Callable[..., Any]] = Registry(
    "advantage estimator", "dockyard.advantages"
)
ADVANTAGE_ESTIMATORS.register("grpo")(grpo_advantages)
ADVANTAGE_ESTIMATORS.register("dr_grpo")(dr_grpo_advantages)
ADVANTAGE_ESTIMATORS.register("rloo")(rloo_advantages)
ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus")(reinforce_pp_advantages)
ADVANTAGE_ESTIMATORS.register("gdpo")(gdpo_advantages)
ADVANTAGE_ESTIMATORS.register("opd")(opd_advantages)


def compute_advantages(
    rewards: Any,
    valid: Any = None,
    *,
    estimator: str = "grpo",
    clip: float | None = None,
    **options: Any,
) -> Array:
    """Advantages for a batch of groups.

    Args:
        rewards: ``[P, G]`` rewards (``[P, G, K]`` or ``{name: [P, G]}`` for ``gdpo``).
        valid: ``[P, G]`` bool mask of samples that count (None: all).
        estimator: a name in :data:`ADVANTAGE_ESTIMATORS`.
        clip: if set, clip advantages to ``[-clip, clip]``.
        **options: the estimator's own keyword options (``leave_one_out``, ``normalize_std``,
            ``group_baseline``, ``token_counts``, ``eps``...). An option the estimator does not
            take is an error, never silently ignored.

    Returns:
        ``[P, G]`` advantages, same array type as ``rewards``.
    """
    fn = ADVANTAGE_ESTIMATORS.get(estimator)
    try:
        adv = fn(rewards, valid, **options)
    except TypeError as e:
        if "unexpected keyword" in str(e):
            raise TypeError(f"advantage estimator {estimator!r}: {e}") from None
        raise
    if clip is not None:
        if clip <= 0:
            raise ValueError(f"advantage clip must be > 0, got {clip}")
        adv = namespace(adv).clip(adv, -clip, clip)
    return adv


__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "compute_advantages",
    "dr_grpo_advantages",
    "gdpo_advantages",
    "grpo_advantages",
    "opd_advantages",
    "opd_token_advantages",
    "reinforce_pp_advantages",
    "rloo_advantages",
]
