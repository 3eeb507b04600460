"""Checkpoints of a GRPO run: ``checkpoint_dir/step_<n>/``.

====================  =========================================================
``policy/``           the trainer's own checkpoint (model, optimizer, scheduler, RNG)
``driver.pkl``        step, collector state (data position, pending and in-flight
                      work), replay-buffer contents with their policy versions, the
                      driver's RNG states, accumulated counters
``done``              written last: a folder without it is ignored on resume
====================  =========================================================

Order matters for "nothing counted twice": the collector's state is read *before* the buffer's,
so a group that completes in between is in both — it is regenerated after a resume and refused
by the buffer as a duplicate — rather than in neither.
"""

from __future__ import annotations

import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

_STEP = re.compile(r"^step_(\d+)$")


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step_{step}"


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete ``step_<n>`` folder under ``root`` (None if there is none)."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = []
    for d in root.iterdir():
        m = _STEP.match(d.name)
        if m and (d / "done").exists():
            found.append((int(m.group(1)), d))
    return max(found)[1] if found else None


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def save_driver_state(folder: Path, state: dict[str, Any]) -> None:
    with (folder / "driver.pkl").open("wb") as f:
        pickle.dump(state, f)


def load_driver_state(folder: Path) -> dict[str, Any]:
    with (folder / "driver.pkl").open("rb") as f:
        return pickle.load(f)


def mark_done(folder: Path) -> None:
    (folder / "done").write_text("ok\n")


def prune(
    root: str | Path,
    keep: int | None,
    metric: dict[int, float] | None = None,
    higher_is_better: bool = True,
) -> None:
    """Keep the ``keep`` best checkpoints (by ``metric`` per step, else the newest) and always
    the latest."""
    if keep is None:
        return
    root = Path(root)
    steps = sorted(int(m.group(1)) for d in root.iterdir() if (m := _STEP.match(d.name)))
    if len(steps) <= keep:
        return
    latest = steps[-1]
    if metric:
        ranked = sorted(
            steps,
            key=lambda s: metric.get(s, float("-inf") if higher_is_better else float("inf")),
            reverse=higher_is_better,
        )
    else:
        ranked = sorted(steps, reverse=True)
    keep_set = set(ranked[:keep]) | {latest}
    for s in steps:
        if s not in keep_set:
            shutil.rmtree(step_dir(root, s), ignore_errors=True)
