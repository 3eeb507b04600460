"""``ConcurrencyLimited``: at most ``max_concurrency`` ``score`` / ``step`` calls of one environment
are in flight, however many are started; everything else reaches the wrapped environment."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dockyard.core.interfaces.environment import Environment, StepResult
from dockyard.envs.concurrency import ConcurrencyLimited


class CountingEnv(Environment):
    """Scores after a short sleep, recording how many calls overlap."""

    name = "counting"

    def __init__(self) -> None:
        self.now = self.peak = self.calls = 0

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": task["q"]}]

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        self.now += 1
        self.calls += 1
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(0.01)
        self.now -= 1
        return StepResult(rewards={"reward/correct": float(response == task["a"])})


def test_at_most_max_concurrency_scores_are_in_flight() -> None:
    inner = CountingEnv()
    env = ConcurrencyLimited(inner, 2)

    async def main() -> list[StepResult]:
        task = {"q": "1+1", "a": "2"}
        return await asyncio.gather(*(env.score(task, str(i % 3)) for i in range(9)))

    results = asyncio.run(main())
    assert (inner.calls, inner.peak) == (9, 2)
    assert [r.rewards["reward/correct"] for r in results] == [0.0, 0.0, 1.0] * 3


def test_steps_count_too_and_the_rest_is_delegated() -> None:
    inner = CountingEnv()
    env = ConcurrencyLimited(inner, 3)

    async def main() -> None:
        states = [await env.reset({"q": "x", "a": "y"}) for _ in range(8)]
        await asyncio.gather(*(env.step(s, "y") for s in states))
        await asyncio.gather(*(env.close(s) for s in states))

    asyncio.run(main())
    assert (inner.calls, inner.peak) == (8, 3)
    assert env.prompt({"q": "hi"}) == [{"role": "user", "content": "hi"}]
    assert env.name == "counting"  # attributes of the environment itself
    asyncio.run(main())  # a second event loop gets its own semaphore
    assert inner.peak == 3


def test_max_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ConcurrencyLimited(CountingEnv(), 0)
