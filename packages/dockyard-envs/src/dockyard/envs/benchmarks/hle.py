"""Humanity's Last Exam (``cais/hle``: ``id``, ``question``, ``image``, ``answer``,
``answer_type``, ``raw_subject``, ``category``, ...) → tasks of the ``hle`` environment
(:mod:`dockyard.envs.hle`): multiple choice by letter, short answers by exact match, long ones
by the judge. Image questions are skipped and the count logged (text-only environment)."""

from __future__ import annotations

import logging
from typing import Any

from dockyard.envs.hle.data import hle_tasks

log = logging.getLogger(__name__)


def tasks(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    out, skipped = hle_tasks(rows)
    if skipped:
        log.warning("hle: %d image question(s) skipped (text-only), %d kept", skipped, len(out))
    return out
