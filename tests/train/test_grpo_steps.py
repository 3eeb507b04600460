"""The GRPO step on a trainer rank (:class:`PolicyHost`'s held batch): one optimizer step per
``policy.train_global_batch_size`` sequences, on consecutive slices (whole groups), π_prev and
π_ref filled into the batch the rank holds, the rollout log's values kept on rank 0."""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import pytest

from dockyard.core.experience import Batch
from dockyard.train.batching import row_slices
from dockyard.train.runtime.hosts import THREAD_VARS, PolicyHost


def _batch(b: int = 8, t: int = 5) -> Batch:
    rng = np.random.default_rng(0)
    return Batch(
        input_ids=np.arange(b * t).reshape(b, t),
        attention_mask=np.ones((b, t), bool),
        loss_mask=np.arange(b * t).reshape(b, t) % 2 == 0,
        advantages=rng.normal(size=(b, t)).astype(np.float32),
        gen_logprobs=rng.normal(size=(b, t)).astype(np.float32),
        extras={"uid": np.arange(b)},
    )


class _Worker:
    """Records what it is handed; its logprobs are the token ids, its entropies their halves."""

    def __init__(self, config: dict, rank: int = 0, world_size: int = 1) -> None:
        self.seen: list[Batch] = []
        self.calls: list[str] = []

    def get_logprobs(self, batch: Batch) -> np.ndarray:
        self.calls.append("logprobs")
        return batch.input_ids.astype(np.float32)

    def get_reference_logprobs(self, batch: Batch) -> np.ndarray:
        self.calls.append("reference")
        return -batch.input_ids.astype(np.float32)

    def get_token_entropy(self, batch: Batch) -> np.ndarray:
        self.calls.append("entropy")
        return batch.input_ids.astype(np.float32) / 2

    def train_step(self, batch: Batch, loss_fn: object) -> dict[str, float]:
        self.seen.append(batch)
        return {"loss": float(batch.input_ids[0, 0]), "grad_norm": float(len(self.seen))}


@pytest.fixture
def host(monkeypatch):
    """A rank built by the real constructor from a factory name (its thread settings undone)."""
    module = types.ModuleType("_grpo_steps_worker")
    module.Worker = _Worker  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for var in (*THREAD_VARS, "OMP_WAIT_POLICY"):
        if var in os.environ:
            monkeypatch.setenv(var, os.environ[var])
        else:
            monkeypatch.delenv(var, raising=False)
    return lambda rank=0: PolicyHost(f"{module.__name__}:Worker", {}, rank=rank, world_size=1)


def test_one_step_trains_the_whole_held_batch_once_and_lets_it_go(host) -> None:
    h, batch = host(), _batch()
    h.hold(batch)
    out = h.train_held(None, 1)
    assert len(h.worker.seen) == 1
    np.testing.assert_array_equal(h.worker.seen[0].input_ids, batch.input_ids)
    assert h.worker.seen[0].prev_logprobs is None  # one step: the loss's own forward
    assert out == {"loss": 0.0, "grad_norm": 1.0}
    with pytest.raises(RuntimeError, match="no batch is held"):
        h.train_held(None, 1)


def test_several_steps_take_consecutive_slices_with_the_filled_logprobs(host) -> None:
    h, batch = host(), _batch()
    h.hold(batch)
    h.fill_logprobs("prev")
    h.fill_logprobs("ref")
    out = h.train_held(None, 2)
    assert [len(b.input_ids) for b in h.worker.seen] == [4, 4]
    second = h.worker.seen[1]
    np.testing.assert_array_equal(second.input_ids, batch.input_ids[4:])
    np.testing.assert_array_equal(second.prev_logprobs, batch.input_ids[4:].astype(np.float32))
    np.testing.assert_array_equal(second.ref_logprobs, -batch.input_ids[4:].astype(np.float32))
    assert out["loss"] == (0.0 + 20.0) / 2
    assert out["grad_norm"] == 1.5
    assert out["optimizer_steps"] == 2.0
    h.hold(batch)
    with pytest.raises(ValueError, match="'prev' or 'ref'"):
        h.fill_logprobs("old")


def test_rollout_values_reuse_pi_prev_and_stay_on_rank_0(host) -> None:
    h, batch = host(), _batch()
    h.hold(batch)
    values, mean = h.rollout_values(logprobs=True, entropy=False)
    assert mean is None
    np.testing.assert_array_equal(values["trainer_logprobs"], batch.input_ids)
    assert values["entropy"] is None
    h.fill_logprobs("prev")
    h.worker.calls.clear()
    values, mean = h.rollout_values(logprobs=True, entropy=True)
    assert h.worker.calls == ["entropy"]  # π_prev's logprobs reused, no second pass
    assert mean == pytest.approx(float(batch.input_ids[batch.loss_mask].mean() / 2))
    other = host(rank=1)
    other.hold(batch)
    values, mean = other.rollout_values(logprobs=True, entropy=True)
    assert values is None  # computed (the forward is collective), not returned
    assert mean is not None


def test_row_slices_keep_every_field_aligned() -> None:
    batch = _batch(b=6)
    parts = row_slices(batch, 3)
    assert [p.extras["uid"].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]
    assert all(p.ref_logprobs is None for p in parts)
    np.testing.assert_array_equal(np.concatenate([p.advantages for p in parts]), batch.advantages)
