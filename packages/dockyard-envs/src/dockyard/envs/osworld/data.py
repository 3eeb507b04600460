"""The OSWorld datasets: the shipped tasks (or a local OSWorld folder), and the toy family.

``osworld``: ``tasks_dir`` (OSWorld's ``evaluation_examples`` layout) or the shipped tasks;
tasks this environment cannot run are refused at load and listed in the error if *none* remain.
``osworld_toy``: generated toy tasks (toy.py); ``train``, ``val`` and ``demo`` use different
seeds, so the held-out split is tasks the policy never saw and GRPO trains on other tasks than
the warm start's demonstrations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dockyard.envs.osworld.tasks import load_tasks
from dockyard.envs.osworld.toy import DATA, toy_tasks


def osworld_dataset(split: str, tasks_dir: str | None = None) -> list[dict[str, Any]]:
    """The tasks under ``tasks_dir`` (default: the shipped ones), the same for every split."""
    tasks, refused = load_tasks(Path(tasks_dir) if tasks_dir else DATA)
    if not tasks:
        why = "; ".join(f"{r.task_id}: {r.reason}" for r in refused[:5])
        raise ValueError(f"no runnable OSWorld task under {tasks_dir or DATA} ({why})")
    return [t.as_dict() for t in tasks]


def osworld_toy_dataset(
    split: str, n: int = 64, seed: int = 0, kinds: tuple[str, ...] = ("click", "type")
) -> list[dict[str, Any]]:
    """``n`` toy tasks of ``split``, each split its own seeds: ``train`` (GRPO's), ``val``
    (held out: seed + 10_000) and ``demo`` (the warm start's demonstrations: seed + 20_000, so
    GRPO does not train on tasks SFT memorised)."""
    offsets = {"train": 0, "val": 10_000, "demo": 20_000}
    if split not in offsets:
        raise ValueError(f"osworld_toy splits are {', '.join(offsets)}, got {split!r}")
    return toy_tasks(n, seed + offsets[split], tuple(kinds))
