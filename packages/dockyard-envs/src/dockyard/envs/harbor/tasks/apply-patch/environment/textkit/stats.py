"""Word statistics."""

import collections
import re

WORD = re.compile(r"[a-z']+")


def words(text):
    return WORD.findall(text.lower())


def word_count(text):
    """Number of words (runs of letters and apostrophes, case-insensitive)."""
    return len(words(text))


def unique_words(text):
    """The distinct words, sorted."""
    return sorted(set(words(text)))


def top_words(text, n=10):
    """The `n` most frequent words as (word, count) pairs."""
    counts = collections.Counter(words(text))
    return counts.most_common(n)
