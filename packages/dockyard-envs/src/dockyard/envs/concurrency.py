"""A bound on how many responses one environment scores at once (``env.<name>.max_concurrency``).

:class:`ConcurrencyLimited` wraps any :class:`~dockyard.core.interfaces.Environment`: at most
``max_concurrency`` calls of ``score`` / ``step`` run at a time (per event loop), the others wait
their turn; ``prompt``, ``reset``, ``close`` and every other attribute go straight to the wrapped
environment. The trainer wraps the environment it builds from the config
(``dockyard.train.environments.build_environment``), so a sandbox or verifier is never sent more
than that many responses by one collector, however many groups are in flight.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from dockyard.core.interfaces.environment import Environment, StepResult


class ConcurrencyLimited(Environment):
    """``env`` with at most ``max_concurrency`` ``score`` / ``step`` calls in flight."""

    def __init__(self, env: Environment, max_concurrency: int) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        self.env = env
        self.max_concurrency = max_concurrency
        # one semaphore per running loop: a semaphore waits on the loop it first waited on
        self._sems: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def _sem(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._sems.get(loop)
        if sem is None:
            sem = self._sems[loop] = asyncio.Semaphore(self.max_concurrency)
        return sem

    def __getattr__(self, name: str) -> Any:  # only reached for what this class lacks
        env = self.__dict__.get("env")
        if env is None:
            raise AttributeError(name)
        return getattr(env, name)

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return self.env.prompt(task)

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        async with self._sem():
            return await self.env.score(task, response)

    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        return await self.env.reset(task)

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        async with self._sem():
            return await self.env.step(state, response)

    async def observe(self, state: dict[str, Any]) -> StepResult | None:
        return await self.env.observe(state)

    async def close(self, state: dict[str, Any]) -> None:
        await self.env.close(state)

    async def finish(self, state: dict[str, Any], response: str) -> StepResult | None:
        async with self._sem():
            return await self.env.finish(state, response)

    def tool_specs(self) -> list[dict[str, Any]]:
        return self.env.tool_specs()
