"""The trajectory collector around a fake engine: prompts that can never fit the context are
skipped (counted) with other tasks in their place, and endless failures stop the run with the
last error instead of re-queueing forever; generation throughput is per second of wall time
(groups generated concurrently share their seconds, the union of the requests' intervals)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import numpy as np

from dockyard.core.experience import Group
from dockyard.core.interfaces.environment import StepResult
from dockyard.core.interfaces.generation import GenerationResult, SamplingParams
from dockyard.train.data import TaskLoader
from dockyard.train.runtime.collector import (
    MAX_ERRORS,
    Collector,
    GenerationClock,
    task_domain,
    validation_metrics,
)


class Tokenizer:
    eos_token = "<eos>"
    eos_token_id = 0

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False) -> str:
        return "".join(m["content"] for m in messages)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [1 + (ord(c) % 50) for c in text]


class Engine:
    """Answers every prompt; refuses prompts longer than ``context`` tokens, like vLLM."""

    def __init__(self, context: int = 20, broken: bool = False) -> None:
        self.context, self.broken = context, broken

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        if self.broken:
            raise RuntimeError("boom")
        if len(prompt_ids) > self.context:
            raise ValueError(
                f"This model's maximum context length is {self.context} tokens. However, your "
                f"prompt contains {len(prompt_ids)} input tokens"
            )
        return [
            GenerationResult(
                np.array([3, 4], dtype=np.int64),
                np.array([-0.5, -0.5], dtype=np.float32),
                "ok",
                "stop",
                np.zeros(2, dtype=np.int32),
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


def _collect(
    engine: Engine, tasks: list[dict[str, Any]], n_orders: int
) -> tuple[Collector, Buffer]:
    buf = Buffer()
    c = Collector(
        [engine],
        Env(),
        Tokenizer(),
        TaskLoader(tasks, seed=0, shuffle=False, max_epochs=1),
        buf,
        SamplingParams(n=2, max_tokens=2),
    )

    async def main() -> None:
        c.order(n_orders, 0)
        await c.start()
        for _ in range(200):
            if len(buf.groups) >= n_orders or c.failure() or c.report_exhausted():
                break
            await asyncio.sleep(0.01)
        await c.stop()

    asyncio.run(main())
    return c, buf


def test_prompts_longer_than_the_context_are_skipped_not_retried() -> None:
    tasks = [{"id": i, "text": "x" * (50 if i % 2 else 5)} for i in range(8)]  # odd ids too long
    c, buf = _collect(Engine(context=20), tasks, n_orders=3)
    assert len(buf.groups) == 3
    assert c.skipped_long_prompts() >= 2  # the long ones met on the way were dropped...
    assert all(len(g.trajectories) == 2 for g in buf.groups)
    assert c.failure() is None  # ...and they are not errors


def test_endless_failures_stop_with_the_last_error() -> None:
    c, buf = _collect(Engine(broken=True), [{"id": 0, "text": "hi"}], n_orders=1)
    assert buf.groups == []
    why = c.failure()
    assert why is not None
    assert f"{MAX_ERRORS + 1} rollouts failed" in why
    assert "boom" in why


class EngineDead(Exception):
    """Named like vLLM's EngineDeadError: the collector treats it as the engine gone."""


class DyingEngine(Engine):
    """Holds every request until ``release`` is set, then fails it as a dead engine."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started = 0

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Any:
        self.started += 1
        await self.release.wait()
        raise EngineDead("EngineDeadError: the core died")


def test_a_replaced_engine_is_not_marked_dead_by_its_predecessors_requests() -> None:
    old, new, buf = DyingEngine(), Engine(), Buffer()
    tasks = [{"id": i, "text": "hi"} for i in range(4)]
    c = Collector(
        [old],
        Env(),
        Tokenizer(),
        TaskLoader(tasks, seed=0, shuffle=False, max_epochs=1),
        buf,
        SamplingParams(n=2, max_tokens=2),
    )

    async def main() -> None:
        c.order(2, 0)
        await c.start()
        while old.started < 2:
            await asyncio.sleep(0.01)
        c.replace_engine(0, SimpleNamespace(generate=SimpleNamespace(remote=new.generate)))
        # ^ an actor-handle look-alike: the driver found the old engine dead first (e.g. during
        #   a weight push) and replaced it found it dead first (e.g. during a weight push)
        old.release.set()  # ...and only now do its requests fail
        for _ in range(200):
            if len(buf.groups) >= 2:
                break
            await asyncio.sleep(0.01)
        await c.stop()

    asyncio.run(main())
    assert c.dead_engines() == []  # the new engine serves on
    assert len(buf.groups) == 2  # both groups re-generated on it, once each
    assert len({g.prompt_id for g in buf.groups}) == 2
    rep = c.report()
    assert rep["collector/engine_failures"] == 2
    assert rep["collector/requeued"] == 2


LATENCY_S = 0.3


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


def _group(domain: str | None, rewards: list[float], infra: int = 0) -> Group:
    trajs = [SimpleNamespace(reward=r, rewards={}, infra_error=False) for r in rewards]
    trajs += [SimpleNamespace(reward=0.0, rewards={}, infra_error=True)] * infra
    return Group("p", trajs, {} if domain is None else {"domain": domain})  # type: ignore[arg-type]


def test_validation_reports_each_domain_of_a_mixed_held_out_set() -> None:
    groups = [_group("toy-click", [1, 0, 0, 0]), _group("toy-type", [1, 1, 0, 0], infra=1),
              _group("toy-click", [1, 1, 0, 0])]  # fmt: skip
    m = validation_metrics(groups, 4)
    assert m["val/pass_rate"] == 5 / 12
    assert m["val/samples"] == 12
    assert m["val/pass_rate/toy-click"] == 3 / 8
    assert m["val/pass_rate/toy-type"] == 2 / 4  # the infra error left out, as in the total
    one = validation_metrics([_group("math", [1, 0]), _group("math", [0, 0])], 2)
    assert not [k for k in one if k.startswith("val/pass_rate/")]  # one domain: the total says it
    assert task_domain({"data_source": "gsm8k", "domain": "x"}) == "gsm8k"
    assert task_domain({"domain": "chrome"}) == "chrome"
    assert task_domain({}) == ""
