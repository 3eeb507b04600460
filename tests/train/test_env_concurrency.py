"""``env.<name>.max_concurrency`` reaches the environment the trainer builds: the collector's
environment scores at most that many responses at once."""

from __future__ import annotations

from dockyard.core.config import config_from_dict
from dockyard.envs.concurrency import ConcurrencyLimited
from dockyard.train.environments import build_environment


def test_build_environment_bounds_scoring_by_max_concurrency() -> None:
    cfg = config_from_dict({"env": {"m": {"type": "math", "max_concurrency": 2}}})
    env = build_environment("m", cfg.env["m"])
    assert isinstance(env, ConcurrencyLimited)
    assert env.max_concurrency == 2
    assert env.name == "math"
    default = config_from_dict({"env": {"m": {"type": "math"}}}).env["m"]
    assert build_environment("m", default).max_concurrency == 16
