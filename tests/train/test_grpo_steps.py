"""The GRPO driver's optimizer steps per batch: one per ``policy.train_global_batch_size``
sequences, on consecutive slices (whole groups), and no π_prev pass when there is one."""

from __future__ import annotations

import numpy as np

from dockyard.core.experience import Batch
from dockyard.train.algorithms.grpo import _row_slices, _train


def _batch(b: int = 8, t: int = 5) -> Batch:
    rng = np.random.default_rng(0)
    return Batch(
        input_ids=np.arange(b * t).reshape(b, t),
        attention_mask=np.ones((b, t), bool),
        loss_mask=np.ones((b, t), bool),
        advantages=rng.normal(size=(b, t)).astype(np.float32),
        gen_logprobs=rng.normal(size=(b, t)).astype(np.float32),
        prev_logprobs=rng.normal(size=(b, t)).astype(np.float32),
        extras={"uid": np.arange(b)},
    )


class _Trainer:
    def __init__(self) -> None:
        self.seen: list[Batch] = []

    def train_step(self, batch: Batch, loss_fn: object) -> dict[str, float]:
        self.seen.append(batch)
        return {"loss": float(batch.input_ids[0, 0]), "grad_norm": float(len(self.seen))}


def test_one_step_trains_the_whole_batch_once() -> None:
    trainer, batch = _Trainer(), _batch()
    out = _train(trainer, batch, None, 1)
    assert len(trainer.seen) == 1
    np.testing.assert_array_equal(trainer.seen[0].input_ids, batch.input_ids)
    assert out == {"loss": 0.0, "grad_norm": 1.0}


def test_several_steps_take_consecutive_slices_and_average_their_metrics() -> None:
    trainer, batch = _Trainer(), _batch()
    out = _train(trainer, batch, None, 2)
    assert [len(b.input_ids) for b in trainer.seen] == [4, 4]
    np.testing.assert_array_equal(trainer.seen[1].input_ids, batch.input_ids[4:])
    np.testing.assert_array_equal(trainer.seen[1].prev_logprobs, batch.prev_logprobs[4:])
    assert out["loss"] == (0.0 + 20.0) / 2
    assert out["grad_norm"] == 1.5
    assert out["optimizer_steps"] == 2.0


def test_row_slices_keep_every_field_aligned() -> None:
    batch = _batch(b=6)
    parts = _row_slices(batch, 3)
    assert [p.extras["uid"].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]
    assert all(p.ref_logprobs is None for p in parts)
    np.testing.assert_array_equal(np.concatenate([p.advantages for p in parts]), batch.advantages)
