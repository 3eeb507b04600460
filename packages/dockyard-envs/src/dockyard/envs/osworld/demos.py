"""Oracle demonstrations: a task's scripted oracle played on the environment's desktop, each
turn recorded as the policy would have seen it (the screen's text and screenshot) and what the
oracle answered. SFT on them warm-starts a vision-language policy before GRPO
(``dockyard osworld warmstart``).

    demo = await demonstrate(env, task)   # None unless the oracle solved it (score 1)
    demo.prompt                            # env.prompt(task)
    demo.first                             # the screen before the first turn
    demo.turns                             # [Shown(action, the screen after it), ...]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dockyard.envs.osworld.agents import OracleAgent
from dockyard.envs.osworld.env import OSWorldEnvironment


@dataclass
class Shown:
    """A turn: the oracle's ``action`` (empty for the first screen) and what the policy was
    shown after it: ``observation`` text and ``screenshots`` (PNG, base64; none after the
    last turn)."""

    action: str
    observation: str = ""
    screenshots: list[str] = field(default_factory=list)


@dataclass
class Demonstration:
    task_id: str
    prompt: list[dict[str, str]]
    first: Shown
    turns: list[Shown]
    score: float


async def demonstrate(env: OSWorldEnvironment, task: dict[str, Any]) -> Demonstration | None:
    """The oracle's episode on ``task`` (``env`` with ``screenshots``); None if the oracle did
    not solve it. A failed set-up or service raises RuntimeError (an infrastructure fault, not
    a bad demonstration)."""
    if not env.screenshots:
        raise ValueError("demonstrations for a vision-language policy need screenshots=True")
    agent = OracleAgent(task)
    state = await env.reset(task)
    try:
        first = await env.observe(state)
        if first is None:
            raise RuntimeError(f"task {task.get('id')}: {state['infra_error'] or 'no screen'}")
        shown = Shown("", first.observation or "", _screens(first.metadata))
        turns: list[Shown] = []
        for _ in range(env.max_turns):
            action = agent.act(state["obs"])
            result = await env.step(state, action)
            if result.infra_error:
                raise RuntimeError(f"task {task.get('id')}: {result.metadata.get('infra_reason')}")
            turns.append(Shown(action, result.observation or "", _screens(result.metadata)))
            if result.done:
                score = float(result.metadata.get("score", 0.0))
                if score < 1.0:
                    return None
                turns[-1] = Shown(action)  # the episode ended: nothing shown after it
                return Demonstration(str(task.get("id")), env.prompt(task), shown, turns, score)
        return None
    finally:
        await env.close(state)


def _screens(meta: dict[str, Any]) -> list[str]:
    png = meta.get("screenshot_png_b64")
    return [png] if png and meta.get("images") else []
