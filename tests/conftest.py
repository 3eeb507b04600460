"""Suite-wide pytest set-up: `gpu` tests skip (with the reason) where CUDA is absent; groups of
trajectories built by hand (``group_factory``, ``traj_factory``) for the buffer and driver tests."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from dockyard.core.experience import Group, Trajectory


@functools.cache
def _cuda_available() -> tuple[bool, str]:
    try:
        import torch  # lazy: most of the suite must not pay for torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU on this machine (run scripts/gpu_checks.sh on a GPU host)"
    return True, ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    ok, reason = _cuda_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"gpu: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


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
