"""GPQA (``Idavidrein/gpqa``'s CSVs / dataset: ``Question``, ``Correct Answer``, ``Incorrect
Answer 1..3``, ``Subdomain``, ``High-level domain``, ``Record ID``) → four-choice tasks.

The four answers are shuffled per record with ``random.Random(f"{seed}:{record id}")``: the
correct letter is spread over A-D, and the same seed gives the same order whatever the order of
the records."""

from __future__ import annotations

import random
import string
from typing import Any


def tasks(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(rows):
        rid = str(r.get("Record ID") or f"gpqa/{i}")
        correct = str(r["Correct Answer"]).strip()
        choices = [correct] + [str(r[f"Incorrect Answer {k}"]).strip() for k in (1, 2, 3)]
        random.Random(f"{seed}:{rid}").shuffle(choices)
        out.append(
            {
                "id": rid,
                "question": str(r["Question"]).strip(),
                "choices": choices,
                "answer": string.ascii_uppercase[choices.index(correct)],
                "subdomain": r.get("Subdomain"),
                "domain": r.get("High-level domain"),
            }
        )
    return out
