"""The issue text of a built task, written from the failing tests' evidence (no model involved).

What a user filing the bug would have: which of the library's own tests now fail, the line of
each test where it fails, the error it reports (pytest's crash message, cut to
``MAX_MESSAGE_LINES`` lines / ``MAX_MESSAGE_CHARS`` characters) and, when the exception was
raised outside the test file, the library file it came from — the last frame of the traceback,
as an issue's pasted traceback would show. It never quotes the library's source or the
mutation: the fix has to be found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dockyard.envs.swe.builder.runner import Outcome

MAX_MESSAGE_LINES = 12
MAX_MESSAGE_CHARS = 800
MAX_ALSO_FAILING = 8


def _message(msg: str) -> str:
    lines = msg.strip().splitlines()
    text = "\n".join(lines[:MAX_MESSAGE_LINES])
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + " ..."
    elif len(lines) > MAX_MESSAGE_LINES:
        text += "\n..."
    return text.replace("```", "` ` `") or "(no message)"


def problem_statement(
    package: str,
    failures: Mapping[str, Outcome | str],
    n_failing: int,
    also_failing: Sequence[str] = (),
    lead: str = "",
) -> str:
    """An issue in Markdown: ``failures`` maps each ``FAIL_TO_PASS`` node id to its evidence
    (an :class:`Outcome` whose ``crash_path`` is relative to the repository root, or just the
    crash message); ``also_failing`` names other tests that fail too (at most
    ``MAX_ALSO_FAILING`` are listed, then a count); ``lead`` replaces the first paragraph."""
    lines = [
        lead
        or f"After a recent change, `{package}` misbehaves: {n_failing} test(s) of its own test "
        "suite that used to pass now fail.",
        "",
        "### What fails",
    ]
    for node, ev in failures.items():
        out = ev if isinstance(ev, Outcome) else Outcome("failed", ev)
        lines += ["", f"`pytest {node}`"]
        if out.statement:
            lines += ["", "fails at", "", "```python", out.statement, "```"]
        lines += ["", "with", "", "```", _message(out.message), "```"]
        test_file = node.split("::", 1)[0]
        if out.crash_path and out.crash_path != test_file:
            lines += ["", f"(the exception is raised in `{out.crash_path}`)"]
    if also_failing:
        shown = [f"`{t}`" for t in list(also_failing)[:MAX_ALSO_FAILING]]
        more = len(also_failing) - len(shown)
        lines += ["", "Also failing: " + ", ".join(shown) + (f" and {more} more." if more else ".")]
    lines += [
        "",
        "### Expected",
        "",
        "These tests pass again and the rest of the suite keeps passing. Fix the library; do "
        "not edit the tests.",
    ]
    return "\n".join(lines)
