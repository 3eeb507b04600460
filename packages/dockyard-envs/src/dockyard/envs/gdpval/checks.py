"""Deterministic rubric criteria, scored on the summaries of :mod:`dockyard.envs.gdpval.parse`.

Each criterion is a dict with ``type``, ``file`` and its own keys; it scores in [0, 1] (a share
of what it lists where it lists several things). A missing or malformed file scores 0 on every
criterion that reads it.

==========  =====================================================  ============================
type        keys                                                   score
==========  =====================================================  ============================
parses      file                                                   1 if the file parses
columns     file, columns, [table]                                 share of columns in the
                                                                   header row (case-insensitive)
rows        file, min, [max], [table]                              1 if data rows in range
sheets      file, sheets                                           share of sheets present
value       file, key_column, key, column, equals, [tol], [table]  1 if that row's cell matches
                                                                   (numbers within ``tol``)
contains    file, text (list)                                      share of phrases in its text
headings    file, headings (list)                                  share found among headings
table       file, columns                                          1 if a DOCX table's header
                                                                   holds them all
pages       file, min, [max]                                       1 if the page count is in range
image       file, min_width, min_height, [square]                  1 if the PNG is that large
==========  =====================================================  ============================

``table`` (a key of the table-reading types) names the sheet (XLSX), or ``table1``... (DOCX);
default: the first table of the file. Numbers in cells written as text (``"1,200.50"``,
``"$85,000"``) are read as numbers by ``value``.
"""

from __future__ import annotations

import re
from typing import Any

DETERMINISTIC = ("parses", "columns", "rows", "sheets", "value", "contains", "headings",
                 "table", "pages", "image")  # fmt: skip
_NUM = re.compile(r"^[-+]?[$€£]?\s*[-+]?\d[\d,]*(\.\d+)?%?$")


def _norm(v: Any) -> str:
    return " ".join(str(v if v is not None else "").split()).casefold()


def number(v: Any) -> float | None:
    """``v`` as a float: numbers, and text such as ``"1,200.50"``, ``"$85,000"``; else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    s = str(v if v is not None else "").strip()
    if not _NUM.match(s):
        return None
    try:
        return float(s.replace(",", "").replace("$", "").replace("€", "").replace("£", "")
                     .replace("%", "").replace(" ", ""))  # fmt: skip
    except ValueError:
        return None


def _table(summary: dict[str, Any], name: str | None) -> list[list[Any]]:
    tables = summary.get("tables") or {}
    if name is not None:
        for key, rows in tables.items():
            if _norm(key) == _norm(name):
                return rows
        return []
    return next(iter(tables.values()), [])


def _header(rows: list[list[Any]]) -> list[str]:
    return [_norm(c) for c in rows[0]] if rows else []


def _data_rows(rows: list[list[Any]]) -> list[list[Any]]:
    return [r for r in rows[1:] if any(c not in (None, "") for c in r)]


def _share(found: int, total: int) -> float:
    return found / total if total else 1.0


def _value(c: dict[str, Any], s: dict[str, Any]) -> tuple[float, str]:
    rows = _table(s, c.get("table"))
    head = _header(rows)
    kc, col = _norm(c["key_column"]), _norm(c["column"])
    if kc not in head or col not in head:
        return 0.0, f"no column {c['key_column']!r} or {c['column']!r}"
    ki, ci = head.index(kc), head.index(col)
    for r in _data_rows(rows):
        if len(r) > max(ki, ci) and _norm(r[ki]) == _norm(c["key"]):
            got, want = r[ci], c["equals"]
            if isinstance(want, int | float) and not isinstance(want, bool):
                n = number(got)
                ok = n is not None and abs(n - want) <= float(c.get("tol", 0.01))
            else:
                ok = _norm(got) == _norm(want)
            return float(ok), f"{c['column']} of {c['key']!r} is {got!r}, expected {want!r}"
    return 0.0, f"no row with {c['key_column']} = {c['key']!r}"


def score(c: dict[str, Any], summary: dict[str, Any] | None) -> tuple[float, str]:
    """``(score, detail)`` of deterministic criterion ``c`` on a file's summary (None: the file
    is missing or malformed)."""
    kind = c["type"]
    if summary is None:
        return 0.0, "the file is missing or malformed"
    if kind == "parses":
        return 1.0, "parses"
    if kind == "columns":
        head = _header(_table(summary, c.get("table")))
        hits = [x for x in c["columns"] if _norm(x) in head]
        return _share(len(hits), len(c["columns"])), f"header {head}"
    if kind == "rows":
        n = len(_data_rows(_table(summary, c.get("table"))))
        ok = n >= c.get("min", 0) and n <= c.get("max", n)
        return float(ok), f"{n} data rows"
    if kind == "sheets":
        have = {_norm(k) for k in summary.get("tables") or {}}
        hits = [x for x in c["sheets"] if _norm(x) in have]
        return _share(len(hits), len(c["sheets"])), f"sheets {sorted(have)}"
    if kind == "value":
        return _value(c, summary)
    if kind == "contains":
        text = _norm(summary.get("text", ""))
        miss = [t for t in c["text"] if _norm(t) not in text]
        return _share(len(c["text"]) - len(miss), len(c["text"])), f"missing {miss}"
    if kind == "headings":
        heads = [_norm(h) for h in summary.get("headings") or []]
        miss = [h for h in c["headings"] if not any(_norm(h) in x for x in heads)]
        return _share(len(c["headings"]) - len(miss), len(c["headings"])), f"missing {miss}"
    if kind == "table":
        want = [_norm(x) for x in c["columns"]]
        for rows in (summary.get("tables") or {}).values():
            if all(w in _header(rows) for w in want):
                return 1.0, "found"
        return 0.0, "no table with those columns"
    if kind == "pages":
        n = summary.get("pages") or 0
        return float(c.get("min", 1) <= n <= c.get("max", n)), f"{n} pages"
    if kind == "image":
        im = summary.get("image") or {}
        w, h = im.get("width", 0), im.get("height", 0)
        ok = w >= c.get("min_width", 1) and h >= c.get("min_height", 1)
        ok = ok and (w == h or not c.get("square", False))
        return float(ok), f"{w}x{h}"
    raise ValueError(f"unknown criterion type {kind!r} (one of {', '.join(DETERMINISTIC)}, judge)")
