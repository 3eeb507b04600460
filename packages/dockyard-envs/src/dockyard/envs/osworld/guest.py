"""The guest an OSWorld task runs on: a sandbox session and its desktop (async).

:class:`SessionGuest` creates the session, starts its desktop (Xvfb + openbox), applies a task's
``config`` (files shipped in the task's folder placed, commands run, programs launched) and
serves the evaluator's getters (files, commands, window titles) and the agent's steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from pathlib import Path
from typing import Any

import httpx

from dockyard.envs.osworld.guestpath import workspace_path
from dockyard.sandbox.client import SandboxRequestError
from dockyard.sandbox.desktop.backend import AsyncSandboxDesktop
from dockyard.sandbox.desktop.wire import DesktopObservation, DesktopSpec, DesktopStep
from dockyard.sandbox.models import Limits, SessionCreate


def _cmd(c: str | list[str]) -> str:
    return c if isinstance(c, str) else shlex.join(c)


class SessionGuest:
    """One episode's guest. ``client``: an ``AsyncSandboxClient``."""

    def __init__(self, client: Any, screen: tuple[int, int], limits: Limits, ttl_s: float = 900.0):
        self.client, self.screen, self.limits, self.ttl_s = client, screen, limits, ttl_s
        self.session_id: str | None = None
        self.desktop: AsyncSandboxDesktop | None = None
        self.last: DesktopObservation | None = None

    async def start(self, config: list[dict[str, Any]], folder: Path) -> DesktopObservation:
        """A fresh session with the task's config applied; the first observation."""
        spec = SessionCreate(limits=self.limits, ttl_s=self.ttl_s)
        self.session_id = await self.client.create_session(spec)
        self.desktop = AsyncSandboxDesktop(self.client, self.session_id)
        w, h = self.screen
        self.last = await self.desktop.start(DesktopSpec(width=w, height=h))
        for step in config:
            await self._config(step, folder)
        return self.last

    async def _config(self, step: dict[str, Any], folder: Path) -> None:
        t, p = step["type"], step.get("parameters") or {}
        if self.desktop is None or self.session_id is None:
            raise RuntimeError("start() the guest before configuring it")
        if t == "download":
            for f in p.get("files") or []:
                data = (folder / str(f["url"]).removeprefix("file://")).read_bytes()
                await self.client.put_file(self.session_id, workspace_path(f["path"]), data)
        elif t in ("execute", "command"):
            r = await self.client.exec(self.session_id, _cmd(p["command"]), timeout_s=60)
            if r.exit_code != 0:
                raise RuntimeError(f"config {t} {p['command']!r} failed: {r.stderr[-500:]}")
        elif t == "launch":
            self.last = await self.desktop.step(DesktopStep(launch=[_cmd(p["command"])]))
        elif t == "open":
            path = shlex.quote(workspace_path(p["path"]))
            self.last = await self.desktop.step(DesktopStep(launch=[f"xedit {path}"]))
        elif t == "activate_window":
            name = shlex.quote(str(p["window_name"]))
            act = f"xdotool search --sync --limit 1 --name {name} windowactivate"
            self.last = await self.desktop.step(DesktopStep(launch=[act]))
        elif t == "sleep":
            await asyncio.sleep(float(p.get("seconds", 1.0)))

    async def step(self, step: DesktopStep) -> DesktopObservation:
        assert self.desktop is not None
        self.last = await self.desktop.step(step)
        return self.last

    async def read_file(self, rel: str) -> bytes | None:
        try:
            return await self.client.get_file(self.session_id, rel)
        except SandboxRequestError as e:
            if e.status in (404, 422):
                return None
            raise

    async def run(self, command: str) -> str:
        r = await self.client.exec(self.session_id, command, timeout_s=30)
        return r.stdout

    async def window_state(self) -> tuple[str, list[str]]:
        obs = await self.step(DesktopStep(screenshot=False, wait_s=0.0))
        return obs.active_title, [w.title for w in obs.windows]

    async def close(self) -> None:
        if self.session_id is not None:
            # on failure the service reaps the idle session after its ttl
            with contextlib.suppress(SandboxRequestError, httpx.HTTPError):
                await self.client.delete_session(self.session_id)
            self.session_id = None
