"""From groups to a training batch: reward shaping, masking, filters, advantages.

For P groups of G trajectories (``i`` indexes a trajectory, ``t`` a token):

    r_i      = Σ_components reward_i  [+ DAPO overlong penalty R_len(|y_i|) when shaping is on]
    valid_i  = not infra_error_i                     (infra errors are masked, never scored 0)
    A        = compute_advantages(r [P, G], valid, estimator)          (dockyard.core.rl)
    loss_mask_it = policy_mask_it ∧ valid_i [∧ finish_reason_i ≠ "length" with overlong filtering]
    advantages_it = A_i · loss_mask_it

Dynamic sampling (DAPO) is a filter on whole groups, :func:`informative_groups`: the driver
keeps only groups whose valid rewards differ and draws more until it has P of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from dockyard.core.experience import AllowedTokens, Batch, Group, Trajectory
from dockyard.core.rl import compute_advantages, dynamic_sampling_keep, overlong_penalty

OVERLONG = "reward/overlong"
SUCCESS_COMPONENTS = ("reward/tests", "reward/correct")


@dataclass(frozen=True)
class BatchOptions:
    """What the driver applies when building a batch (from ``MasterConfig.grpo``:
    :func:`dockyard.train.algorithms.configs.batch_options`)."""

    estimator: str = "grpo"
    estimator_options: dict[str, Any] | None = None
    advantage_clip: float | None = None
    overlong_filtering: bool = False
    reward_shaping: bool = False
    max_response_length: int = 256
    overlong_buffer_length: int = 128
    overlong_penalty: float = 1.0


def response_length(t: Trajectory) -> int:
    """Tokens the policy produced (all turns)."""
    return int(np.count_nonzero(t.policy_mask))


def passed(t: Trajectory) -> bool:
    """Task success: a success component (tests / correct) reached 1, else reward > 0."""
    hits = [t.rewards[k] for k in SUCCESS_COMPONENTS if k in t.rewards]
    return bool(max(hits) >= 1.0) if hits else t.reward > 0


def shape_rewards(groups: list[Group], opts: BatchOptions) -> None:
    """Add DAPO's soft overlong penalty as the ``reward/overlong`` component (in place).

    Applied once per trajectory (a group that is shaped again keeps its penalty)."""
    if not opts.reward_shaping:
        return
    for g in groups:
        todo = [t for t in g.trajectories if not t.infra_error and OVERLONG not in t.rewards]
        if not todo:
            continue
        lengths = np.array([response_length(t) for t in todo], dtype=np.float64)
        pen = overlong_penalty(
            lengths,
            max_response_length=opts.max_response_length,
            buffer_length=opts.overlong_buffer_length,
            penalty=opts.overlong_penalty,
        )
        for t, p in zip(todo, np.asarray(pen), strict=True):
            t.rewards[OVERLONG] = float(p)


def reward_matrix(groups: list[Group]) -> tuple[np.ndarray, np.ndarray]:
    """``(rewards [P, G] float64, valid [P, G] bool)``; groups must share G."""
    sizes = {len(g.trajectories) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"groups have different sizes {sorted(sizes)}: G must be constant")
    r = np.array([[t.reward for t in g.trajectories] for g in groups], dtype=np.float64)
    v = np.array([[not t.infra_error for t in g.trajectories] for g in groups], dtype=bool)
    return r, v


def component_matrices(groups: list[Group]) -> dict[str, np.ndarray]:
    """``{component: [P, G] float64}`` for GDPO (0 where a trajectory lacks the component)."""
    names = sorted({k for g in groups for t in g.trajectories for k in t.rewards})
    return {
        k: np.array([[t.rewards.get(k, 0.0) for t in g.trajectories] for g in groups])
        for k in names
    }


def informative_groups(groups: list[Group]) -> np.ndarray:
    """``[P]`` bool: groups whose valid rewards are not all equal (DAPO dynamic sampling)."""
    if not groups:
        return np.zeros(0, dtype=bool)
    r, v = reward_matrix(groups)
    return np.asarray(dynamic_sampling_keep(r, v), dtype=bool)


def build_batch(groups: list[Group], opts: BatchOptions, pad_id: int = 0) -> Batch:
    """Right-padded :class:`Batch` of all trajectories of ``groups`` (group-major order).

    ``extras``: ``reward [B]``, ``valid [B]``, ``truncated [B]``, ``min_version [B]``.
    """
    shape_rewards(groups, opts)
    r, valid = reward_matrix(groups)
    scores = component_matrices(groups) if opts.estimator == "gdpo" else r
    adv = np.asarray(
        compute_advantages(
            scores,
            valid,
            estimator=opts.estimator,
            clip=opts.advantage_clip,
            **(opts.estimator_options or {}),
        ),
        dtype=np.float32,
    ).reshape(-1)
    trajs = [t for g in groups for t in g.trajectories]
    B, T = len(trajs), max(len(t) for t in trajs)
    input_ids = np.full((B, T), pad_id, dtype=np.int64)
    attention = np.zeros((B, T), dtype=bool)
    loss_mask = np.zeros((B, T), dtype=bool)
    gen_lp = np.zeros((B, T), dtype=np.float32)
    truncated = np.array([t.finish_reason == "length" for t in trajs], dtype=bool)
    keep = valid.reshape(-1).copy()
    if opts.overlong_filtering:
        keep &= ~truncated
    for i, t in enumerate(trajs):
        n = len(t)
        input_ids[i, :n] = t.token_ids
        attention[i, :n] = True
        if keep[i]:
            loss_mask[i, :n] = t.policy_mask
        gen_lp[i, :n] = t.gen_logprobs
    gen_lp *= loss_mask
    return Batch(
        input_ids=input_ids,
        attention_mask=attention,
        loss_mask=loss_mask,
        advantages=(adv[:, None] * loss_mask).astype(np.float32),
        gen_logprobs=gen_lp,
        extras={
            "reward": r.reshape(-1).astype(np.float32),
            "valid": valid.reshape(-1),
            "truncated": truncated,
            "min_version": np.array([t.min_version for t in trajs], dtype=np.int64),
        },
        allowed=batch_allowed(trajs, T),
        images=[list(t.images) for t in trajs] if any(t.images for t in trajs) else None,
    )


def batch_allowed(trajs: list[Trajectory], width: int) -> AllowedTokens | None:
    """The trajectories' grammar masks as one table with ``rows [B, width]`` (-1 where a
    token was not constrained, and on padding); None when no trajectory was constrained."""
    if all(t.allowed is None for t in trajs):
        return None
    flat = AllowedTokens.concat(
        [(width, _padded(t.allowed, len(t), width)) if t.allowed is not None else (width, None)
         for t in trajs]
    )  # fmt: skip
    assert flat is not None
    return AllowedTokens(flat.table, flat.rows.reshape(len(trajs), width))


def _padded(allowed: AllowedTokens, n: int, width: int) -> AllowedTokens:
    if len(allowed.rows) != n:
        raise ValueError(f"a trajectory of {n} tokens has {len(allowed.rows)} grammar rows")
    rows = np.concatenate([allowed.rows, np.full(width - n, -1, np.int32)])
    return AllowedTokens(allowed.table, rows)


def trainer_view(batch: Batch) -> Batch:
    """The batch without the bookkeeping extras (what the trainer and the loss see)."""
    return Batch(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        loss_mask=batch.loss_mask,
        advantages=batch.advantages,
        gen_logprobs=batch.gen_logprobs,
        prev_logprobs=batch.prev_logprobs,
        ref_logprobs=batch.ref_logprobs,
        allowed=batch.allowed,
        images=batch.images,
    )


def row_slices(batch: Batch, n: int) -> list[Batch]:
    """``batch`` cut into ``n`` consecutive slices of rows (equal when ``n`` divides it)."""

    def part(rows: np.ndarray) -> Batch:
        arrays = {
            f.name: None if (a := getattr(batch, f.name)) is None else a[rows]
            for f in dataclasses.fields(batch)
            if f.name not in ("extras", "allowed", "images")
        }
        allowed = None if batch.allowed is None else batch.allowed.take(rows)
        images = None if batch.images is None else [batch.images[i] for i in rows]
        extras = {k: v[rows] for k, v in batch.extras.items()}
        return dataclasses.replace(batch, **arrays, extras=extras, allowed=allowed, images=images)

    return [part(rows) for rows in np.array_split(np.arange(len(batch.input_ids)), n)]
