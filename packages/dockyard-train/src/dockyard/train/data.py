"""The task loader: a seeded, resumable walk over the training tasks, one epoch at a time; and
the data-file readers (:func:`read_jsonl`; :func:`read_records`: JSONL or Parquet, each record
with the place it came from, for errors that name the line).

Every task handed out gets a run-unique id ``"<epoch>:<index>"`` (the group's ``uid``), so the
replay buffer can refuse a group seen twice. The loader's position (``state_dict``) is saved in
checkpoints; after a resume the walk continues where it stopped, in the same order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq


class TaskLoader:
    """Tasks in a seeded order per epoch.

    Args:
        tasks: JSON-like task dicts.
        seed: ``grpo.seed``; epoch ``e`` is shuffled with ``seed + e``.
        shuffle: ``data.shuffle``.
        max_epochs: stop (``StopIteration``) after this many passes.
    """

    def __init__(
        self, tasks: list[dict[str, Any]], seed: int = 0, shuffle: bool = True, max_epochs: int = 1
    ) -> None:
        if not tasks:
            raise ValueError(
                "the training data is empty: check data.dataset_name / data.train_path"
            )
        self.tasks = tasks
        self.seed = seed
        self.shuffle = shuffle
        self.max_epochs = max_epochs
        self.epoch = 0
        self.index = 0
        self._order = self._make_order(0)

    def _make_order(self, epoch: int) -> np.ndarray:
        n = len(self.tasks)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng(self.seed + epoch).permutation(n)

    def __iter__(self) -> TaskLoader:
        return self

    def __next__(self) -> tuple[str, dict[str, Any]]:
        """``(uid, task)``."""
        if self.index >= len(self.tasks):
            self.epoch += 1
            self.index = 0
            self._order = self._make_order(self.epoch)
        if self.epoch >= self.max_epochs:
            raise StopIteration
        uid = f"{self.epoch}:{self.index}"
        task = self.tasks[int(self._order[self.index])]
        self.index += 1
        return uid, task

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self._make_order(self.epoch)


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Tasks from a JSONL file (one JSON object per line; a ``.parquet`` file: one a row);
    errors name the line (:func:`read_records`)."""
    return [record for _, record in read_records(path)]


PARQUET_SUFFIXES = (".parquet", ".pq")


def read_records(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """``(where, record)`` for each JSON object of a JSONL file or each row of a Parquet file
    (by the suffix: ``.parquet`` / ``.pq``); ``where`` is ``FILE:LINE`` (JSONL) or ``FILE:row
    N`` (Parquet, 1-based), what an error about the record names. Nested Parquet columns (a
    list of message structs) come back as lists of dicts."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file {p} does not exist (data.train_path / data.val_path)")
    if p.suffix.lower() in PARQUET_SUFFIXES:
        rows = pq.read_table(p).to_pylist()
        return [(f"{p}:row {i}", row) for i, row in enumerate(rows, 1)]
    out = []
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{i}: not a JSON object: {e}") from e
        if not isinstance(record, dict):
            raise ValueError(f"{p}:{i}: not a JSON object but a {type(record).__name__}")
        out.append((f"{p}:{i}", record))
    return out
