"""OSWorld's ``pyautogui`` action form: Python code, *parsed*, never executed.

OSWorld agents answer with code such as ``pyautogui.click(120, 45); pyautogui.write('hi')``
or one of the strings ``WAIT`` / ``DONE`` / ``FAIL``. Running that code would hand the policy
a Python interpreter; instead :func:`parse_code` reads it with :mod:`ast` and accepts only
statements that are calls of known ``pyautogui`` functions (and ``time.sleep``) with literal
arguments, plus ``import pyautogui`` / ``import time``. Each call becomes validated
:class:`~dockyard.sandbox.desktop.actions.Action` s; anything else (a variable, a loop, an
attribute of another module, a call we do not know) raises :class:`InvalidAction` naming it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from dockyard.sandbox.desktop.actions import (
    END_TYPES,
    MAX_TEXT,
    MAX_WAIT_S,
    Action,
    InvalidAction,
    parse_action,
)
from dockyard.sandbox.desktop.wire import DesktopStep

MAX_CODE = 10_000
MAX_CALLS = 32

# pyautogui function -> its positional parameter names (what a positional argument means)
_SIGNATURES: dict[str, tuple[str, ...]] = {
    "click": ("x", "y", "clicks", "interval", "button"),
    "doubleClick": ("x", "y", "interval", "button"),
    "tripleClick": ("x", "y", "interval", "button"),
    "rightClick": ("x", "y"),
    "middleClick": ("x", "y"),
    "moveTo": ("x", "y", "duration"),
    "dragTo": ("x", "y", "duration", "button"),
    "mouseDown": ("x", "y", "button"),
    "mouseUp": ("x", "y", "button"),
    "scroll": ("clicks", "x", "y"),
    "vscroll": ("clicks", "x", "y"),
    "hscroll": ("clicks", "x", "y"),
    "write": ("message", "interval"),
    "typewrite": ("message", "interval"),
    "press": ("keys", "presses", "interval"),
    "keyDown": ("key",),
    "keyUp": ("key",),
    "hotkey": (),  # *keys
    "sleep": ("seconds",),  # time.sleep
}


def _xy(a: dict[str, Any]) -> dict[str, Any]:
    return {"x": a["x"], "y": a["y"]} if a.get("x") is not None else {}


def _act(t: str, **p: Any) -> dict[str, Any]:
    return {"action_type": t, "parameters": p}


def _moved(a: dict[str, Any], then: dict[str, Any]) -> list[dict[str, Any]]:
    return [_act("MOVE_TO", **_xy(a)), then] if a.get("x") is not None else [then]


def _press(a: dict[str, Any]) -> list[dict[str, Any]]:
    keys = a["keys"] if isinstance(a["keys"], list) else [a["keys"]]
    n = a.get("presses", 1)
    if not isinstance(n, int) or not 1 <= n <= 16:
        raise InvalidAction("press(presses=...) must be an integer in [1, 16]")
    return [_act("PRESS", key=k) for _ in range(n) for k in keys]


def _write(a: dict[str, Any]) -> list[dict[str, Any]]:
    m = a["message"]
    if isinstance(m, list):  # typewrite(['a', 'enter']): key names
        return [_act("PRESS", key=k) for k in m]
    return [_act("TYPING", text=m)]


_RULES: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "click": lambda a: [
        _act("CLICK", **_xy(a), button=a.get("button", "left"), num_clicks=a.get("clicks", 1))
    ],
    "doubleClick": lambda a: [
        _act("CLICK", **_xy(a), button=a.get("button", "left"), num_clicks=2)
    ],
    "tripleClick": lambda a: [
        _act("CLICK", **_xy(a), button=a.get("button", "left"), num_clicks=3)
    ],
    "rightClick": lambda a: [_act("RIGHT_CLICK", **_xy(a))],
    "middleClick": lambda a: [_act("CLICK", **_xy(a), button="middle")],
    "moveTo": lambda a: [_act("MOVE_TO", **_xy(a))] if a.get("x") is not None else [],
    "dragTo": lambda a: [_act("DRAG_TO", **_xy(a))],
    "mouseDown": lambda a: _moved(a, _act("MOUSE_DOWN", button=a.get("button", "left"))),
    "mouseUp": lambda a: _moved(a, _act("MOUSE_UP", button=a.get("button", "left"))),
    "scroll": lambda a: _moved(a, _act("SCROLL", dy=a["clicks"])),
    "vscroll": lambda a: _moved(a, _act("SCROLL", dy=a["clicks"])),
    "hscroll": lambda a: _moved(a, _act("SCROLL", dx=a["clicks"])),
    "write": _write,
    "typewrite": _write,
    "press": _press,
    "keyDown": lambda a: [_act("KEY_DOWN", key=a["key"])],
    "keyUp": lambda a: [_act("KEY_UP", key=a["key"])],
    "hotkey": lambda a: [_act("HOTKEY", keys=a["*"])],
    "sleep": lambda a: [_act("WAIT", seconds=a["seconds"])],
}


def _literal(node: ast.expr, fn: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise InvalidAction(
            f"{fn}(): arguments must be literals, got {ast.unparse(node)!r}"
        ) from None


def _call_args(call: ast.Call, fn: str) -> dict[str, Any]:
    names = _SIGNATURES[fn]
    if fn == "hotkey":
        if call.keywords:
            raise InvalidAction("hotkey() takes key names only: hotkey('ctrl', 'c')")
        return {"*": [_literal(a, fn) for a in call.args]}
    if len(call.args) > len(names):
        raise InvalidAction(f"{fn}() takes at most {len(names)} positional arguments")
    out = {n: _literal(a, fn) for n, a in zip(names, call.args, strict=False)}
    for kw in call.keywords:
        if kw.arg is None or kw.arg not in (*names, "_pause", "tween", "logScreenshot"):
            raise InvalidAction(f"{fn}() has no argument {kw.arg!r}")
        out[kw.arg] = _literal(kw.value, fn)
    if isinstance(out.get("x"), tuple | list) and "y" not in out:  # click((x, y))
        xy = out["x"]
        if len(xy) != 2:
            raise InvalidAction(f"{fn}(): a point is (x, y)")
        out["x"], out["y"] = xy
    return out


def _function(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        if (f.value.id, f.attr) == ("time", "sleep") or (
            f.value.id == "pyautogui" and f.attr in _SIGNATURES and f.attr != "sleep"
        ):
            return f.attr
        if f.value.id == "pyautogui" and f.attr == "sleep":
            return "sleep"
    raise InvalidAction(
        f"{ast.unparse(f)}() is not in the action space: use pyautogui.click/doubleClick/"
        "rightClick/moveTo/dragTo/scroll/write/press/hotkey/keyDown/keyUp or time.sleep"
    )


def parse_code(code: str, screen: tuple[int, int]) -> list[Action]:
    """OSWorld's pyautogui answer -> validated actions (``WAIT``/``DONE``/``FAIL`` alone too)."""
    if not isinstance(code, str) or len(code) > MAX_CODE:
        raise InvalidAction(f"the code must be a string of at most {MAX_CODE} characters")
    s = code.strip()
    if s.upper() in ("WAIT", "DONE", "FAIL"):
        return [parse_action(s, screen)]
    try:
        tree = ast.parse(s)
    except SyntaxError as e:
        raise InvalidAction(f"the code does not parse: {e.msg} (line {e.lineno})") from None
    raw: list[dict[str, Any]] = []
    for st in tree.body:
        if isinstance(st, ast.Import) and all(a.name in ("pyautogui", "time") for a in st.names):
            continue
        if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
            raise InvalidAction(f"only pyautogui calls are allowed, got {ast.unparse(st)!r}")
        fn = _function(st.value)
        try:
            raw += _RULES[fn](_call_args(st.value, fn))
        except KeyError as e:
            raise InvalidAction(f"{fn}() needs the argument {e.args[0]!r}") from None
        if len(raw) > MAX_CALLS:
            raise InvalidAction(f"at most {MAX_CALLS} actions per step")
    return [parse_action(r, screen) for r in raw]


def validate(step: DesktopStep, screen: tuple[int, int]) -> list[Action]:
    """The step's actions, validated (InvalidAction names the first problem)."""
    if step.code is not None and step.actions:
        raise InvalidAction("send actions or code, not both")
    acts = (
        parse_code(step.code, screen)
        if step.code is not None
        else [parse_action(a, screen) for a in step.actions]
    )
    if any(a.type in END_TYPES for a in acts[:-1]):
        raise InvalidAction("DONE / FAIL must be the step's last action")
    if sum(a.seconds for a in acts) > MAX_WAIT_S:  # a step holds a service thread: bounded
        raise InvalidAction(f"at most {MAX_WAIT_S:g} s of waiting per step")
    if sum(len(a.text) for a in acts) > MAX_TEXT:  # typed at 12 ms a key: ~24 s at most
        raise InvalidAction(f"at most {MAX_TEXT} typed characters per step")
    return acts
