"""Checkpoints with orbax: parameters and optimizer state as global arrays, resharding-safe.

Layout of a checkpoint folder::

    state/               orbax (OCDBT) tree {"params", "opt_state"}: global shapes, so a
                         checkpoint saved on one mesh restores on another (or on one device)
    trainer_state.json   step, the model folder, extra_state (JSON)

The schedule's position is the optimizer's update count (inside ``opt_state``). The worker holds
no random state (its models have no dropout), so there is no RNG to save; ``seed`` only sets the
initialisation of models built from a config. A checkpoint is written beside its destination
and renamed into place, so an interrupted save never leaves a half-written folder behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"extra_state value of type {type(x).__name__} is not JSON-serialisable")


def save_checkpoint(
    path: str | Path,
    params: Any,
    opt_state: Any,
    step: int,
    extra_state: dict[str, Any] | None = None,
    model_name: str | None = None,
) -> None:
    """Write ``params`` and ``opt_state`` (orbax) and the trainer state (JSON) to ``path``."""
    final = Path(path).absolute()
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    meta = {"step": int(step), "model_name": model_name, "extra_state": extra_state or {}}
    (tmp / "trainer_state.json").write_text(json.dumps(meta, indent=2, default=_jsonable))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp / "state", {"params": params, "opt_state": opt_state})
    checkpointer.wait_until_finished()
    checkpointer.close()
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)


def load_checkpoint(
    path: str | Path, params_like: Any, opt_state_like: Any
) -> tuple[Any, Any, int, dict[str, Any]]:
    """``(params, opt_state, step, extra_state)`` restored with the shapes, dtypes and
    *shardings* of ``params_like`` / ``opt_state_like`` (the current worker's arrays)."""
    root = Path(path).absolute()
    meta_file = root / "trainer_state.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{meta_file} not found: {root} is not a dockyard.jax checkpoint")
    meta = json.loads(meta_file.read_text())
    target = jax.tree.map(
        ocp.utils.to_shape_dtype_struct, {"params": params_like, "opt_state": opt_state_like}
    )
    checkpointer = ocp.StandardCheckpointer()
    restored = checkpointer.restore(root / "state", target)
    checkpointer.close()
    return restored["params"], restored["opt_state"], int(meta["step"]), meta["extra_state"]
