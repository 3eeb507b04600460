"""The torch trainer's settings from a dockyard config: what it cannot honour is refused by key."""

from __future__ import annotations

from pathlib import Path

import pytest

from dockyard.core.config import load_config
from dockyard.core.drivers.stack import torch_worker_config

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "configs" / "grpo_quickstart.yaml"


def test_maps_the_policy_keys() -> None:
    cfg = load_config(QUICKSTART, ["policy.dtensor_cfg.tensor_parallel_size=2", "grpo.seed=7"])
    w = torch_worker_config(cfg)
    assert w["tensor_parallel_size"] == 2
    assert w["seed"] == 7
    assert w["optimizer"]["lr"] == cfg.policy.optimizer.lr


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("policy.optimizer.name=sgd", "policy.optimizer.name"),
        ("policy.precision=float16", "policy.precision"),
        ("policy.scheduler.name=linear", "policy.scheduler.name"),
    ],
)
def test_refuses_what_it_cannot_honour(override: str, key: str) -> None:
    cfg = load_config(QUICKSTART, [override])
    with pytest.raises(ValueError, match=key):
        torch_worker_config(cfg)
