"""The SWE tasks dockyard-envs ships (``dockyard/envs/swe/tasks/*.jsonl``: bugs injected into
real PyPI libraries, judged by their fail-to-pass tests in the sandbox) — ``eval.path`` null —
or a local JSONL of manifests in the same layout (:func:`dockyard.envs.swe.instance.
validate_manifest`). Broken down by ``repo``."""

from __future__ import annotations

from typing import Any

from dockyard.envs.swe.data import load_shipped_tasks
from dockyard.envs.swe.instance import validate_manifest


def tasks(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    if not rows:
        return load_shipped_tasks()
    for i, r in enumerate(rows):
        validate_manifest(r, f"record {i}")
    return rows
