"""Experience types: the data contract between the inference, environment and trainer fleets.

A *trajectory* is one sampled completion (or one multi-turn episode); a *group* is the G
trajectories sampled for one prompt (advantages are computed per group, and the replay buffer
stores and hands out whole groups only); a *batch* is what the trainer consumes: right-padded
numpy arrays, zero-copy through Ray's object store. Each backend converts at its own edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Trajectory:
    """One sampled completion or multi-turn episode.

    Attributes:
        prompt_id: identifies the prompt (and so the group) this trajectory belongs to.
        token_ids: ``[T] int64`` prompt + response tokens (all turns for multi-turn).
        policy_mask: ``[T] bool``, True where the policy produced the token (loss is taken there).
        gen_logprobs: ``[T] float32``, the generating engine's logprob of each token, 0 where
            ``policy_mask`` is False.
        policy_versions: ``[T] int32``, the policy version that produced each token (-1 where
            ``policy_mask`` is False). An in-flight weight update shows as a change of version
            within one trajectory.
        rewards: named reward components, e.g. ``{"reward/tests": 1.0, "reward/format": 0.1}``.
        finish_reason: ``"stop"``, ``"length"`` or ``"abort"``.
        infra_error: True when the score could not be computed (sandbox down, engine crashed):
            the trainer masks such a trajectory out instead of scoring it 0.
        metadata: environment metadata (verdict, timings, ``tests_tampered``...).
    """

    prompt_id: str
    token_ids: np.ndarray
    policy_mask: np.ndarray
    gen_logprobs: np.ndarray
    policy_versions: np.ndarray
    rewards: dict[str, float] = field(default_factory=dict)
    finish_reason: str = "stop"
    infra_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def reward(self) -> float:
        """The scalar reward: the sum of the named components."""
        return float(sum(self.rewards.values()))

    @property
    def min_version(self) -> int:
        """The oldest policy version that produced a token of this trajectory."""
        v = self.policy_versions[self.policy_mask]
        return int(v.min()) if v.size else -1

    def __len__(self) -> int:
        return int(self.token_ids.shape[0])


@dataclass
class Group:
    """The G trajectories sampled for one prompt."""

    prompt_id: str
    trajectories: list[Trajectory]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def min_version(self) -> int:
        return min(t.min_version for t in self.trajectories)

    @property
    def rewards(self) -> np.ndarray:
        """``[G] float64`` scalar rewards."""
        return np.array([t.reward for t in self.trajectories], dtype=np.float64)


@dataclass
class Batch:
    """A right-padded training batch of B sequences of at most T tokens (numpy arrays).

    Attributes:
        input_ids: ``[B, T] int64``, padded with 0.
        attention_mask: ``[B, T] bool``, True for real tokens.
        loss_mask: ``[B, T] bool``, True where the policy produced the token and the sample is
            not masked out (infra errors, overlong filtering).
        advantages: ``[B, T] float32``, 0 where ``loss_mask`` is False.
        gen_logprobs: ``[B, T] float32``, generation-time logprobs, 0 where ``loss_mask`` is False.
        prev_logprobs: ``[B, T] float32`` or None, trainer logprobs before the update.
        ref_logprobs: ``[B, T] float32`` or None, reference-policy logprobs.
        extras: further per-sequence or per-token arrays keyed by name (``[B]`` or ``[B, T]``).
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    loss_mask: np.ndarray
    advantages: np.ndarray
    gen_logprobs: np.ndarray
    prev_logprobs: np.ndarray | None = None
    ref_logprobs: np.ndarray | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.input_ids.shape[0]), int(self.input_ids.shape[1]))

    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())
