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


def _rows(tmp_path: Path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]


def test_the_validation_before_training_is_step_0_and_survives_resume_and_rewind(
    tmp_path: Path,
) -> None:
    """The start-of-run validation is logged as step 0 (JSONL and TensorBoard) without moving
    the progress bar; a rewind to the start and a resume keep it; a fresh run in the same
    folder replaces everything an earlier run left there, in TensorBoard too."""
    pytest.importorskip("tensorboard")
    from dockyard.train.logging import MetricsLogger

    log = MetricsLogger(_cfg(tmp_path), 4, progress=True)
    log.log(0, {"val/pass_rate": 0.25})
    assert log._bar is not None
    assert log._bar.n == 0
    for step in (1, 2):
        log.log(step, {"m": float(step)})
    assert log._bar.n == 2
    log.rewind(0)  # a trainer rank lost with no checkpoint yet: back to the start
    for step in (1, 2, 3):
        log.log(step, {"m": 10.0 * step})
    log.close()
    log = MetricsLogger(_cfg(tmp_path), 4, initial_step=2, progress=False)  # resumed at 2
    log.log(3, {"m": 300.0})
    log.log(4, {"m": 400.0, "val/pass_rate": 0.75})
    log.close()
    tb = tmp_path / "tensorboard"
    assert [(r["step"], r.get("m"), r.get("val/pass_rate")) for r in _rows(tmp_path)] == [
        (0, None, 0.25),
        (1, 10.0, None),
        (2, 20.0, None),
        (3, 300.0, None),
        (4, 400.0, 0.75),
    ]
    assert _tb(tb, "val/pass_rate") == [(0, 0.25), (4, 0.75)]
    assert _tb(tb, "m") == [(1, 10.0), (2, 20.0), (3, 300.0), (4, 400.0)]

    log = MetricsLogger(_cfg(tmp_path), 4, progress=False)  # a fresh run, same folder
    log.log(0, {"val/pass_rate": 0.5})
    log.log(1, {"m": -1.0})
    log.close()
    assert [r["step"] for r in _rows(tmp_path)] == [0, 1]
    assert _tb(tb, "val/pass_rate") == [(0, 0.5)]
    assert _tb(tb, "m") == [(1, -1.0)]


def test_a_metrics_line_every_print_period_steps(tmp_path, capsys) -> None:
    from dockyard.core.config import config_from_dict
    from dockyard.train.logging import MetricsLogger

    cfg = config_from_dict({"logger": {"log_dir": str(tmp_path), "print_period": 2}}).logger
    log = MetricsLogger(cfg, total_steps=4, progress=False)
    for step in range(5):
        log.log(step, {"reward/mean": 0.1 * step, "train/loss": 1.5})
    log.close()
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step ")]
    assert lines == ["step 2: reward 0.2  loss 1.5", "step 4: reward 0.4  loss 1.5"]
