"""The VNC guest backend: any VNC server (a VM's console, a Windows or macOS guest) behind the
same :class:`~dockyard.sandbox.desktop.backend.DesktopBackend` interface as the sandbox desktop.

The same validated actions (actions.py / pyautogui.py) become RFB events instead of xdotool
calls: pointer events with a button mask (clicks, drags, wheel buttons 4-7), key events with X
keysyms (what RFB speaks, on every guest OS); the observation is the framebuffer (PNG). A VNC
guest has no window list and cannot launch programs: ``windows`` stays empty, ``launch`` is
refused. The RFB client is vncdotool's (``pip install "dockyard-sandbox[vnc]"``).
"""

from __future__ import annotations

import base64
import io
import time
from typing import Any

from dockyard.sandbox.desktop.actions import BUTTONS, END_TYPES, PUNCT, Action, InvalidAction
from dockyard.sandbox.desktop.pyautogui import validate
from dockyard.sandbox.desktop.wire import DesktopObservation, DesktopSpec, DesktopStep

# X keysym names (actions.py) -> codes
_CODES = {
    "Return": 0xFF0D, "Tab": 0xFF09, "Escape": 0xFF1B, "BackSpace": 0xFF08, "Delete": 0xFFFF,
    "space": 0x20, "Left": 0xFF51, "Up": 0xFF52, "Right": 0xFF53, "Down": 0xFF54,
    "Home": 0xFF50, "End": 0xFF57, "Page_Up": 0xFF55, "Page_Down": 0xFF56, "Insert": 0xFF63,
    "Shift_L": 0xFFE1, "Shift_R": 0xFFE2, "Control_L": 0xFFE3, "Control_R": 0xFFE4,
    "Caps_Lock": 0xFFE5, "Alt_L": 0xFFE9, "Alt_R": 0xFFEA, "Super_L": 0xFFEB, "Super_R": 0xFFEC,
    "Print": 0xFF61, "Menu": 0xFF67,
    **{f"F{i}": 0xFFBE + i - 1 for i in range(1, 13)},
    **{name: ord(ch) for ch, name in PUNCT.items()},
}  # fmt: skip


def keysym_code(name: str) -> int:
    """An X keysym name (or one ASCII character) -> its code."""
    if name in _CODES:
        return _CODES[name]
    if len(name) == 1 and name.isascii():
        return {"\n": 0xFF0D, "\t": 0xFF09}.get(name, ord(name))
    raise InvalidAction(f"no keysym code for {name!r}")


def _factory() -> Any:
    """vncdotool's factory with a client whose raw RFB events return the client: its threaded
    proxy chains every call's result into the next call, so a method must return ``self``."""
    # lazy: vncdotool is the vnc extra's, not a dependency of dockyard-sandbox
    from vncdotool.client import VNCDoToolClient, VNCDoToolFactory

    class Client(VNCDoToolClient):
        def keysym(self, code: int, down: bool) -> Client:
            self.keyEvent(code, down=down)
            return self

        def pointer(self, x: int, y: int, mask: int) -> Client:
            self.pointerEvent(x, y, buttonmask=mask)
            return self

    class Factory(VNCDoToolFactory):
        protocol = Client

    return Factory


class VncDesktop:
    """A VNC server at ``host:port`` as a desktop guest (blocking; vncdotool's reactor thread)."""

    def __init__(self, host: str, port: int = 5900, password: str | None = None) -> None:
        try:
            # lazy: vncdotool is the vnc extra's, not a dependency of dockyard-sandbox
            from vncdotool import api
        except ImportError as e:
            raise ImportError(
                'the VNC backend needs vncdotool: pip install "dockyard-sandbox[vnc]"'
            ) from e
        self._api = api
        self.client: Any = api.connect(
            f"{host}::{port}", password=password, factory_class=_factory(), timeout=60
        )
        self.x = self.y = self.buttons = 0
        self.screen = (0, 0)

    def _pointer(self, x: int | None = None, y: int | None = None) -> None:
        if x is not None:
            self.x, self.y = x, y
        self.client.pointer(self.x, self.y, self.buttons)

    def _click(self, button: int, n: int = 1) -> None:
        for _ in range(n):
            self.buttons |= 1 << (button - 1)
            self._pointer()
            self.buttons &= ~(1 << (button - 1))
            self._pointer()

    def _keys(self, names: tuple[str, ...] | list[str], down: bool = True, up: bool = True) -> None:
        codes = [keysym_code(k) for k in names]
        for c in codes if down else []:
            self.client.keysym(c, True)
        for c in reversed(codes) if up else []:
            self.client.keysym(c, False)

    def perform(self, a: Action) -> None:
        """One validated action as RFB events."""
        if a.x is not None and a.type != "DRAG_TO":
            self._pointer(a.x, a.y)
        t, btn = a.type, BUTTONS[a.button]
        if t in ("CLICK", "RIGHT_CLICK", "DOUBLE_CLICK"):
            self._click(btn, 2 if t == "DOUBLE_CLICK" else a.clicks)
        elif t in ("MOUSE_DOWN", "MOUSE_UP"):
            self.buttons = (
                self.buttons | (1 << btn - 1)
                if t == "MOUSE_DOWN"
                else self.buttons & ~(1 << btn - 1)
            )
            self._pointer()
        elif t == "DRAG_TO":
            self.buttons |= 1
            self._pointer()
            self._pointer(a.x, a.y)
            self.buttons &= ~1
            self._pointer()
        elif t == "SCROLL":
            if a.dy:
                self._click(4 if a.dy > 0 else 5, abs(a.dy))
            if a.dx:
                self._click(7 if a.dx > 0 else 6, abs(a.dx))
        elif t == "TYPING":
            for ch in a.text:
                self._keys([ch])
        elif t in ("PRESS", "HOTKEY"):
            self._keys(a.keys)
        elif t in ("KEY_DOWN", "KEY_UP"):
            self._keys(a.keys, down=t == "KEY_DOWN", up=t == "KEY_UP")
        elif t == "WAIT":
            time.sleep(a.seconds)

    def _observe(self, step: DesktopStep, obs: DesktopObservation) -> DesktopObservation:
        self.client.refreshScreen(incremental=False)
        im = self.client.screen.copy()
        self.screen = obs.screen = im.size
        if step.screenshot:
            if step.size:
                im = im.resize(step.size)
            buf = io.BytesIO()
            im.convert("RGB").save(buf, "PNG", compress_level=3)
            obs.png_b64, obs.size = base64.b64encode(buf.getvalue()).decode(), im.size
        return obs

    def start(self, spec: DesktopSpec) -> DesktopObservation:
        """A VNC guest is already running: the first observation (``launch`` is refused)."""
        if spec.launch:
            raise ValueError("a VNC guest cannot launch programs: start them on the guest")
        obs = self._observe(DesktopStep(), DesktopObservation(screen=(0, 0), started=True))
        return obs

    def step(self, step: DesktopStep) -> DesktopObservation:
        if step.launch:
            raise ValueError("a VNC guest cannot launch programs: start them on the guest")
        if self.screen == (0, 0):
            self._observe(DesktopStep(screenshot=False), DesktopObservation(screen=(0, 0)))
        obs = DesktopObservation(screen=self.screen)
        try:
            acts = validate(step, self.screen)
        except InvalidAction as e:
            acts, obs.invalid = [], str(e)
        for a in acts:
            self.perform(a)
        obs.actions = [a.to_dict() for a in acts]
        obs.ended = acts[-1].type if acts and acts[-1].type in END_TYPES else None
        time.sleep(step.wait_s)
        return self._observe(step, obs)

    def close(self) -> None:
        self.client.disconnect()
