"""OSWorld's evaluator: getters read the guest's result, metrics compare it; a score in [0, 1].

``evaluator = {"func": f | [f...], "conj": "and"|"or", "result": g | [g...], "expected": g |
[g...], "options": {...} | [...]}``: each metric ``f_i(result_i, expected_i, **options_i)``; the
score is their minimum (``and``) or maximum (``or``). A result the getter could not read (a
missing file) scores 0 — it is the agent's doing, never an infrastructure error.

Getters (``type``), named as in OSWorld where OSWorld has one:

* ``vm_file`` {path}: the file's text in the session's workspace (None if missing).
* ``vm_command_line`` {command}: stdout of the command run in the session (no display).
* ``rule`` {rules}: the ``rules`` object itself (what ``expected`` usually is).
* ``local_file`` {path}: a file of the task's own folder (an expected document).
* ``active_window_title`` / ``window_titles`` (dockyard additions): the focused window's title /
  the visible windows' titles, read from the desktop (AT-SPI trees are not available here).

Metrics: ``exact_match`` / ``match_in_list`` / ``is_in_list`` / ``check_include_exclude`` (with
``rules``), ``literal_match``, ``compare_text_file``, ``fuzzy_match`` and ``infeasible`` (scores
1 when the agent answered FAIL, OSWorld's marker for a task that cannot be done). To add one:
a function here and an entry in ``METRICS`` / ``GETTERS``; the loader refuses what is absent.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from dockyard.envs.osworld.guestpath import workspace_path


class Guest(Protocol):
    """What getters read through (guest.py implements it over a sandbox session)."""

    async def read_file(self, rel: str) -> bytes | None: ...
    async def run(self, command: str) -> str: ...
    async def window_state(self) -> tuple[str, list[str]]: ...


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


def _command(spec: dict[str, Any]) -> str:
    c = spec["command"]
    return c if isinstance(c, str) else shlex.join(c)


async def _vm_file(g: Guest, spec: dict[str, Any], folder: Path) -> Any:
    return _text(await g.read_file(workspace_path(spec["path"])))


async def _local_file(g: Guest, spec: dict[str, Any], folder: Path) -> Any:
    p = (folder / spec["path"]).resolve()
    return p.read_text() if folder.resolve() in p.parents and p.is_file() else None


async def _rule(g: Guest, spec: dict[str, Any], folder: Path) -> Any:
    return spec.get("rules")


async def _command_line(g: Guest, spec: dict[str, Any], folder: Path) -> Any:
    return await g.run(_command(spec))


async def _active_title(g: Guest, spec: dict[str, Any], folder: Path) -> Any:
    return (await g.window_state())[0]


async def _titles(g: Guest, spec: dict[str, Any], folder: Path) -> Any:
    return (await g.window_state())[1]


GETTERS: dict[str, Callable[[Guest, dict[str, Any], Path], Awaitable[Any]]] = {
    "vm_file": _vm_file,
    "local_file": _local_file,
    "rule": _rule,
    "vm_command_line": _command_line,
    "active_window_title": _active_title,
    "window_titles": _titles,
}


def exact_match(result: Any, rules: dict[str, Any]) -> float:
    return float(result is not None and result == rules["expected"])


def match_in_list(result: Any, rules: dict[str, Any]) -> float:
    return float(result is not None and result in rules["expected"])


def is_in_list(result: Any, rules: dict[str, Any]) -> float:
    return float(isinstance(result, list | str) and rules["expected"] in result)


def check_include_exclude(result: Any, rules: dict[str, Any]) -> float:
    if not isinstance(result, str):
        return 0.0
    inc = all(s in result for s in rules.get("include", []))
    return float(inc and not any(s in result for s in rules.get("exclude", [])))


def literal_match(result: Any, expected: Any, ignore_case: bool = False, **_: Any) -> float:
    if ignore_case and isinstance(result, str) and isinstance(expected, str):
        return float(result.lower() == expected.lower())
    return float(result is not None and result == expected)


def compare_text_file(
    result: Any, expected: Any, ignore_blanks: bool = False, ignore_case: bool = False
) -> float:
    """Text equality up to trailing whitespace (``ignore_blanks``: all whitespace)."""
    if not isinstance(result, str) or not isinstance(expected, str):
        return 0.0
    a, b = result.rstrip(), expected.rstrip()
    if ignore_blanks:
        a, b = "".join(a.split()), "".join(b.split())
    if ignore_case:
        a, b = a.lower(), b.lower()
    return float(a == b)


def fuzzy_match(result: Any, rules: dict[str, Any]) -> float:
    """Similarity ratio in [0, 1] (difflib), as OSWorld's fuzzy score."""
    if not isinstance(result, str):
        return 0.0
    return difflib.SequenceMatcher(None, result, str(rules["expected"])).ratio()


METRICS: dict[str, Callable[..., float]] = {
    "exact_match": exact_match,
    "match_in_list": match_in_list,
    "is_in_list": is_in_list,
    "check_include_exclude": check_include_exclude,
    "literal_match": literal_match,
    "compare_text_file": compare_text_file,
    "fuzzy_match": fuzzy_match,
    "infeasible": lambda *_a, **_k: 0.0,  # decided from the agent's last action (evaluate)
}


def _listed(x: Any, n: int) -> list[Any]:
    return x if isinstance(x, list) else [x] * n


async def evaluate(ev: dict[str, Any], guest: Guest, folder: Path, ended: str | None) -> float:
    """The task's score in [0, 1] for the guest's current state (``ended``: DONE/FAIL/None)."""
    funcs = ev["func"] if isinstance(ev["func"], list) else [ev["func"]]
    if funcs == ["infeasible"]:
        return float(ended == "FAIL")
    if ended == "FAIL":  # the agent gave up on a feasible task
        return 0.0
    n = len(funcs)
    results, expected = _listed(ev["result"], n), _listed(ev.get("expected"), n)
    options = _listed(ev.get("options") or {}, n)
    scores = []
    for f, r, e, o in zip(funcs, results, expected, options, strict=True):
        got = await GETTERS[r["type"]](guest, r, folder)
        want = await GETTERS[e["type"]](guest, e, folder) if e is not None else None
        scores.append(0.0 if got is None else float(METRICS[f](got, want, **(o or {}))))
    return min(scores) if ev.get("conj", "and") == "and" else max(scores)
