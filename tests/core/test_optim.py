"""The optimizer / schedule schema both trainers share, and the schedule's f(t) in float64."""

from __future__ import annotations

import numpy as np
import pytest

from dockyard.core.config import config_from_dict
from dockyard.core.config.optim import OptimizerConfig, SchedulerConfig, lr_factor


def test_warmup_then_constant() -> None:
    cfg = SchedulerConfig(name="constant", warmup_steps=4)
    assert [float(lr_factor(t, cfg)) for t in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert float(lr_factor(0, SchedulerConfig())) == 1.0  # no warm-up: the full rate at once


@pytest.mark.parametrize("name", ["linear", "cosine"])
def test_decay_from_the_end_of_warmup_to_the_floor(name: str) -> None:
    cfg = SchedulerConfig(name=name, warmup_steps=2, total_steps=12, min_lr_ratio=0.1)
    assert float(lr_factor(0, cfg)) == pytest.approx(0.5)
    assert float(lr_factor(2, cfg)) == pytest.approx(1.0)
    assert float(lr_factor(7, cfg)) == pytest.approx(0.1 + 0.9 * 0.5)  # p = ½: both halfway
    assert float(lr_factor(12, cfg)) == pytest.approx(0.1)
    assert float(lr_factor(50, cfg)) == pytest.approx(0.1)
    quarter = {"linear": 0.1 + 0.9 * 0.75, "cosine": 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi / 4))}
    assert float(lr_factor(4.5, cfg)) == pytest.approx(quarter[name])


def test_a_decay_needs_its_end() -> None:
    with pytest.raises(ValueError, match=r"scheduler\.total_steps"):
        lr_factor(3, SchedulerConfig(name="cosine"))


def test_one_schema_for_the_run_config() -> None:
    cfg = config_from_dict(
        {"policy": {"optimizer": {"name": "sgd"}, "scheduler": {"name": "linear"}}}
    )
    assert isinstance(cfg.policy.optimizer, OptimizerConfig)
    assert cfg.policy.scheduler.total_steps is None  # the trainers take grpo.max_num_steps
    assert hash(cfg.policy.optimizer) == hash(OptimizerConfig(name="sgd"))  # frozen: a cache key
