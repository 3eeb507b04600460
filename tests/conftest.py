"""Suite-wide pytest set-up: `gpu` tests skip (with the reason) where CUDA is absent; groups of
trajectories built by hand (``group_factory``, ``traj_factory``) for the buffer and driver tests;
each test leaves the process's thread settings as it found them (``_thread_settings``)."""

from __future__ import annotations

import functools
import os
import sys

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


# what a runtime host sets in the process it runs in (dockyard.train.runtime.hosts._set_threads)
_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "DOCKYARD_OMP_WAIT_POLICY")


@pytest.fixture(autouse=True)
def _thread_settings():
    """Restore torch's intra-op pool and the thread variables after each test: a test that
    builds an engine or policy host in this process sets them for the process (a host's job),
    and a later fixture's training then ran on another thread count — a different model (one
    thread against two: 0.16 apart in a weight after 250 SFT steps of the judged drivers' start
    policy, 0.13 against 0.53 of its greedy answers correct)."""
    env = {k: os.environ.get(k) for k in _THREAD_ENV}
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    yield
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads or _default_threads())


def _default_threads() -> int:
    """torch's own default intra-op pool: the cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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
