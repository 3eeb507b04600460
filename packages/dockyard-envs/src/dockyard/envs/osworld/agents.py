"""Scripted agents: the oracle (a task's ``oracle`` steps) and the one that does nothing.

An oracle step is pyautogui code (or ``WAIT`` / ``DONE`` / ``FAIL``) in which ``{Title.x+N}`` /
``{Title.y+N}`` stand for a pixel of the visible window titled ``Title`` (its client area's
corner plus N): windows open where the window manager puts them, the widgets inside them are at
fixed places. While the named window is not visible yet, the oracle waits (a ``WAIT`` step).
"""

from __future__ import annotations

import re
from typing import Any

from dockyard.sandbox.desktop.wire import DesktopObservation

_WINDOW_REF = re.compile(r"\{([^{}]+)\.([xy])([+-]\d+)?\}")


class MissingWindow(LookupError):
    pass


def resolve(step: str, obs: DesktopObservation) -> str:
    """``step`` with every ``{Title.x+N}`` replaced by a pixel (MissingWindow if not shown)."""

    def sub(m: re.Match[str]) -> str:
        title, axis, off = m.group(1), m.group(2), int(m.group(3) or 0)
        for w in obs.windows:
            if w.title == title:
                return str((w.x if axis == "x" else w.y) + off)
        raise MissingWindow(title)

    return _WINDOW_REF.sub(sub, step)


class OracleAgent:
    """Plays a task's scripted ``oracle`` steps, waiting for the windows they name."""

    def __init__(self, task: dict[str, Any], max_waits: int = 40) -> None:
        if not task.get("oracle"):
            raise ValueError(f"task {task.get('id')!r} has no oracle")
        self.steps = list(task["oracle"])
        self.i, self.waits, self.max_waits = 0, 0, max_waits

    def act(self, obs: DesktopObservation) -> str:
        if self.i >= len(self.steps):
            return "DONE"
        try:
            step = resolve(self.steps[self.i], obs)
        except MissingWindow as e:
            self.waits += 1
            if self.waits > self.max_waits:
                raise RuntimeError(f"the window {e.args[0]!r} never appeared") from e
            return "pyautogui.sleep(0.5)"
        self.i += 1
        return step


class NoopAgent:
    """Does nothing and declares the task done: must score 0 on every task."""

    def __init__(self, task: dict[str, Any]) -> None:
        pass

    def act(self, obs: DesktopObservation) -> str:
        return "DONE"
