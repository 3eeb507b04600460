"""Extract a unified diff from a model response, tolerant of fences, prose and bad counts.

Models wrap diffs in ```` ```diff ```` fences, surround them with explanations, drop the
leading space of empty context lines, and miscount hunk lengths. :func:`extract_patch`:

1. takes fenced ``diff``/``patch`` blocks if present (all of them, in order), else the text;
2. keeps only the diff lines (``diff --git``, ``---``/``+++`` headers, ``@@`` hunks and their
   body lines), stopping a file's diff at the first line that cannot belong to it;
3. treats an empty line inside a hunk as an empty context line;
4. rewrites every ``@@ -a,b +c,d @@`` header with the counts of its actual body.

It returns '' when no diff is found. It never judges *safety*: the sandbox rejects paths
outside the tree, ``.git/`` and symlinks (``patch_rejected``).
"""

from __future__ import annotations

import re

_FENCE = re.compile(
    r"```[ \t]*(diff|patch|udiff)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE
)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_META = ("diff --git ", "index ", "new file mode", "deleted file mode", "similarity index", "rename from",
         "rename to", "old mode", "new mode")  # fmt: skip


def _diff_lines(text: str) -> list[str]:
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    in_hunk = False
    while i < len(lines):
        ln = lines[i]
        if ln.startswith(_META) or (
            ln.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        ):
            if ln.startswith("--- "):
                out += [ln, lines[i + 1]]
                i += 2
            else:
                out.append(ln)
                i += 1
            in_hunk = False
            continue
        if _HUNK.match(ln) and out:
            out.append(ln)
            in_hunk = True
        elif in_hunk and ln[:1] in (" ", "+", "-", "\\"):
            out.append(ln)
        elif in_hunk and ln == "":
            # an empty context line whose space was stripped, if the hunk goes on after it
            nxt = next((x for x in lines[i + 1 :] if x != ""), None)
            if (
                nxt is not None
                and nxt[:1] in (" ", "+", "-")
                and not nxt.startswith(("--- ", "+++ "))
            ):
                out.append(" ")
            else:
                in_hunk = False
        else:
            in_hunk = False
        i += 1
    return out


def _fix_counts(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _HUNK.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        while (
            j < len(lines) and lines[j][:1] in (" ", "+", "-", "\\") and not _HUNK.match(lines[j])
        ):
            if (
                lines[j].startswith(("--- ", "+++ "))
                and j + 1 < len(lines)
                and (lines[j + 1].startswith("+++ ") or _HUNK.match(lines[j + 1]))
            ):
                break
            j += 1
        body = lines[i + 1 : j]
        old = sum(1 for b in body if b[:1] in (" ", "-"))
        new = sum(1 for b in body if b[:1] in (" ", "+"))
        a, c = int(m.group(1)), int(m.group(3))
        if old == 0:
            a = max(a, 0)
        out.append(f"@@ -{a},{old} +{c},{new} @@{m.group(5)}")
        out += body
        i = j
    return out


def extract_patch(response: str) -> str:
    """See the module docstring. Returns a diff ending in a newline, or ''."""
    fenced = [body for lang, body in _FENCE.findall(response) if lang or "@@" in body]
    sources = fenced or [response]
    lines: list[str] = []
    for src in sources:
        lines += _diff_lines(src)
    if not any(_HUNK.match(x) for x in lines):
        return ""
    return "\n".join(_fix_counts(lines)) + "\n"
