"""DAPO's reward shaping and sampling filters, as pure functions (Yu et al. 2025, "DAPO",
arXiv:2503.14476, §3.2 and §3.4).

* Soft overlong punishment, with L_max the maximum response length and L_cache the buffer:

      R_len(|y|) = 0                                  if |y| ≤ L_max − L_cache
                 = ((L_max − L_cache) − |y|) / L_cache if L_max − L_cache < |y| ≤ L_max
                 = −1                                 if |y| > L_max

  dockyard multiplies R_len by a penalty factor (NeMo-RL's ``overlong_buffer_penalty``) and
  adds it to the task reward.
* Overlong filtering: truncated samples (finish reason ``length``) are masked out of the loss.
* Dynamic sampling: keep only groups whose rewards are not all equal (0 < accuracy < 1 for
  binary rewards); the driver oversamples until it has enough informative groups.
"""

from __future__ import annotations

from typing import Any

from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.advantages._group import group_is_degenerate, valid_float


def overlong_penalty(
    lengths: Array, *, max_response_length: int, buffer_length: int, penalty: float = 1.0
) -> Array:
    """``penalty · R_len(|y|)`` for response lengths ``[N]`` (≤ 0; float, same array type)."""
    if buffer_length <= 0 or buffer_length > max_response_length:
        raise ValueError(
            f"overlong buffer_length must be in (0, max_response_length={max_response_length}], "
            f"got {buffer_length}"
        )
    xp = namespace(lengths)
    n = xp.to_float(lengths, lengths)
    start = float(max_response_length - buffer_length)
    soft = (start - n) / float(buffer_length)
    r = xp.where(n <= start, 0.0, xp.where(n <= max_response_length, soft, -1.0))
    return penalty * r


def overlong_filter(valid: Array, truncated: Array) -> Array:
    """``[N]`` bool: ``valid`` and not truncated (DAPO overlong filtering)."""
    xp = namespace(valid, truncated)
    return xp.logical_and(valid, xp.logical_not(truncated))


def dynamic_sampling_keep(rewards: Array, valid: Any = None) -> Array:
    """``[P]`` bool: the groups of ``rewards [P, G]`` with ≥ 2 valid samples whose rewards are
    not all equal (DAPO dynamic sampling)."""
    xp = namespace(rewards, valid)
    dead = group_is_degenerate(xp, rewards, valid_float(xp, rewards, valid))
    return xp.logical_not(dead)[:, 0]
