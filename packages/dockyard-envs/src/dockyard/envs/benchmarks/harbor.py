"""Harbor terminal tasks as a benchmark: the tasks dockyard-envs ships (``eval.path`` null) or a
folder of Harbor task directories (``eval.path``: a Terminal-Bench 2 checkout, or one task),
each an agentic episode in the sandbox scored by its own ``tests/test.sh``
(:mod:`dockyard.envs.harbor`). Broken down by ``category`` (task.toml's ``[metadata]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dockyard.envs.harbor.tasks import SHIPPED, load_tasks


def tasks(path: str | Path | None, seed: int) -> list[dict[str, Any]]:
    return load_tasks(path if path is not None else SHIPPED)
