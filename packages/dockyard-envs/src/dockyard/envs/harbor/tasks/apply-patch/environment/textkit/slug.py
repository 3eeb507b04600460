"""URL slugs."""

import re
import unicodedata


def slugify(text, max_len=None):
    """Lower-case ASCII slug: runs of non-alphanumerics become one '-'.

    With `max_len`, the slug is cut to at most that many characters, at a '-' when there is one.
    """
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^a-zA-Z0-9]+", "-", text)
    slug = text.lower()
    if max_len is not None and len(slug) > max_len:
        cut = slug[:max_len]
        slug = cut.rsplit("-", 1)[0] if "-" in cut else cut
    return slug
