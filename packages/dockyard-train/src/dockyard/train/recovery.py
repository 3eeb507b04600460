"""Faults of a GRPO run, and the restore points it goes back to.

* :func:`heal` — every step, and whenever generation stalls: engines found dead (reported by
  the collector, or skipped by a weight push) are restarted holding the current weights, and
  sandbox services that stopped answering are restarted (their samples came back
  ``infra_error``: masked, and reported in the log by :func:`~dockyard.train.metrics.infra_report`).
* :func:`save_run` / :func:`restore_run` — a checkpoint of the whole run (the trainer's own,
  then the driver state: collector, buffer, RNG, history; see :mod:`dockyard.train.checkpoint`)
  and loading one back; what ``--resume`` starts from.
* :func:`recover` — a trainer rank died (``TrainerLost``): every rank is restarted, engines
  caught mid-sync are replaced, and the run rewinds to its :class:`RestorePoint` (latest
  checkpoint, or its start) with a new collector and an empty buffer.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from dockyard.core.config.sections import CheckpointingConfig
from dockyard.train import checkpoint as ckpt
from dockyard.train.runtime.collector import CollectorHost
from dockyard.train.runtime.collector_config import CollectorConfig
from dockyard.train.runtime.placement import on_driver_node

if TYPE_CHECKING:
    from dockyard.train.runtime.trainer import TrainerLost


@dataclass
class RestorePoint:
    """Where a restarted trainer fleet rewinds to: a checkpoint folder this run wrote or
    resumed from, or (``folder`` None) the run's start, whose driver state is kept here (the
    restarted ranks then hold the initial weights already)."""

    folder: Path | None
    state: dict[str, Any] | None = None

    @property
    def step(self) -> int:
        return int(self.folder.name.removeprefix("step_")) if self.folder is not None else 0

    def driver_state(self) -> dict[str, Any]:
        if self.folder is not None:
            return ckpt.load_driver_state(self.folder)
        assert self.state is not None
        return self.state


def new_collector(stack: Any, config: CollectorConfig, tasks: list[dict[str, Any]]) -> Any:
    """A :class:`~dockyard.train.runtime.collector.CollectorHost` actor, built from its own
    ``config``, feeding ``stack``'s engines' samples of ``tasks`` to its buffer (not started:
    ``collector.start``)."""
    return (
        ray.remote(CollectorHost)
        .options(num_cpus=0, max_concurrency=1000, scheduling_strategy=on_driver_node())
        .remote(
            config,
            stack.engines.actors,
            stack.buffer,
            stack.sandbox_urls,
            tasks,
            getattr(stack, "judge_engines", []),
        )
    )


def heal(stack: Any, collector: Any, version: int, lost: list[int] | None = None) -> None:
    """Replace dead engines — those the collector reported and ``lost`` (found by a weight
    push) — loading the trainer's weights as ``version``; revive dead sandbox services."""
    for i in sorted({*ray.get(collector.dead_engines.remote()), *(lost or [])}):
        handle = stack.restart_engine(i, version)
        ray.get(collector.replace_engine.remote(i, handle))
    if stack.sandbox is not None:
        stack.sandbox.heal()


def driver_state(
    stack: Any, collector: Any, step: int, history: list[dict[str, float]]
) -> dict[str, Any]:
    """What the driver keeps of a run at ``step`` besides the trainer's own checkpoint."""
    coll = ray.get(collector.state.remote())  # before the buffer: see checkpoint.py
    buf = ray.get(stack.buffer.get_state.remote())
    return {
        "step": step,
        "collector": coll,
        "buffer": buf,
        "rng": ckpt.rng_state(),
        "history": history,
    }


def save_run(
    stack: Any,
    collector: Any,
    root: Path,
    step: int,
    history: list[dict[str, float]],
    checkpointing: CheckpointingConfig,
) -> RestorePoint:
    """Checkpoint the run at ``step`` under ``root`` (then prune to
    ``checkpointing.keep_top_k``); the new restore point."""
    folder = ckpt.step_dir(root, step)
    if folder.exists() and not (folder / "done").exists():
        shutil.rmtree(folder)  # a save cut short (its trainer rank died): start it afresh
    folder.mkdir(parents=True, exist_ok=True)
    stack.trainer.save_checkpoint(str(folder / "policy"), {"step": step})
    ckpt.save_driver_state(folder, driver_state(stack, collector, step, history))
    ckpt.mark_done(folder)
    c, metric = checkpointing, None
    if c.metric_name:
        metric = {i + 1: h.get(c.metric_name, float("nan")) for i, h in enumerate(history)}
    ckpt.prune(root, c.keep_top_k, metric, c.higher_is_better)
    return RestorePoint(folder)  # (pruning always keeps the latest)


def restore_run(
    stack: Any, collector: Any, point: RestorePoint
) -> tuple[list[dict[str, float]], int]:
    """Load ``point`` into the trainer (a checkpoint's policy), the collector, the buffer and
    the driver's RNG, and give the engines its weights; returns (history, step)."""
    state = point.driver_state()
    if point.folder is not None:
        stack.trainer.load_checkpoint(str(point.folder / "policy"))
    ray.get(collector.load_state.remote(state["collector"]))
    ray.get(stack.buffer.set_state.remote(state["buffer"]))
    ckpt.set_rng_state(state["rng"])
    step = int(state["step"])
    heal(stack, collector, step, stack.push_weights(step)[1])
    ray.get(collector.set_version.remote(step))
    return list(state["history"]), step


def recover(
    stack: Any,
    collector: Any,
    config: CollectorConfig,
    tasks: list[dict[str, Any]],
    point: RestorePoint,
    lost: TrainerLost,
) -> tuple[Any, list[dict[str, float]], int]:
    """After a trainer rank died (``lost``): restart the whole trainer
    fleet, replace engines whose weight sync it broke, and rewind the run to ``point`` with a
    new collector and an empty buffer (work of the abandoned steps must not leak into the
    redone ones), built from the collector's own ``config``. Returns (collector, history, step)."""
    with contextlib.suppress(Exception):
        ray.get(collector.stop.remote(), timeout=30)
    with contextlib.suppress(Exception):
        ray.kill(collector)
    stack.trainer.restart()
    for i in sorted(set(lost.engines)):  # mid-sync when the fleet died: their weights are partial
        ray.get(stack.engines.restart(i).ready.remote())
    stack.new_buffer()
    collector = new_collector(stack, config, tasks)
    history, step = restore_run(stack, collector, point)
    ray.get(collector.start.remote())
    return collector, history, step
