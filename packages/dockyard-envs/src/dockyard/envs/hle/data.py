"""HLE records → tasks of :class:`~dockyard.envs.hle.env.HleEnvironment`.

The public layout (``cais/hle``, one split ``test``; a ``save_to_disk`` folder, Parquet or JSONL
copy read by :func:`dockyard.envs.benchmarks.read.read_rows`)::

    id, question, image, image_preview, answer, answer_type ("exactMatch" | "multipleChoice"),
    author_name, rationale, rationale_image, raw_subject, category, canary

Multiple-choice questions carry their choices in ``question`` itself (``Answer Choices:`` then
``A. ...`` lines) and a letter in ``answer``. Image questions (a non-empty ``image``) are left
out — the environments here are text-only — and counted (:func:`hle_tasks` returns the count; the
loaders log it).

How each task is graded (``match``):

* ``choice``: ``answer_type == "multipleChoice"``: the letter of the response's last
  ``Answer:`` line against ``answer``;
* ``exact``: an ``exactMatch`` answer of at most ``max_exact_chars`` characters: the response's
  final answer normalised (case, whitespace, ``$``, trailing period) equal to it, or shown equal
  by math-verify;
* ``judge``: a longer ``exactMatch`` answer (a sentence, an expression with words): the LLM judge
  decides whether the final answer is equivalent to the reference.
"""

from __future__ import annotations

import hashlib
import logging
from importlib import resources
from pathlib import Path
from typing import Any

from dockyard.envs.benchmarks.read import read_rows

log = logging.getLogger(__name__)

FIELDS = ("id", "question", "answer", "answer_type")
MAX_EXACT_CHARS = 40
"""``exactMatch`` answers up to this length are compared exactly; longer ones go to the judge."""


def fixture_path() -> Path:
    """The small HLE-layout fixture set shipped with dockyard-envs (written for dockyard: not
    HLE's questions; text-only except for one image record, which is skipped)."""
    return Path(str(resources.files("dockyard.envs.hle") / "fixtures.jsonl"))


def match_kind(answer_type: str, answer: str, max_exact_chars: int = MAX_EXACT_CHARS) -> str:
    """``choice`` | ``exact`` | ``judge`` (see the module docstring)."""
    if answer_type == "multipleChoice":
        return "choice"
    if answer_type != "exactMatch":
        raise ValueError(
            f"answer_type {answer_type!r}: HLE records are 'exactMatch' or 'multipleChoice'"
        )
    return "exact" if len(answer.strip()) <= max_exact_chars else "judge"


def hle_tasks(
    rows: list[dict[str, Any]], max_exact_chars: int = MAX_EXACT_CHARS
) -> tuple[list[dict[str, Any]], int]:
    """``(tasks, skipped)``: one task per text-only record, and how many image records were
    left out. A record missing a field of :data:`FIELDS` is a ValueError naming it."""
    tasks, skipped = [], 0
    for i, r in enumerate(rows):
        missing = [f for f in FIELDS if f not in r]
        if missing:
            raise ValueError(f"HLE record {i}: no field(s) {', '.join(missing)} (expects {FIELDS})")
        if r.get("image"):
            skipped += 1
            continue
        answer = str(r["answer"]).strip()
        tasks.append(
            {
                "id": str(r["id"]),
                "question": str(r["question"]),
                "answer": answer,
                "answer_type": str(r["answer_type"]),
                "match": match_kind(str(r["answer_type"]), answer, max_exact_chars),
                "subject": r.get("raw_subject"),
                "category": r.get("category"),
            }
        )
    return tasks, skipped


def _in_val(task_id: str, val_fraction: float) -> bool:
    h = int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:4], "big")
    return h / 2**32 < val_fraction


def hle_dataset(
    split: str,
    path: str | None = None,
    val_fraction: float = 0.2,
    max_exact_chars: int = MAX_EXACT_CHARS,
) -> list[dict[str, Any]]:
    """``data.dataset_name: hle``: the records of ``path`` (a local copy of ``cais/hle``; None:
    the shipped fixture set), split by a hash of ``id`` (``val_fraction`` of them in ``val``)."""
    src = Path(path) if path else fixture_path()
    tasks, skipped = hle_tasks(read_rows(src), max_exact_chars)
    if skipped:
        log.warning("HLE %s: %d image question(s) skipped (text-only environment)", src, skipped)
    return [t for t in tasks if _in_val(t["id"], val_fraction) == (split == "val")]
