"""The data plane (real Ray): the buffer actor stages a step's groups, builds the batch into the
object store, and the driver gets references and a summary of a few numbers, never the arrays;
whatever resolves the reference gets the batch the driver would have built."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dockyard.train.batching import BatchOptions, build_batch, trainer_view


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    from dockyard.train.runtime.cluster import init_ray

    init_ray(None)
    yield ray
    ray.shutdown()


def _groups(make_group, n: int, resp_len: int = 2000) -> list:
    """``n`` groups of 4; every other one all-equal (uninformative for dynamic sampling)."""
    return [
        make_group(f"g{i}", [1.0, 0.0, 1.0, 0.0] if i % 2 == 0 else [1.0] * 4, resp_len=resp_len)
        for i in range(n)
    ]


def test_the_driver_gets_references_and_the_ranks_the_batch(ray_session, group_factory) -> None:
    ray = ray_session
    from dockyard.train.runtime.dataplane import remote_buffer

    buffer = remote_buffer(max_age=0)
    groups = _groups(group_factory, 6)
    ray.get(buffer.put_many.remote(groups))  # one call: in order (an async actor's calls run
    # concurrently, so separate puts may land in any order)
    # dynamic sampling: 4 drawn, 2 informative staged; 2 more drawn, 1 kept -> 3 staged
    assert ray.get(buffer.draw.remote(4, 0, 5.0, True, True)) == (4, 2)
    assert ray.get(buffer.draw.remote(2, 0, 5.0, True, False)) == (2, 3)
    assert ray.get(buffer.draw.remote(1, 0, 0.1, True, False)) is None  # none left: nothing
    answer = ray.get(buffer.build.remote(2, 0, 0, BatchOptions(), True))
    (batch_ref, groups_ref), summary = answer

    assert [g.prompt_id for g in ray.get(groups_ref)] == ["g0", "g2"]  # the first two staged
    expected = trainer_view(build_batch([groups[0], groups[2]], BatchOptions()))
    assert summary["rows"] == 8
    assert summary["tokens"] == int(expected.attention_mask.sum())
    assert summary["metrics"]["groups"] == 2.0
    assert summary["masked"] is None
    # what reached the driver: two references and a few numbers, against ~200 KB of arrays
    assert summary["bytes"] > 150_000
    assert len(pickle.dumps(summary)) < 2_000
    assert all(isinstance(r, ray.ObjectRef) for r in (batch_ref, groups_ref))

    @ray.remote(num_cpus=0)
    def rank(batch):  # a top-level reference: Ray resolves it in the receiving process
        return {k: getattr(batch, k) for k in ("input_ids", "loss_mask", "advantages")}

    got = ray.get(rank.remote(batch_ref))
    for k, v in got.items():
        np.testing.assert_array_equal(v, getattr(expected, k))

    # the staging is emptied by the build; a build with nothing staged is an error, not a
    # silent empty step
    with pytest.raises(ray.exceptions.RayTaskError, match="no groups were drawn"):
        ray.get(buffer.build.remote(2, 0, 0, BatchOptions(), False))
    ray.kill(buffer)


def test_a_fresh_draw_and_a_restore_drop_what_an_abandoned_step_staged(
    ray_session, group_factory
) -> None:
    ray = ray_session
    from dockyard.train.runtime.dataplane import remote_buffer

    buffer = remote_buffer(max_age=0)
    ray.get([buffer.put.remote(g) for g in _groups(group_factory, 4, resp_len=3)])
    assert ray.get(buffer.draw.remote(2, 0, 5.0, False, True)) == (2, 2)
    state = ray.get(buffer.get_state.remote())
    ray.get(buffer.set_state.remote(state))  # a rewind restores the buffer: nothing staged
    assert ray.get(buffer.draw.remote(1, 0, 5.0, False, False)) == (1, 1)
    assert ray.get(buffer.draw.remote(1, 0, 5.0, False, True)) == (1, 1)  # fresh: restaged
    _, summary = ray.get(buffer.build.remote(5, 0, 0, BatchOptions(), False))
    assert summary["rows"] == 4  # one group of 4
    ray.kill(buffer)
