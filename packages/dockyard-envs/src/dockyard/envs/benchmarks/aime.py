"""AIME (``AI-MO/aimo-validation-aime``: ``id``, ``problem``, ``solution``, ``answer``, ``url``;
``Maxwell-Jia/AIME_2024``: ``ID``, ``Problem``, ``Solution``, ``Answer``; ``year`` where a copy
has it, else the leading year of the id, ``2024-I-1``) → math tasks with the integer answer,
broken down by year."""

from __future__ import annotations

import re
from typing import Any


def _first(r: dict[str, Any], *keys: str) -> Any:
    return next((r[k] for k in keys if r.get(k) is not None), None)


def _answer(value: Any) -> str:
    text = str(value).strip()
    return str(int(float(text))) if re.fullmatch(r"-?\d+(\.0+)?", text) else text


def tasks(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(rows):
        rid = str(_first(r, "id", "ID", "unique_id") or f"aime/{i}")
        year = _first(r, "year", "Year")
        if year is None and (
            m := re.match(r"(\d{4})", rid) or re.search(r"/(\d{4})_", str(r.get("url", "")))
        ):
            year = int(m.group(1))
        out.append(
            {
                "id": rid,
                "problem": _first(r, "problem", "Problem", "question"),
                "answer": _answer(_first(r, "answer", "Answer")),
                "year": year,
            }
        )
    return out
