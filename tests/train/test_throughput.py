"""Generation throughput is per second of wall time: groups generated concurrently share their
seconds (the union of the requests' intervals), they are not summed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from dockyard.core.interfaces.environment import StepResult
from dockyard.core.interfaces.generation import GenerationResult, SamplingParams
from dockyard.train.data import TaskLoader
from dockyard.train.runtime.collector import Collector, GenerationClock

LATENCY_S = 0.3


class Tokenizer:
    eos_token = "<eos>"
    eos_token_id = 0

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False) -> str:
        return "".join(m["content"] for m in messages)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [1 + (ord(c) % 50) for c in text]


class SlowEngine:
    """Every request takes LATENCY_S and returns ``params.n`` samples of 3 tokens."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        await asyncio.sleep(LATENCY_S)
        return [
            GenerationResult(
                np.array([3, 4, 5], dtype=np.int64),
                np.full(3, -0.5, dtype=np.float32),
                "ok",
                "stop",
                np.zeros(3, dtype=np.int32),
            )
            for _ in range(params.n)
        ]


class Env:
    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": task["text"]}]

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        return StepResult(rewards={"reward/tests": 1.0})


class Buffer:
    def __init__(self) -> None:
        self.groups: list[Any] = []

    def put(self, group: Any) -> None:
        self.groups.append(group)


def test_concurrent_groups_are_timed_by_wall_clock_not_summed_latency() -> None:
    groups = 8
    buf = Buffer()
    tasks = [{"id": i, "text": "hi"} for i in range(groups)]
    c = Collector(
        [SlowEngine()],
        Env(),
        Tokenizer(),
        TaskLoader(tasks, seed=0, shuffle=False, max_epochs=1),
        buf,
        SamplingParams(n=2, max_tokens=3),
        max_groups_in_flight=groups,
    )

    async def main() -> None:
        c.report()  # the window starts now
        c.order(groups, 0)
        await c.start()
        for _ in range(500):
            if len(buf.groups) >= groups:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(LATENCY_S)  # idle engines: busy for ~half the window
        await c.stop()

    asyncio.run(main())
    rep = c.report()
    assert len(buf.groups) == groups
    assert rep["collector/gen_tokens"] == groups * 2 * 3
    # all 8 groups ran at once: ~LATENCY_S of wall time, ~8x that of summed latency
    assert LATENCY_S * 0.9 <= rep["collector/gen_wall_s"] < LATENCY_S * 2.5
    assert rep["collector/gen_latency_s"] >= groups * LATENCY_S * 0.9
    assert 0.2 < rep["collector/gen_busy_fraction"] < 0.8


def test_the_clock_counts_the_union_of_overlapping_intervals(monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])

    def at(t: float) -> None:
        now[0] = t

    clock = GenerationClock()  # window from t = 0
    at(1.0)
    clock.start()  # request a: 1..4
    at(2.0)
    clock.start()  # request b: 2..3, inside a
    at(3.0)
    clock.stop()
    at(4.0)
    clock.stop()  # union 3 s (latencies sum to 4 s)
    at(6.0)
    clock.start()  # request c: 6..9, still running at the read
    at(8.0)
    first = clock.read()
    at(9.0)
    clock.stop()
    at(10.0)
    second = clock.read()
    assert first["collector/gen_wall_s"] == 5.0  # 1..4 and 6..8
    assert first["collector/gen_busy_fraction"] == 5.0 / 8.0
    assert second["collector/gen_wall_s"] == 1.0  # 8..9: c's rest
    assert second["collector/gen_busy_fraction"] == 0.5
