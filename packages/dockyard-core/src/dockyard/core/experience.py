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
class AllowedTokens:
    """The token sets a grammar allowed at each position of a sequence (grammar-constrained
    decoding: the sampled distribution is the policy's, renormalised over the allowed set).

    Attributes:
        table: ``[M, W] int32`` distinct allowed-token bitmasks, xgrammar's layout: bit ``j`` of
            word ``w`` set means token ``32 w + j`` is allowed; ``W = ceil(V / 32)``.
        rows: ``[..., T] int32``, the table row that constrained each token (aligned with the
            tokens: row ``rows[t]`` describes the choice of token ``t``); -1 where nothing did.
    """

    table: np.ndarray
    rows: np.ndarray

    @staticmethod
    def from_bitmasks(bitmasks: np.ndarray) -> AllowedTokens:
        """``[L, W] int32`` one bitmask per token -> the distinct rows and their indices."""
        bitmasks = np.asarray(bitmasks, dtype=np.int32)
        if bitmasks.shape[0] == 0:
            return AllowedTokens(bitmasks.reshape(0, bitmasks.shape[-1]), np.zeros(0, np.int32))
        table, rows = np.unique(bitmasks, axis=0, return_inverse=True)
        return AllowedTokens(table.astype(np.int32), rows.reshape(-1).astype(np.int32))

    @staticmethod
    def concat(parts: list[tuple[int, AllowedTokens | None]]) -> AllowedTokens | None:
        """One sequence's allowed tokens from consecutive pieces ``(length, part)``: a piece
        with ``None`` was not constrained (its rows are -1). None when no piece has any."""
        have = [p for _, p in parts if p is not None]
        if not have:
            return None
        width = have[0].table.shape[1]
        tables, rows, offset = [], [], 0
        for n, p in parts:
            if p is None:
                rows.append(np.full(n, -1, np.int32))
                continue
            if p.table.shape[1] != width or len(p.rows) != n:
                raise ValueError(
                    f"allowed-token piece of {len(p.rows)} rows x {p.table.shape[1]} words "
                    f"does not fit {n} tokens x {width} words"
                )
            tables.append(p.table)
            rows.append(np.where(p.rows >= 0, p.rows + offset, -1).astype(np.int32))
            offset += p.table.shape[0]
        return AllowedTokens(np.concatenate(tables).astype(np.int32), np.concatenate(rows))

    def take(self, index: Any) -> AllowedTokens:
        """The sequences ``index`` of a batch's sets (``rows[index]``; the table is shared)."""
        return AllowedTokens(self.table, self.rows[index])

    def allows(self, token_ids: np.ndarray) -> np.ndarray:
        """``[..., T] bool``: whether each token is in its allowed set (True where unconstrained)."""
        ids = np.asarray(token_ids, dtype=np.int64)
        r = np.maximum(self.rows, 0)
        words = self.table[r, ids // 32] if self.table.size else np.zeros(ids.shape, np.int32)
        bit = (words.astype(np.int64) >> (ids % 32)) & 1
        return (self.rows < 0) | (bit == 1)


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
        allowed: the grammar's allowed tokens per position (``rows [T]``) where decoding was
            constrained (tool calls under their schemas); None otherwise.
        images: a vision-language model's images (``[H, W, 3] uint8``), one per image
            placeholder run in ``token_ids``, in order (each turn keeps its screenshot); the
            trainer computes their pixel values with the model's image processor, as the engine
            did. Empty for text.
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
    allowed: AllowedTokens | None = None
    images: list[np.ndarray] = field(default_factory=list)

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
        allowed: the grammar's allowed tokens (``rows [B, T]``) where generation was
            constrained: the trainer's logprobs are then taken over the allowed set, as the
            engine sampled. None: unconstrained.
        images: each row's images (``[H, W, 3] uint8``, :attr:`Trajectory.images`); None for a
            text batch.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    loss_mask: np.ndarray
    advantages: np.ndarray
    gen_logprobs: np.ndarray
    prev_logprobs: np.ndarray | None = None
    ref_logprobs: np.ndarray | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    allowed: AllowedTokens | None = None
    images: list[list[np.ndarray]] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.input_ids.shape[0]), int(self.input_ids.shape[1]))

    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum())
