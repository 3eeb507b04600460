"""Reward components and shaping shared by the environments.

Every environment reports *named* components (summed into the scalar reward by
``Trajectory.reward``), so a run's logs show where reward came from:

=========================  ============================================================
``reward/correct``         math / multiple choice: 1 if the answer verifies, else 0
``reward/tests``           code / swe / terminal: 1 if resolved (``binary``) or the
                           fraction of tests passed (``fraction``)
``reward/format``          a small bonus (``format_weight``) for a well-formed answer
``reward/invalid_action``  ``-invalid_action_penalty`` × invalid tool calls (multi-turn)
``reward/overlong``        DAPO soft overlong punishment (when ``overlong`` is set)
=========================  ============================================================

DAPO overlong shaping (Yu et al. 2025, "DAPO", eq. 13), with L_max the generation budget and
L_cache the soft interval::

    R_length(L) = 0                              if L <= L_max - L_cache
                = ((L_max - L_cache) - L) / L_cache  if L_max - L_cache < L <= L_max
                = -1                             if L > L_max

An ``infra_error`` (sandbox down, service timeout) is not a reward: the environment returns
``StepResult(infra_error=True, rewards={})`` and the trainer masks the sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dockyard.core.interfaces.environment import StepResult
from dockyard.core.rl.shaping import overlong_penalty as core_overlong_penalty

CORRECT = "reward/correct"
TESTS = "reward/tests"
FORMAT = "reward/format"
INVALID_ACTION = "reward/invalid_action"
OVERLONG = "reward/overlong"


def overlong_penalty(length: int, max_len: int, cache_len: int) -> float:
    """DAPO's R_length(L) (see the module docstring); 0 ≥ result ≥ -1.

    The formula lives once, in core (``dockyard.core.rl.overlong_penalty``); this is the
    per-sample scalar form environments use.
    """
    if cache_len <= 0 or max_len <= 0 or cache_len > max_len:
        raise ValueError(
            f"overlong: need 0 < cache_tokens <= max_response_tokens, got {cache_len=} {max_len=}"
        )
    shaped = core_overlong_penalty(
        np.asarray([length]), max_response_length=max_len, buffer_length=cache_len
    )
    return float(np.asarray(shaped).reshape(-1)[0])


def approx_token_count(text: str) -> int:
    """A tokenizer-free estimate (≈ 4 characters per token); pass a real counter when you have one."""
    return (len(text) + 3) // 4


@dataclass
class RewardConfig:
    """How an environment turns a verdict into reward components.

    Attributes:
        mode: ``binary`` (1 only when resolved) or ``fraction`` (share of tests passed).
        format_weight: bonus added as ``reward/format`` for a well-formed answer (0 disables).
        invalid_action_penalty: subtracted per invalid tool call (``reward/invalid_action``).
        max_response_tokens / overlong_cache_tokens: DAPO L_max and L_cache; None disables.
    """

    mode: str = "binary"
    format_weight: float = 0.0
    invalid_action_penalty: float = 0.1
    max_response_tokens: int | None = None
    overlong_cache_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("binary", "fraction"):
            raise ValueError(f"reward mode must be 'binary' or 'fraction', got {self.mode!r}")
        if (self.max_response_tokens is None) != (self.overlong_cache_tokens is None):
            raise ValueError("set both max_response_tokens and overlong_cache_tokens, or neither")


def shape(
    result: StepResult,
    response: str,
    config: RewardConfig,
    count_tokens: Callable[[str], int] = approx_token_count,
) -> StepResult:
    """Add the configured shaping (overlong) to ``result`` in place; infra errors untouched."""
    if result.infra_error:
        result.rewards = {}
        return result
    if config.max_response_tokens is not None and config.overlong_cache_tokens is not None:
        n = count_tokens(response)
        result.rewards[OVERLONG] = overlong_penalty(
            n, config.max_response_tokens, config.overlong_cache_tokens
        )
        result.metadata["response_tokens"] = n
    return result


def infra_failure(reason: str, **metadata: object) -> StepResult:
    """The result for a sample whose reward could not be computed: masked, not scored 0."""
    return StepResult(
        rewards={}, done=True, infra_error=True, metadata={"infra_reason": reason, **metadata}
    )
