"""tally: count lines, words and the most frequent words of text files."""

__version__ = "1.4.0"

from .core import Counts, count_text

__all__ = ["Counts", "__version__", "count_text"]
