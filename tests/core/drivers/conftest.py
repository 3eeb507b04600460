"""Helpers for the driver tests: groups of trajectories built by hand."""

from __future__ import annotations

import numpy as np
import pytest

from dockyard.core.experience import Group, Trajectory


def make_traj(
    uid: str,
    reward: float,
    *,
    version: int = 0,
    prompt_len: int = 3,
    resp_len: int = 4,
    finish: str = "stop",
    infra: bool = False,
    versions: list[int] | None = None,
) -> Trajectory:
    T = prompt_len + resp_len
    mask = np.zeros(T, dtype=bool)
    mask[prompt_len:] = True
    v = np.full(T, -1, dtype=np.int32)
    v[prompt_len:] = versions if versions is not None else version
    return Trajectory(
        prompt_id=uid,
        token_ids=np.arange(1, T + 1, dtype=np.int64),
        policy_mask=mask,
        gen_logprobs=np.where(mask, -0.5, 0.0).astype(np.float32),
        policy_versions=v,
        rewards={} if infra else {"reward/tests": reward},
        finish_reason=finish,
        infra_error=infra,
    )


def make_group(uid: str, rewards: list[float], version: int = 0, **kw) -> Group:
    return Group(
        prompt_id=uid,
        trajectories=[make_traj(uid, r, version=version, **kw) for r in rewards],
        metadata={"uid": uid},
    )


@pytest.fixture
def group_factory():
    return make_group


@pytest.fixture
def traj_factory():
    return make_traj
