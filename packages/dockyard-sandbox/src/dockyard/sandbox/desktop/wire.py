"""Requests and observations of a session's desktop (``/v1/sessions/{sid}/desktop/...``).

Light (pydantic only): the client, the service and the environments all import it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DesktopSpec(_Model):
    """The virtual screen of a session's desktop (Xvfb) and what opens on it at start."""

    width: int = Field(1024, ge=64, le=3840, description="Screen width in pixels.")
    height: int = Field(768, ge=64, le=2160, description="Screen height in pixels.")
    window_manager: bool = Field(True, description="Run openbox (title bars, focus, moving).")
    launch: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Shell commands started on the desktop at start (in the session's jail, "
        "cwd /workspace), e.g. 'xterm' (OSWorld's config 'launch').",
    )


class DesktopStep(_Model):
    """One step: actions (OSWorld's dict form) *or* pyautogui code, then an observation.

    An invalid action or code is not executed at all: the observation says why (``invalid``)
    and the environment penalises it."""

    actions: list[Any] = Field(default_factory=list, max_length=32)
    code: str | None = Field(None, max_length=10_000, description="OSWorld's pyautogui form.")
    launch: list[str] = Field(
        default_factory=list, max_length=16, description="Shell commands started on the desktop."
    )
    wait_s: float = Field(0.3, ge=0, le=10, description="Settle time before the observation.")
    screenshot: bool = True
    size: tuple[int, int] | None = Field(
        None, description="Scale the screenshot to (width, height); None: the screen's size."
    )
    windows: bool = Field(True, description="List the visible windows (title, geometry).")

    @field_validator("launch")
    @classmethod
    def _launch(cls, v: list[str]) -> list[str]:
        for c in v:
            if not c.strip() or len(c) > 4096 or "\x00" in c:
                raise ValueError("launch: each command non-empty, at most 4096 chars, no NUL")
        return v

    @field_validator("size")
    @classmethod
    def _size(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and not (16 <= v[0] <= 3840 and 16 <= v[1] <= 2160):
            raise ValueError("size: (width, height) within 16..3840 x 16..2160")
        return v


class Window(_Model):
    """A visible top-level window: its title, WM class and geometry on the screen."""

    id: int
    title: str = ""
    wm_class: str = ""
    x: int = 0
    y: int = 0
    width: int = 0
    height: int = 0


class DesktopObservation(_Model):
    screen: tuple[int, int] = Field(description="The screen's (width, height).")
    png_b64: str = Field("", description="The screenshot, PNG, base64 ('' if not asked).")
    size: tuple[int, int] | None = Field(None, description="The screenshot's (width, height).")
    windows: list[Window] = Field(default_factory=list)
    active_title: str = Field("", description="Title of the focused window.")
    actions: list[dict[str, Any]] = Field(
        default_factory=list, description="The actions executed, in OSWorld's dict form."
    )
    invalid: str | None = Field(None, description="Why the step's actions were refused.")
    ended: str | None = Field(None, description="'DONE' or 'FAIL' when the agent ended.")
    errors: list[str] = Field(default_factory=list, description="xdotool failures.")
    alive: bool = True
    started: bool = Field(False, description="The desktop was (re)started by this call.")
