"""The replay buffer: age bound, whole groups, each group once, checkpointable."""

from __future__ import annotations

import asyncio

import pytest

from dockyard.core.buffer import AsyncReplayBuffer, ReplayBuffer


def test_age_zero_hands_out_only_current_version(group_factory) -> None:
    buf = ReplayBuffer(max_age=0)
    buf.put(group_factory("a", [1, 0], version=0))
    buf.put(group_factory("b", [1, 0], version=1))
    assert buf.sample(2, step=1) is None  # "a" is one step old: evicted at step 1
    assert buf.stats()["evicted_stale"] == 1
    got = buf.sample(1, step=1)
    assert got is not None
    assert [g.prompt_id for g in got] == ["b"]


def test_age_bound_counts_the_oldest_token(group_factory) -> None:
    buf = ReplayBuffer(max_age=1)
    g = group_factory("mixed", [1.0])
    g.trajectories[0].policy_versions[-2:] = 2  # an in-flight update mid-sample: versions 0 and 2
    buf.put(g)
    assert buf.num_ready(step=1) == 1
    assert buf.num_ready(step=2) == 0  # oldest token is version 0: age 2 > 1


def test_duplicates_are_refused_and_fifo_order(group_factory) -> None:
    buf = ReplayBuffer(max_age=3)
    assert buf.put(group_factory("x", [1, 0]))
    assert not buf.put(group_factory("x", [0, 0]))
    assert buf.put(group_factory("y", [1, 0]))
    out = buf.sample(2, step=0)
    assert out is not None
    assert [g.prompt_id for g in out] == ["x", "y"]
    assert buf.stats()["rejected_duplicate"] == 1
    assert len(buf) == 0


def test_state_round_trip(group_factory) -> None:
    buf = ReplayBuffer(max_age=1)
    buf.put(group_factory("p", [1, 0], version=3))
    state = buf.state_dict()
    other = ReplayBuffer(max_age=1)
    other.load_state_dict(state)
    assert not other.put(group_factory("p", [0, 0]))  # seen ids survive
    got = other.sample(1, step=4)
    assert got is not None
    assert got[0].min_version == 3


def test_negative_age_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="max_trajectory_age_steps"):
        ReplayBuffer(max_age=-1)


def test_async_wait_sample_blocks_until_enough(group_factory) -> None:
    async def main():
        buf = AsyncReplayBuffer(max_age=0)
        waiter = asyncio.create_task(buf.wait_sample(2, step=0, timeout_s=5))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        buf.put(group_factory("a", [1, 0]))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        buf.put(group_factory("b", [1, 0]))
        got = await waiter
        none = await buf.wait_sample(1, step=0, timeout_s=0.05)
        return got, none

    got, none = asyncio.run(main())
    assert [g.prompt_id for g in got] == ["a", "b"]
    assert none is None
