"""Greedy word wrapping."""


def wrap(text, width=72):
    """Split `text` into lines of at most `width` characters.

    Words are separated by single spaces; a word longer than `width` gets a line of its own.
    Any run of whitespace (spaces, tabs, newlines) in `text` separates words."""
    lines, cur = [], ""
    for word in text.split():
        if cur and len(cur) + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    if cur:
        lines.append(cur)
    return lines


def fill(text, width=72):
    """`wrap`'s lines joined by newlines."""
    return "\n".join(wrap(text, width))
