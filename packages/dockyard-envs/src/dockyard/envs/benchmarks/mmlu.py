"""MMLU (``cais/mmlu``: ``question``, ``subject``, ``choices`` [4 strings], ``answer``: the
0-based index of the right one; a letter or a digit string is read too) → four-choice tasks,
broken down by subject."""

from __future__ import annotations

import string
from typing import Any


def gold_index(value: Any, n: int, where: str) -> int:
    """The 0-based index an ``answer`` field means (``2``, ``"2"``, ``"C"``)."""
    text = str(value).strip()
    idx = int(text) if text.isdigit() else string.ascii_uppercase.find(text.upper())
    if not (len(text) > 0 and 0 <= idx < n):
        raise ValueError(f"{where}: answer {value!r} is not an index or letter of {n} choices")
    return idx


def tasks(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(rows):
        choices = [str(c) for c in r["choices"]]
        idx = gold_index(r["answer"], len(choices), f"mmlu record {i}")
        out.append(
            {
                "id": f"mmlu/{r.get('subject', 'all')}/{i}",
                "question": r["question"],
                "choices": choices,
                "answer": string.ascii_uppercase[idx],
                "subject": r.get("subject"),
            }
        )
    return out
