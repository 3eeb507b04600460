"""Shared set-up for whole-stack tests: a warm-started tiny model and quickstart configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def sft_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart's tiny model after a short SFT warm start (shared by the session; a
    test's own pytest process gets the outer session's through ``DOCKYARD_TEST_SFT_MODEL``)."""
    if given := os.environ.get("DOCKYARD_TEST_SFT_MODEL"):
        return Path(given)
    from dockyard.train.cli.quickstart import warm_start
    from dockyard.train.cli.quickstart_common import build_model

    out = tmp_path_factory.mktemp("sft")
    return warm_start(build_model(0), out / "model", seed=0, steps=60, progress=False)


def make_quickstart_cfg(sft_model: Path, root: Path, *overrides: str):
    """A validated quickstart ``MasterConfig`` on ``sft_model`` writing under ``root``."""
    from dockyard.core.config import apply_overrides, config_from_dict
    from dockyard.train.cli.quickstart import quickstart_config

    d = quickstart_config(
        sft_model,
        grpo={"max_num_steps": 3, "val_at_start": False, "max_val_samples": 8},
        logger={"log_dir": str(root / "logs")},
        checkpointing={"checkpoint_dir": str(root / "ckpt"), "save_period": 2},
    )
    return config_from_dict(apply_overrides(d, list(overrides)))


@pytest.fixture(scope="module")
def module_quickstart_cfg(sft_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """``make(*overrides)`` for a module-scoped fixture: each call writes under a new folder."""

    def make(*overrides: str):
        return make_quickstart_cfg(sft_model, tmp_path_factory.mktemp("run"), *overrides)

    return make


@pytest.fixture
def quickstart_cfg(sft_model: Path, tmp_path: Path):
    """``make(*overrides)`` -> a validated quickstart ``MasterConfig`` writing under tmp_path."""

    def make(*overrides: str):
        return make_quickstart_cfg(sft_model, tmp_path, *overrides)

    return make


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray per test module (the stacks inside are built and torn down per test)."""
    from dockyard.train.runtime.cluster import init_ray, shutdown_ray

    init_ray(None)
    yield
    shutdown_ray()
