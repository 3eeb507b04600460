"""Pull the final answer out of a model response.

Priority (the first that matches wins):

1. the *last* ``\\boxed{...}`` (or ``\\fbox{...}``), nested braces balanced;
2. the last line of the form ``Answer: ...`` / ``Final answer: ...`` (case-insensitive);
3. the last number in the text (``-12``, ``3.5``, ``1,000``, ``7/8``).

Returns ``(answer, source)`` with ``source`` in ``boxed | answer_line | last_number``, or
``(None, None)``.

Multiple choice: :func:`extract_choice` (lenient: ``answer is **B**``, ``\\boxed{B}``) and
:func:`extract_answer_letter` (strict: only the last line that is ``Answer: X``).
"""

from __future__ import annotations

import re

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_LINE = re.compile(
    r"(?im)^[\s*#>_-]*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:：]\s*(.+?)\s*$"
)
_NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.])-?\d+(?:\.\d+)?(?:/\d+)?")
_ANSWER_LETTER_LINE = re.compile(r"(?im)^[ \t*#>_-]*answer[ \t*]*[:：][ \t*]*(.*?)[ \t]*$")
_LETTER = re.compile(r"^[(\[]?([A-Za-z])[)\]]?[.*]*$")
_CHOICE = re.compile(r"(?im)answer\s*(?:is)?\s*[:：]?\s*\(?\**\s*([A-Z])\b\)?")


def _balanced(text: str, start: int) -> str | None:
    """Text from ``start`` (just after an opening brace) up to its matching close, or None."""
    depth = 1
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def extract_boxed(text: str) -> str | None:
    """The content of the last complete ``\\boxed{...}``."""
    found = None
    for m in _BOX.finditer(text):
        inner = _balanced(text, m.end())
        if inner is not None:
            found = inner
    return found.strip() if found is not None else None


def extract_answer(text: str) -> tuple[str | None, str | None]:
    """See the module docstring."""
    boxed = extract_boxed(text)
    if boxed:
        return boxed, "boxed"
    lines = _ANSWER_LINE.findall(text)
    if lines:
        ans = lines[-1].strip().rstrip(".").strip("$* ")
        if ans:
            return ans, "answer_line"
    nums = _NUMBER.findall(text)
    if nums:
        return nums[-1], "last_number"
    return None, None


def extract_choice(text: str, letters: str = "ABCDEFGHIJ") -> str | None:
    """The letter from the last ``Answer: X`` (also ``Answer: (X)``, ``answer is **X**``), else a
    lone letter in ``\\boxed{X}``; restricted to ``letters``."""
    hits = [m.group(1).upper() for m in _CHOICE.finditer(text)]
    hits = [h for h in hits if h in letters]
    if hits:
        return hits[-1]
    boxed = extract_boxed(text)
    if boxed and len(boxed.strip("() ")) == 1 and boxed.strip("() ").upper() in letters:
        return boxed.strip("() ").upper()
    return None


def extract_answer_letter(text: str, letters: str = "ABCDEFGHIJ") -> str | None:
    """Strict multiple choice: the letter of the *last* line of the form ``Answer: X`` (case of
    ``Answer`` and ``X`` free; ``X`` may be ``(X)``, ``**X**``, ``X.``; markdown bullets or bold
    around ``Answer`` allowed). The last such line decides: when it names no letter of
    ``letters`` (``Answer: K`` with four choices, ``Answer: B or C``, ``Answer: the second``),
    the answer is None, never an earlier line's."""
    lines = _ANSWER_LETTER_LINE.findall(text)
    if not lines:
        return None
    m = _LETTER.match(lines[-1].strip().strip("*").strip())
    if m is None:
        return None
    letter = m.group(1).upper()
    return letter if letter in letters else None
