"""Pull Python code out of a model response (fenced or bare)."""

from __future__ import annotations

import re

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(response: str, entry_point: str | None = None) -> tuple[str, bool]:
    """The code in ``response`` and whether it came from a fenced block.

    With several fenced blocks, the last one defining ``entry_point`` wins, else the longest.
    Without fences the whole response is taken as code (a HumanEval-style continuation).
    """
    blocks = [b for b in _FENCE.findall(response) if b.strip()]
    if not blocks:
        return response, False
    if entry_point:
        defining = [b for b in blocks if re.search(rf"def\s+{re.escape(entry_point)}\s*\(", b)]
        if defining:
            return defining[-1], True
    return max(blocks, key=len), True
