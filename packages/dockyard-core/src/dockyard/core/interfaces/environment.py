"""The environment: scores single-turn responses and steps multi-turn episodes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepResult:
    """What an environment returns for one response (or one turn).

    Attributes:
        rewards: named components, e.g. ``{"reward/tests": 1.0, "reward/format": 0.0}``.
        done: the episode is over (always True for single-turn environments).
        observation: text to append to the conversation as the next user/tool turn (multi-turn).
        infra_error: the reward could not be computed (sandbox down...): mask, do not score 0.
        metadata: verdict, timings, integrity flags (``tests_tampered``...). ``images``: the
            images the observation shows (``[H, W, 3] uint8``, a screen): a vision-language
            policy reads them before the observation's text.
    """

    rewards: dict[str, float] = field(default_factory=dict)
    done: bool = True
    observation: str | None = None
    infra_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


class Environment(ABC):
    """Tasks and their scoring. ``task`` is a JSON-like dict from the environment's dataset."""

    @abstractmethod
    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        """The chat messages that pose ``task`` to the policy."""

    @abstractmethod
    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        """Single-turn: score one complete response."""

    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        """Multi-turn: start an episode; returns its state. Single-turn environments keep this."""
        return {"task": task, "turn": 0}

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        """Multi-turn: apply one policy turn. Single-turn environments score and finish."""
        return await self.score(state["task"], response)

    async def observe(self, state: dict[str, Any]) -> StepResult | None:
        """Multi-turn: what the policy sees before its first turn (a screen, with its
        ``images``), added to the prompt's last user message; None (the default): the prompt
        alone."""
        return None

    async def close(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Multi-turn: release what the episode holds (sandbox sessions...)."""

    async def finish(self, state: dict[str, Any], response: str) -> StepResult | None:
        """Multi-turn: the rollout's turn limit (``grpo.max_rollout_turns``) ends the episode
        before the environment did, ``response`` its last turn: the verdict on the episode as
        it stands (run the tests now). None where the environment has none before its own end
        (the last step's result then stands)."""
        return None

    def tool_specs(self) -> list[dict[str, Any]]:
        """The tools the policy may call, as OpenAI function specs (``{"type": "function",
        "function": {"name", "description", "parameters"}}``); empty for an environment
        without tools. Grammar-constrained decoding of tool calls is built from these."""
        return []
