"""A local math file (JSONL, Parquet, ...) of ``{"problem", "answer"}`` records, with optional
``id``, ``subject`` and ``level`` (the breakdowns) — the shape of :mod:`dockyard.envs.math`'s
tasks — scored by math-verify."""

from __future__ import annotations

from typing import Any

from dockyard.envs.benchmarks.math500 import level


def tasks(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    return [
        {
            "id": str(r.get("id", f"local_math/{i}")),
            "problem": r["problem"],
            "answer": str(r["answer"]),
            "subject": r.get("subject"),
            "level": level(r.get("level")),
        }
        for i, r in enumerate(rows)
    ]
