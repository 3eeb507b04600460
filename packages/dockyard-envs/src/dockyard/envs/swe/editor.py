"""The file editor of the repository agent, with SWE-agent's ``str_replace_editor`` semantics.

Pure functions over a file's text (the agent environment reads and writes the file through the
sandbox session); each raises :class:`EditorError` with the message the model sees:

* ``view``: ``cat -n`` style numbered lines (``%6d\\t``), the whole file or ``view_range =
  [start, end]`` (1-based, inclusive; ``end = -1``: to the end);
* ``str_replace``: ``old_str`` must occur exactly once (0 or several occurrences are errors that
  say which, with the line numbers); the answer shows a numbered snippet around the edit;
* ``insert``: ``new_str`` after line ``insert_line`` (0: at the top; at most the line count);
* ``create``: a new file only (an existing one is an error: edit it instead).
"""

from __future__ import annotations

SNIPPET_LINES = 4


class EditorError(ValueError):
    """An editor command that cannot be carried out (the message goes back to the model)."""


def numbered(text: str, start: int = 1) -> str:
    """``text``'s lines numbered from ``start`` like ``cat -n``."""
    return "\n".join(f"{i:6d}\t{line}" for i, line in enumerate(text.split("\n"), start))


def view(path: str, text: str, view_range: list[int] | None = None) -> str:
    """The numbered file, or lines ``view_range[0]..view_range[1]`` of it."""
    lines = text.split("\n")
    if view_range is None:
        return f"Here's the result of running `cat -n` on {path}:\n{numbered(text)}\n"
    if len(view_range) != 2:
        raise EditorError("`view_range` must be a list of two integers [start, end]")
    start, end = view_range
    n = len(lines)
    if not 1 <= start <= n:
        raise EditorError(
            f"Invalid `view_range`: {view_range}. Its first element `{start}` should be within "
            f"the range of lines of the file: [1, {n}]"
        )
    if end != -1 and not start <= end <= n:
        raise EditorError(
            f"Invalid `view_range`: {view_range}. Its second element `{end}` should be -1 or "
            f"between the first element and the number of lines of the file: [{start}, {n}]"
        )
    shown = "\n".join(lines[start - 1 : None if end == -1 else end])
    return f"Here's the result of running `cat -n` on {path}:\n{numbered(shown, start)}\n"


def _snippet(path: str, text: str, first_line: int, n_new: int) -> str:
    lines = text.split("\n")
    lo = max(0, first_line - SNIPPET_LINES)
    hi = min(len(lines), first_line + n_new + SNIPPET_LINES)
    body = numbered("\n".join(lines[lo:hi]), lo + 1)
    return (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet "
        f"of {path}:\n{body}\nReview the changes and make sure they are as expected. Edit the "
        "file again if necessary."
    )


def str_replace(path: str, text: str, old_str: str, new_str: str) -> tuple[str, str]:
    """``(new text, message)``: the one occurrence of ``old_str`` replaced by ``new_str``."""
    if old_str == "":
        raise EditorError("`old_str` is empty: give the exact text to replace")
    count = text.count(old_str)
    if count == 0:
        raise EditorError(
            f"No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}."
        )
    if count > 1:
        lines, pos = [], text.find(old_str)
        while pos >= 0:
            lines.append(text.count("\n", 0, pos) + 1)
            pos = text.find(old_str, pos + 1)
        raise EditorError(
            f"No replacement was performed. Multiple occurrences of old_str `{old_str}` in lines "
            f"{lines}. Please ensure it is unique"
        )
    at = text.count("\n", 0, text.find(old_str))
    new_text = text.replace(old_str, new_str, 1)
    return new_text, _snippet(path, new_text, at, new_str.count("\n") + 1)


def insert(path: str, text: str, insert_line: int, new_str: str) -> tuple[str, str]:
    """``(new text, message)``: ``new_str`` inserted after line ``insert_line``."""
    lines = text.split("\n")
    n = len(lines) - (1 if text.endswith("\n") else 0)
    if not 0 <= insert_line <= n:
        raise EditorError(
            f"Invalid `insert_line` parameter: {insert_line}. It should be within the range of "
            f"lines of the file: [0, {n}]"
        )
    new_lines = new_str.split("\n")
    if new_str.endswith("\n"):
        new_lines = new_lines[:-1]
    out = lines[:insert_line] + new_lines + lines[insert_line:]
    new_text = "\n".join(out)
    return new_text, _snippet(path, new_text, insert_line, len(new_lines))
