"""The metrics sinks on resume and rewind: what a redone step leaves in JSONL and TensorBoard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _cfg(tmp_path: Path):
    from dockyard.core.config import config_from_dict

    return config_from_dict(
        {"logger": {"log_dir": str(tmp_path), "tensorboard_enabled": True}}
    ).logger


def _tb(folder: Path, tag: str) -> list[tuple[int, float]]:
    """The scalars TensorBoard shows for ``tag`` (it applies the writers' purge steps)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _jsonl(tmp_path: Path) -> list[tuple[int, float]]:
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["m"]) for r in rows]


def test_rewind_drops_the_abandoned_steps_everywhere(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from dockyard.train.logging import MetricsLogger

    log = MetricsLogger(_cfg(tmp_path), 4, progress=False)
    for step in (1, 2, 3, 4):
        log.log(step, {"m": float(step)})
    log.rewind(2)  # steps 3 and 4 are redone
    for step in (3, 4):
        log.log(step, {"m": 10.0 * step})
    log.close()
    assert _jsonl(tmp_path) == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
    assert _tb(tmp_path / "tensorboard", "m") == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]


def test_resume_keeps_the_checkpointed_step(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from dockyard.train.logging import MetricsLogger

    log = MetricsLogger(_cfg(tmp_path), 4, progress=False)
    for step in (1, 2, 3):
        log.log(step, {"m": float(step)})
    log.close()
    log = MetricsLogger(_cfg(tmp_path), 4, initial_step=2, progress=False)  # resumed at 2
    for step in (3, 4):
        log.log(step, {"m": 10.0 * step})
    log.close()
    assert _jsonl(tmp_path) == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
    assert _tb(tmp_path / "tensorboard", "m") == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
