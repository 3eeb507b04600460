"""textkit: small text utilities."""

from textkit.slug import slugify
from textkit.stats import top_words, word_count
from textkit.wrap import wrap

__all__ = ["slugify", "top_words", "word_count", "wrap"]
