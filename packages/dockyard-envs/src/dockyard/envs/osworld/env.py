"""The OSWorld environment: the policy sees a desktop and drives it with mouse and keyboard.

Episode::

    state = await env.reset(task)             # a sandbox session + its desktop, config applied
    while True:
        result = await env.step(state, turn)  # pyautogui code (or WAIT/DONE/FAIL) -> xdotool
        if result.done: break                 # DONE/FAIL, or max_turns
    await env.close(state)                    # the session (and its desktop) deleted

A turn is pyautogui code, in a ```python block or bare, or one of ``WAIT`` / ``DONE`` /
``FAIL`` (OSWorld's pyautogui action space). The service validates it (sandbox
desktop/pyautogui.py: parsed, never executed); a refused turn runs nothing, costs
``reward.invalid_action_penalty`` and is counted (``metadata["invalid_actions"]``).

Observations: the screenshot (PNG, base64, in ``metadata["screenshot_png_b64"]``; with
``screenshots``, also ``metadata["images"]``, the ``[H, W, 3]`` array a vision-language policy
reads, and the first screen before the first turn through ``observe``; ``obs_size`` scales it)
and a text form of the screen (the visible windows' titles and places, the focused one).

Reward: ``reward/task`` = the task evaluator's score in [0, 1] (evaluators.py) at the end,
``reward/invalid_action`` = ``-penalty x n``. A crashed service or a failed task set-up is an
``infra_error`` (masked); a desktop the agent itself broke (its display exited) ends the episode
and is scored like any other state. With ``replay_dir``, every episode's frames and actions are
saved there (record.py; ``dockyard.envs.osworld.replay.write_gif`` animates them).
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.osworld.evaluators import evaluate
from dockyard.envs.osworld.guest import SessionGuest
from dockyard.envs.osworld.record import Recorder
from dockyard.envs.rewards import INVALID_ACTION, RewardConfig, infra_failure
from dockyard.envs.sandboxed import SandboxPool
from dockyard.sandbox.client import SandboxRequestError, SandboxUnavailable
from dockyard.sandbox.desktop.backend import DesktopError
from dockyard.sandbox.desktop.wire import DesktopObservation, DesktopStep
from dockyard.sandbox.models import Limits

TASK = "reward/task"
SYSTEM = (
    "You control a Linux desktop ({w}x{h} pixels) with Python pyautogui calls. Each turn, "
    "answer with code in a ```python block: pyautogui.click(x, y), doubleClick, rightClick, "
    "moveTo, dragTo, scroll(n), write('text'), press('enter'), hotkey('ctrl', 's'), "
    "time.sleep(s). Answer WAIT to wait, DONE when the task is complete, FAIL if it cannot "
    "be done."
)
_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_code(response: str) -> str:
    """The turn's action: the last ```python block, else the whole text."""
    blocks = _CODE.findall(response)
    return blocks[-1].strip() if blocks else response.strip()


def screenshot_array(png_b64: str) -> np.ndarray:
    """A screenshot as ``[H, W, 3] uint8`` RGB."""
    # lazy: pillow is the osworld extra; only a vision-language policy's screenshots need it
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(png_b64))) as im:
        return np.array(im.convert("RGB"))  # writable (torch warns on a read-only one)


def describe(obs: DesktopObservation) -> str:
    """The screen as text: focused window, visible windows and where they are."""
    lines = [f"Screen {obs.screen[0]}x{obs.screen[1]}. Focused: {obs.active_title or '(none)'}."]
    for w in obs.windows:
        lines.append(f"- window {w.title!r} at ({w.x}, {w.y}) size {w.width}x{w.height}")
    if obs.invalid:
        lines.append(f"Your last action was refused: {obs.invalid}")
    return "\n".join(lines)


class OSWorldEnvironment(BaseEnvironment):
    """OSWorld tasks on a sandbox session's desktop (see the module docstring)."""

    name = "osworld"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward: RewardConfig | None = None,
        max_turns: int = 15,
        screen: tuple[int, int] = (640, 480),
        obs_size: tuple[int, int] | None = None,
        settle_s: float = 0.4,
        limits: Limits | None = None,
        replay_dir: str | None = None,
        max_wait_s: float = 120.0,
        screenshots: bool = False,
    ) -> None:
        super().__init__(reward)
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.pool = SandboxPool(sandbox_urls, token, max_wait_s=max_wait_s)
        self.max_turns, self.settle_s = max_turns, settle_s
        self.screen, self.obs_size = tuple(screen), obs_size
        self.limits = limits or Limits(memory_mb=1024, pids=256)
        self.replay_dir = replay_dir
        self.screenshots = screenshots

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        w, h = self.screen
        return [
            {"role": "system", "content": SYSTEM.format(w=w, h=h)},
            {"role": "user", "content": task["instruction"]},
        ]

    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        guest = SessionGuest(self.pool.client(), self.screen, self.limits)  # type: ignore[arg-type]
        state: dict[str, Any] = {
            "task": task, "guest": guest, "turn": 0, "invalid_actions": 0, "done": False,
            "infra_error": None, "obs": None, "ended": None,
            "recorder": Recorder(self.replay_dir, task) if self.replay_dir else None,
        }  # fmt: skip
        try:
            await guest.start(task.get("config") or [], Path(task["folder"]))
            state["obs"] = await guest.step(DesktopStep(wait_s=self.settle_s, size=self.obs_size))
        except (SandboxUnavailable, SandboxRequestError, DesktopError, httpx.HTTPError) as e:
            state["infra_error"] = f"task set-up: {e}"
        except RuntimeError as e:  # a config command failed: the task's set-up, not the agent
            state["infra_error"] = str(e)
        return state

    def observation(self, state: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The current screen: its text form, and metadata with the screenshot (with
        ``screenshots``, also as the image a vision-language policy reads)."""
        obs: DesktopObservation = state["obs"]
        meta: dict[str, Any] = {"screenshot_png_b64": obs.png_b64, "screen": list(obs.screen)}
        if self.screenshots:
            meta["images"] = [screenshot_array(obs.png_b64)]
        return describe(obs), meta

    async def observe(self, state: dict[str, Any]) -> StepResult | None:
        """With ``screenshots``: the desktop as the task left it, before the first turn (a
        failed set-up shows nothing: the first step reports it)."""
        if not self.screenshots or state["infra_error"] or state["obs"] is None:
            return None
        text, meta = self.observation(state)
        return StepResult(rewards={}, done=False, observation=text, metadata=meta)

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        if state["done"]:
            raise ValueError("step() after the episode ended: call reset() for a new episode")
        if state["infra_error"]:
            state["done"] = True
            return infra_failure(state["infra_error"], turn=state["turn"])
        state["turn"] += 1
        rec: Recorder | None = state["recorder"]
        seen = rec.frame(state["obs"]) if rec else None
        step = DesktopStep(code=extract_code(response), wait_s=self.settle_s, size=self.obs_size)
        try:
            obs = await state["guest"].step(step)
        except DesktopError as e:
            if e.status != 409:
                state["done"] = True
                return infra_failure(f"desktop step: {e}", turn=state["turn"])
            state["ended"] = "BROKEN"  # the agent's doing: its display exited; scored as is
            return await self._finish(state, response)
        except (SandboxUnavailable, httpx.HTTPError) as e:
            state["done"] = True
            return infra_failure(f"desktop step: {e}", turn=state["turn"])
        state["obs"] = obs
        if rec:
            rec.step(response, seen, obs)
        if obs.invalid:
            state["invalid_actions"] += 1
        state["ended"] = obs.ended
        if obs.ended or state["turn"] >= self.max_turns:
            return await self._finish(state, response)
        text, meta = self.observation(state)
        return StepResult(rewards={}, done=False, observation=text, metadata=meta)

    async def finish(self, state: dict[str, Any], response: str) -> StepResult:
        """The rollout's turn limit came first: the task's evaluator decides on the desktop as
        the agent left it."""
        return await self._finish(state, response)

    async def _finish(self, state: dict[str, Any], response: str) -> StepResult:
        state["done"] = True
        task = state["task"]
        try:
            score = await evaluate(
                task["evaluator"], state["guest"], Path(task["folder"]), state["ended"]
            )
        except (SandboxUnavailable, httpx.HTTPError) as e:
            return infra_failure(f"evaluation: {e}", turn=state["turn"])
        except DesktopError:
            score = 0.0  # a window getter on a desktop the agent broke
        rec: Recorder | None = state["recorder"]
        meta = {
            "task_id": task.get("id"), "turns": state["turn"], "end_reason": state["ended"]
            or "max_turns", "invalid_actions": state["invalid_actions"], "score": score,
        }  # fmt: skip
        if rec:
            if state["obs"] is not None:
                rec.final(state["obs"])
            meta["replay"] = str(rec.save(score, screen=list(self.screen)))
        rewards = {
            TASK: score,
            INVALID_ACTION: -self.reward.invalid_action_penalty * state["invalid_actions"],
        }
        return self._shape(StepResult(rewards=rewards, done=True, metadata=meta), response)

    async def close(self, state: dict[str, Any]) -> None:
        await state["guest"].close()

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        """Single-turn use: one response is the whole episode, then the evaluator."""
        state = await self.reset(task)
        try:
            result = await self.step(state, response)
            if not result.done:
                result = await self._finish(state, response)
            return result
        finally:
            await self.close(state)
