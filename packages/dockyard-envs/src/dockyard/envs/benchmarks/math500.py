"""MATH-500 (``HuggingFaceH4/MATH-500``; the MATH test set's records have the same fields, with
``type`` for ``subject`` and ``"Level 3"`` for ``level``): ``problem``, ``solution``,
``answer``, ``subject``, ``level``, ``unique_id`` → math tasks (``answer`` checked by
math-verify), broken down by subject and level."""

from __future__ import annotations

import re
from typing import Any


def level(value: Any) -> Any:
    """``3`` and ``"Level 3"`` → 3; anything else as it is (None stays None)."""
    if isinstance(value, str) and (m := re.fullmatch(r"\s*(?:level\s*)?(\d+)\s*", value, re.I)):
        return int(m.group(1))
    return value


def tasks(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    return [
        {
            "id": str(r.get("unique_id") or f"math500/{i}"),
            "problem": r["problem"],
            "answer": str(r["answer"]),
            "subject": r.get("subject") or r.get("type"),
            "level": level(r.get("level")),
        }
        for i, r in enumerate(rows)
    ]
