"""A generated family of toy desktop tasks a tiny model can learn.

Two kinds, each a Tk window at the screen's top-left corner (data/apps/*.tcl):

* ``click``: ``n_buttons`` buttons labelled with distinct colour names from ``COLOURS``, each
  painted in its colour (buttons.tcl), at seeded places; the instruction names one ("Click the
  button labelled 'red'."); the evaluator checks ``answer.txt`` (the last clicked label) with
  ``exact_match``. Colours, not words: at the few pixels a small policy's screenshot gives a
  button, its text cannot be read (the first version, labelled with ``WORDS``, left a tiny
  model's clicks at chance), its colour can.
* ``type``: one text field with the focus; the instruction gives a word ("Type 'cat' into the
  text field and press Enter."); the same check.

Every task carries its scripted ``oracle`` (agents.py). ``toy_tasks(n, seed)`` is
deterministic: the same seed gives the same tasks (train / held-out splits use other seeds).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
WORDS = ("red", "blue", "green", "cat", "dog", "sun", "moon", "tree", "fish", "star")
COLOURS = ("red", "green", "blue", "yellow", "purple", "cyan")  # Tk colour names, far apart
WIN_W, WIN_H = 300, 200
_GRID = [(x, y) for x in (50, 150, 250) for y in (40, 100, 160)]


def _app(name: str, args: list[str]) -> list[dict[str, Any]]:
    return [
        {"type": "download", "parameters": {"files": [{"url": f"apps/{name}", "path": f".apps/{name}"}]}},
        {"type": "launch", "parameters": {"command": ["wish", f".apps/{name}", *args]}},
    ]  # fmt: skip


def _check(answer: str) -> dict[str, Any]:
    return {
        "func": "exact_match",
        "result": {"type": "vm_file", "path": "answer.txt", "dest": "answer.txt"},
        "expected": {"type": "rule", "rules": {"expected": answer}},
    }


def click_task(rng: random.Random, i: int, n_buttons: int = 3) -> dict[str, Any]:
    labels = rng.sample(COLOURS, n_buttons)
    places = rng.sample(_GRID, n_buttons)
    target = rng.randrange(n_buttons)
    args = ["Toy", str(WIN_W), str(WIN_H)]
    for lab, (x, y) in zip(labels, places, strict=True):
        args += [lab, str(x), str(y)]
    tx, ty = places[target]
    return {
        "id": f"toy-click-{i}", "domain": "toy-click", "folder": str(DATA),
        "instruction": f"Click the button labelled '{labels[target]}'.",
        "config": _app("buttons.tcl", args), "evaluator": _check(labels[target]),
        "oracle": [f"pyautogui.click({{Toy.x+{tx}}}, {{Toy.y+{ty}}})", "DONE"],
        "related_apps": ["toy"],
    }  # fmt: skip


def type_task(rng: random.Random, i: int) -> dict[str, Any]:
    word = rng.choice(WORDS)
    return {
        "id": f"toy-type-{i}", "domain": "toy-type", "folder": str(DATA),
        "instruction": f"Type '{word}' into the text field and press Enter.",
        "config": _app("entry.tcl", ["Toy", str(WIN_W), str(WIN_H)]), "evaluator": _check(word),
        "oracle": [f"pyautogui.click({{Toy.x+{WIN_W // 2}}}, {{Toy.y+{WIN_H // 2}}})",
                   f"pyautogui.write('{word}')", "pyautogui.press('enter')", "DONE"],
        "related_apps": ["toy"],
    }  # fmt: skip


def toy_tasks(
    n: int, seed: int = 0, kinds: tuple[str, ...] = ("click", "type")
) -> list[dict[str, Any]]:
    """``n`` toy tasks, kinds in turn, deterministic in ``seed``."""
    unknown = set(kinds) - {"click", "type"}
    if unknown or not kinds:
        raise ValueError(f"toy kinds are 'click' and 'type', got {sorted(unknown) or kinds}")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        out.append(click_task(rng, i) if kind == "click" else type_task(rng, i))
    return out
