"""MMLU-Pro (``TIGER-Lab/MMLU-Pro``: ``question_id``, ``question``, ``options`` [up to 10],
``answer``: the letter, ``answer_index``, ``cot_content``, ``category``, ``src``) → tasks with
up to ten choices A-J, broken down by category. ``"N/A"`` padding options (early releases) are
dropped, as the benchmark's own evaluation script does, and the key re-lettered."""

from __future__ import annotations

import string
from typing import Any


def tasks(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(rows):
        options = [str(o) for o in r["options"]]
        idx = r.get("answer_index")
        if idx is None or int(idx) < 0:
            idx = string.ascii_uppercase.find(str(r["answer"]).strip().upper())
        idx = int(idx)
        if not 0 <= idx < len(options) or options[idx] == "N/A":
            raise ValueError(f"mmlu_pro record {i}: answer {r.get('answer')!r} names no option")
        kept = [k for k, o in enumerate(options) if o != "N/A"]
        out.append(
            {
                "id": f"mmlu_pro/{r.get('question_id', i)}",
                "question": r["question"],
                "choices": [options[k] for k in kept],
                "answer": string.ascii_uppercase[kept.index(idx)],
                "category": r.get("category"),
            }
        )
    return out
