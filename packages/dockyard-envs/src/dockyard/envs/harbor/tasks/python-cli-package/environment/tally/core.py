"""Counting, independent of the command line."""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field

WORD = re.compile(r"[A-Za-z0-9']+")


@dataclass
class Counts:
    lines: int = 0
    words: int = 0
    chars: int = 0
    freq: collections.Counter = field(default_factory=collections.Counter)

    def add(self, other: Counts) -> None:
        self.lines += other.lines
        self.words += other.words
        self.chars += other.chars
        self.freq.update(other.freq)

    def top(self, n: int) -> list[tuple[str, int]]:
        """The ``n`` most frequent words: by count, descending, then alphabetically."""
        return sorted(self.freq.items(), key=lambda wc: (-wc[1], wc[0]))[:n]


def count_text(text: str, ignore_case: bool = False) -> Counts:
    """Lines (newline characters), words (runs of letters, digits, apostrophes), characters."""
    words = WORD.findall(text.lower() if ignore_case else text)
    return Counts(text.count("\n"), len(words), len(text), collections.Counter(words))
