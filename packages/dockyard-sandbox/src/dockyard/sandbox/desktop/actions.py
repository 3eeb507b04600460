"""OSWorld's action space (``computer_13``), validated, and its rendering as xdotool commands.

An agent's action is a dict ``{"action_type": "CLICK", "parameters": {"x": 10, "y": 20}}`` with
one of OSWorld's types: ``MOVE_TO``, ``CLICK``, ``MOUSE_DOWN``, ``MOUSE_UP``, ``RIGHT_CLICK``,
``DOUBLE_CLICK``, ``DRAG_TO``, ``SCROLL``, ``TYPING``, ``PRESS``, ``KEY_DOWN``, ``KEY_UP``,
``HOTKEY``, ``WAIT``, ``FAIL``, ``DONE``. :func:`parse_action` turns one into an :class:`Action`
or raises :class:`InvalidAction` naming what is wrong (an unknown type or key, a coordinate off
the screen, a text too long): the environment penalises and counts those, it never guesses.

:func:`xdotool_argv` renders a valid action as argument lists for ``xdotool`` (never a shell
line: the text to type is one argument after ``--``). The VNC backend renders the same
:class:`Action` as RFB events instead (vnc.py), so both guests obey one validated vocabulary.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

MAX_TEXT = 2000  # characters of one TYPING action
MAX_WAIT_S = 10.0
MAX_CLICKS = 3
MAX_SCROLL = 50
BUTTONS = {"left": 1, "middle": 2, "right": 3}
END_TYPES = frozenset({"DONE", "FAIL"})

# pyautogui's key names -> X keysyms (what xdotool and RFB take)
_NAMED_KEYS = {
    "enter": "Return", "return": "Return", "\n": "Return", "tab": "Tab", "\t": "Tab",
    "esc": "Escape", "escape": "Escape", "backspace": "BackSpace", "delete": "Delete",
    "del": "Delete", "space": "space", " ": "space", "up": "Up", "down": "Down", "left": "Left",
    "right": "Right", "home": "Home", "end": "End", "pageup": "Page_Up", "pgup": "Page_Up",
    "pagedown": "Page_Down", "pgdn": "Page_Down", "insert": "Insert", "ctrl": "Control_L",
    "ctrlleft": "Control_L", "ctrlright": "Control_R", "control": "Control_L", "alt": "Alt_L",
    "altleft": "Alt_L", "altright": "Alt_R", "shift": "Shift_L", "shiftleft": "Shift_L",
    "shiftright": "Shift_R", "win": "Super_L", "winleft": "Super_L", "winright": "Super_R",
    "super": "Super_L", "command": "Super_L", "cmd": "Super_L", "capslock": "Caps_Lock",
    "printscreen": "Print", "menu": "Menu",
    **{f"f{i}": f"F{i}" for i in range(1, 13)},
}  # fmt: skip
PUNCT = {
    "!": "exclam", '"': "quotedbl", "#": "numbersign", "$": "dollar", "%": "percent",
    "&": "ampersand", "'": "apostrophe", "(": "parenleft", ")": "parenright", "*": "asterisk",
    "+": "plus", ",": "comma", "-": "minus", ".": "period", "/": "slash", ":": "colon",
    ";": "semicolon", "<": "less", "=": "equal", ">": "greater", "?": "question", "@": "at",
    "[": "bracketleft", "\\": "backslash", "]": "bracketright", "^": "asciicircum",
    "_": "underscore", "`": "grave", "{": "braceleft", "|": "bar", "}": "braceright",
    "~": "asciitilde",
}  # fmt: skip
_KEYSYMS = frozenset(_NAMED_KEYS.values()) | frozenset(PUNCT.values())
_PRINTABLE = set(string.printable) - set("\x0b\x0c\r")


class InvalidAction(ValueError):
    """An action outside the action space; the message says what and how to write it."""


@dataclass(frozen=True)
class Action:
    """One validated action. ``x``/``y`` are screen pixels; ``keys`` are X keysyms."""

    type: str
    x: int | None = None
    y: int | None = None
    button: str = "left"
    clicks: int = 1
    dx: int = 0
    dy: int = 0
    text: str = ""
    keys: tuple[str, ...] = ()
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """OSWorld's dict form (what an episode's replay records)."""
        p: dict[str, Any] = {}
        if self.x is not None:
            p |= {"x": self.x, "y": self.y}
        if self.type in ("CLICK", "MOUSE_DOWN", "MOUSE_UP"):
            p |= {"button": self.button, "num_clicks": self.clicks}
        if self.type == "SCROLL":
            p |= {"dx": self.dx, "dy": self.dy}
        if self.type == "TYPING":
            p["text"] = self.text
        if self.type in ("PRESS", "KEY_DOWN", "KEY_UP"):
            p["key"] = self.keys[0]
        if self.type == "HOTKEY":
            p["keys"] = list(self.keys)
        if self.type == "WAIT":
            p["seconds"] = self.seconds
        return {"action_type": self.type, "parameters": p}


def keysym(name: Any) -> str:
    """pyautogui / OSWorld key name -> X keysym; InvalidAction for anything else."""
    if not isinstance(name, str) or not name:
        raise InvalidAction(f"a key must be a non-empty string, got {name!r}")
    low = name.lower()
    if low in _NAMED_KEYS:
        return _NAMED_KEYS[low]
    if name in PUNCT:
        return PUNCT[name]
    if len(name) == 1 and name.isascii() and name.isalnum():
        return name
    if name in _KEYSYMS:  # already a keysym (what an episode's record holds)
        return name
    raise InvalidAction(
        f"unknown key {name!r}: use a pyautogui key name (enter, tab, esc, ctrl, a, 1, f5, ...)"
    )


def _coord(p: dict[str, Any], screen: tuple[int, int], need: bool) -> tuple[int | None, int | None]:
    x, y = p.get("x"), p.get("y")
    if x is None and y is None and not need:
        return None, None
    if (
        isinstance(x, bool)
        or isinstance(y, bool)
        or not all(isinstance(v, int | float) for v in (x, y))
    ):
        raise InvalidAction(f"x and y must be numbers, got x={x!r}, y={y!r}")
    xi, yi = round(x), round(y)  # type: ignore[arg-type]
    if not (0 <= xi < screen[0] and 0 <= yi < screen[1]):
        raise InvalidAction(f"({xi}, {yi}) is off the {screen[0]}x{screen[1]} screen")
    return xi, yi


def _int(p: dict[str, Any], key: str, default: int, lo: int, hi: int) -> int:
    v = p.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InvalidAction(f"{key} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def _button(p: dict[str, Any]) -> str:
    b = p.get("button", "left")
    if b not in BUTTONS:
        raise InvalidAction(f"button must be one of {sorted(BUTTONS)}, got {b!r}")
    return b


def parse_action(raw: Any, screen: tuple[int, int]) -> Action:
    """OSWorld's dict form (or the bare strings ``WAIT``/``DONE``/``FAIL``) -> Action."""
    if isinstance(raw, str) and raw.strip().upper() in ("WAIT", "DONE", "FAIL"):
        raw = {"action_type": raw.strip().upper()}
    if not isinstance(raw, dict) or not isinstance(raw.get("action_type"), str):
        raise InvalidAction('an action is {"action_type": "CLICK", "parameters": {...}}')
    t, p = raw["action_type"].upper(), raw.get("parameters") or {}
    if not isinstance(p, dict):
        raise InvalidAction("parameters must be an object")
    if t in ("MOVE_TO", "DRAG_TO", "RIGHT_CLICK", "DOUBLE_CLICK"):
        x, y = _coord(p, screen, need=t in ("MOVE_TO", "DRAG_TO"))
        return Action(t, x, y, button="right" if t == "RIGHT_CLICK" else "left")
    if t == "CLICK":
        x, y = _coord(p, screen, need=False)
        return Action(t, x, y, _button(p), _int(p, "num_clicks", 1, 1, MAX_CLICKS))
    if t in ("MOUSE_DOWN", "MOUSE_UP"):
        return Action(t, button=_button(p))
    if t == "SCROLL":
        dx = _int(p, "dx", 0, -MAX_SCROLL, MAX_SCROLL)
        dy = _int(p, "dy", 0, -MAX_SCROLL, MAX_SCROLL)
        return Action(t, dx=dx, dy=dy)
    if t == "TYPING":
        text = p.get("text")
        if not isinstance(text, str) or not 0 < len(text) <= MAX_TEXT:
            raise InvalidAction(f"TYPING needs text of 1..{MAX_TEXT} characters")
        if not set(text) <= _PRINTABLE:
            raise InvalidAction("TYPING text must be printable ASCII (and newlines, tabs)")
        return Action(t, text=text)
    if t in ("PRESS", "KEY_DOWN", "KEY_UP"):
        return Action(t, keys=(keysym(p.get("key")),))
    if t == "HOTKEY":
        keys = p.get("keys")
        if not isinstance(keys, list) or not 1 <= len(keys) <= 4:
            raise InvalidAction("HOTKEY needs keys: a list of 1..4 key names")
        return Action(t, keys=tuple(keysym(k) for k in keys))
    if t == "WAIT":
        s = p.get("seconds", 1.0)
        if isinstance(s, bool) or not isinstance(s, int | float) or not 0 <= s <= MAX_WAIT_S:
            raise InvalidAction(f"WAIT seconds must be in [0, {MAX_WAIT_S}]")
        return Action(t, seconds=float(s))
    if t in END_TYPES:
        return Action(t)
    raise InvalidAction(f"unknown action_type {t!r}")


def xdotool_argv(a: Action) -> list[list[str]]:
    """The xdotool invocations (argument lists after ``xdotool``) that perform ``a``."""
    move = [["mousemove", str(a.x), str(a.y)]] if a.x is not None else []
    btn = str(BUTTONS[a.button])
    if a.type == "MOVE_TO":
        return move
    if a.type in ("CLICK", "RIGHT_CLICK"):
        return [*move, ["click", "--repeat", str(a.clicks), "--delay", "80", btn]]
    if a.type == "DOUBLE_CLICK":
        return [*move, ["click", "--repeat", "2", "--delay", "80", "1"]]
    if a.type == "MOUSE_DOWN":
        return [["mousedown", btn]]
    if a.type == "MOUSE_UP":
        return [["mouseup", btn]]
    if a.type == "DRAG_TO":
        return [["mousedown", "1"], ["mousemove", str(a.x), str(a.y)], ["mouseup", "1"]]
    if a.type == "SCROLL":
        out = []
        if a.dy:  # pyautogui: positive scrolls up (button 4)
            out.append(["click", "--repeat", str(abs(a.dy)), "4" if a.dy > 0 else "5"])
        if a.dx:
            out.append(["click", "--repeat", str(abs(a.dx)), "7" if a.dx > 0 else "6"])
        return out
    if a.type == "TYPING":
        return [["type", "--delay", "12", "--", a.text]]
    if a.type == "PRESS":
        return [["key", "--", a.keys[0]]]
    if a.type == "KEY_DOWN":
        return [["keydown", "--", a.keys[0]]]
    if a.type == "KEY_UP":
        return [["keyup", "--", a.keys[0]]]
    if a.type == "HOTKEY":
        return [["key", "--", "+".join(a.keys)]]
    return []  # WAIT, DONE, FAIL: nothing to send
