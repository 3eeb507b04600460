"""The trajectory collector: keeps the inference fleet busy and fills the replay buffer.

The driver *orders* groups: ``order(n, min_version)`` asks for n groups that may be generated
once the engines serve policy version ``min_version`` or later. For training step ``s`` the
driver orders P groups with ``min_version = s − max_age``; with ``max_age = 0`` generation for
step ``s`` therefore starts only after the step-``s`` weights are loaded (synchronous GRPO),
with ``max_age = k`` it runs up to k steps ahead while the trainer trains (asynchronous GRPO).
The buffer enforces the bound exactly; orders only keep generation from running ahead of it.

Faults: a group whose engine died (``RayActorError``) is re-queued with the same uid and task
and the engine is set aside until the driver replaces it (:meth:`Collector.replace_engine`);
nothing reaches the buffer twice, because a group enters it only once complete and the buffer
refuses a uid it has seen. ``state()`` (loader position, orders, the tasks of groups in flight)
is checkpointed; after a resume groups that were in flight are generated again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import Any

from ray.exceptions import ActorUnavailableError, RayActorError

from dockyard.core.config.sections import EnvConfig
from dockyard.core.interfaces.generation import SamplingParams
from dockyard.train.batching import passed
from dockyard.train.data import TaskLoader
from dockyard.train.environments import build_environment
from dockyard.train.grammar import tool_call_structural_tag
from dockyard.train.judge import env_judge
from dockyard.train.prompts import PromptRenderer
from dockyard.train.rollout import prompt_too_long, rollout_group
from dockyard.train.runtime.collector_config import CollectorConfig


@dataclass
class Order:
    """One group to generate: ``task``/``uid`` set for a re-queued group, else the next task."""

    min_version: int
    uid: str | None = None
    task: dict[str, Any] | None = None


MAX_ERRORS = 50  # failed rollouts (not engine deaths) before the run stops with the last error


def group_seed(seed: int, uid: str) -> int:
    """A sampling seed per group, stable across restarts (so a resumed run samples the same)."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{uid}".encode()).digest()[:4], "big")


def is_engine_death(e: BaseException) -> bool:
    """Whether ``e`` says the engine actor is gone (rather than a bad request); an engine whose
    core died inside a live actor (vLLM's ``EngineDeadError``) counts as gone too."""
    if "EngineDead" in type(e).__name__ or "EngineDeadError" in str(e)[:2000]:
        return True
    return isinstance(e, RayActorError | ActorUnavailableError)


class RemoteEngine:
    """An engine Ray actor seen as ``async generate(prompt_ids, params)``."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, images: Any = None
    ) -> Any:
        if images:  # a vision-language policy's turn (the engine's ``images``)
            return await self.handle.generate.remote(prompt_ids, params, images)
        return await self.handle.generate.remote(prompt_ids, params)


class GenerationClock:
    """Generation wall time since the last :meth:`read`: the seconds during which at least one
    generation request was outstanding — the union of the requests' intervals, not the sum of
    their latencies (groups are generated concurrently) — and the tokens those requests returned.
    """

    def __init__(self) -> None:
        self.active = 0
        self.since = 0.0  # when ``active`` last went from 0 to 1
        self.busy = 0.0
        self.tokens = 0
        self.prompt_tokens = self.cached_tokens = 0  # of the samples; from the prefix cache
        self.window = time.perf_counter()  # the start of the current read window

    def wrap(self, engine: Any) -> TimedEngine:
        return TimedEngine(engine, self)

    def start(self) -> None:
        if self.active == 0:
            self.since = time.perf_counter()
        self.active += 1

    def stop(self) -> None:
        self.active -= 1
        if self.active == 0:
            self.busy += time.perf_counter() - self.since

    def read(self) -> dict[str, float]:
        """``collector/gen_tokens``, ``collector/gen_wall_s`` and ``collector/gen_busy_fraction``
        (of the wall time since the last read) since the last read, and
        ``collector/prefix_cache_hit_rate`` (the samples' prompt tokens the engines took from a
        prefix cache); starts the next window."""
        now = time.perf_counter()
        busy = self.busy + (now - self.since if self.active else 0.0)
        window = now - self.window
        out = {
            "collector/gen_tokens": float(self.tokens),
            "collector/gen_wall_s": busy,
            "collector/gen_busy_fraction": busy / window if window > 0 else 0.0,
        }
        if self.prompt_tokens:
            out["collector/prefix_cache_hit_rate"] = self.cached_tokens / self.prompt_tokens
        self.busy, self.tokens, self.window = 0.0, 0, now
        self.prompt_tokens = self.cached_tokens = 0
        if self.active:
            self.since = now
        return out


class TimedEngine:
    """An engine client whose ``generate`` calls a :class:`GenerationClock` times."""

    def __init__(self, engine: Any, clock: GenerationClock) -> None:
        self.engine, self.clock = engine, clock

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, images: Any = None
    ) -> Any:
        self.clock.start()
        try:
            if images:
                results = await self.engine.generate(prompt_ids, params, images=images)
            else:
                results = await self.engine.generate(prompt_ids, params)
        finally:
            self.clock.stop()
        self.clock.tokens += sum(len(r.token_ids) for r in results)
        self.clock.prompt_tokens += len(prompt_ids) * len(results)
        self.clock.cached_tokens += sum(getattr(r, "cached_prompt_tokens", 0) for r in results)
        return results


class Collector:
    """See the module docstring.

    Args:
        engines: engine clients (``async generate``), e.g. :class:`RemoteEngine` s.
        env: the :class:`~dockyard.core.interfaces.Environment` scoring the tasks.
        tokenizer: the :class:`~dockyard.train.prompts.PromptRenderer` of the run's prompts
            (or a bare Hugging Face tokenizer: its own chat template).
        loader: the training :class:`TaskLoader`.
        buffer: the replay buffer (an actor handle with ``put.remote``, or a local buffer).
        params: sampling settings; ``n`` is G.
        seed: base seed for per-group sampling seeds.
        max_turns: ``grpo.max_rollout_turns``.
        max_groups_in_flight: groups generated at once over all engines.
        reward_weights: ``env.<name>.reward_weights``.
    """

    def __init__(
        self,
        engines: list[Any],
        env: Any,
        tokenizer: Any,
        loader: TaskLoader,
        buffer: Any,
        params: SamplingParams,
        *,
        seed: int = 0,
        max_turns: int = 1,
        max_groups_in_flight: int = 16,
        reward_weights: dict[str, float] | None = None,
        seeded: bool = True,
        scaffold: Any = None,
    ) -> None:
        self.seeded = seeded
        # an external agent scaffold drives the episodes through the OpenAI-compatible endpoint
        # (dockyard.train.endpoint.ExternalScaffold); None: rollout_group's own loop
        self.scaffold = scaffold
        self.engines = list(engines)
        self.dead: set[int] = set()
        self.env = env
        self.tokenizer = tokenizer
        self.loader = loader
        self.buffer = buffer
        self.params = params
        self.seed = seed
        self.max_turns = max_turns
        self.max_in_flight = max_groups_in_flight
        self.reward_weights = dict(reward_weights or {})
        self.version = 0
        self.orders: deque[Order] = deque()
        self.in_flight: dict[str, tuple[Order, dict[str, Any], int]] = {}
        self.exhausted = False
        self.paused = False
        self._load = [0] * len(self.engines)
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stats: dict[str, float] = {}
        self._clock = GenerationClock()
        self.errors: list[str] = []
        self.fatal: str | None = None
        self.skipped_long = 0

    # ----------------------------------------------------------- driver API
    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self.scaffold is not None:
            await self.scaffold.aclose()

    def order(self, n: int, min_version: int) -> None:
        self.orders.extend(Order(min_version) for _ in range(n))
        self._wake.set()

    def set_version(self, version: int) -> None:
        self.version = version
        self._wake.set()

    def replace_engine(self, index: int, handle: Any) -> None:
        """Use ``handle`` (a restarted engine actor, weights loaded) for engine ``index``."""
        self.engines[index] = RemoteEngine(handle)
        self.dead.discard(index)
        self._wake.set()

    def report_exhausted(self) -> bool:
        """True when the data ran out and nothing is left to generate."""
        return self.exhausted and not self.in_flight and not any(o.task for o in self.orders)

    def failure(self) -> str | None:
        """Why the collector cannot go on (too many failed rollouts), else None."""
        return self.fatal

    def skipped_long_prompts(self) -> int:
        """Tasks skipped because their prompt alone exceeds the engine's context."""
        return self.skipped_long

    def dead_engines(self) -> list[int]:
        return sorted(self.dead)

    def report(self) -> dict[str, float]:
        """Counters since the last report (generation tokens and wall time, env time,
        re-queues); see :mod:`dockyard.train.metrics`."""
        out, self._stats = self._stats, {}
        out.update(self._clock.read())
        out["collector/in_flight"] = float(len(self.in_flight))
        out["collector/orders_pending"] = float(len(self.orders))
        out["collector/exhausted"] = float(self.exhausted)
        judge = getattr(self, "judge", None)
        if judge is not None:  # an environment graded by the judge: judge/* since the last report
            out.update(judge.judge.metrics())
        return out

    def state(self) -> dict[str, Any]:
        """Loader position and the work not yet in the buffer (orders + groups in flight)."""
        pending = [Order(o.min_version, uid, task) for uid, (o, task, _) in self.in_flight.items()]
        return {
            "loader": self.loader.state_dict(),
            "orders": [asdict(o) for o in [*pending, *self.orders]],
            "version": self.version,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
        self.orders = deque(Order(**o) for o in state["orders"])
        self.version = int(state["version"])
        self._wake.set()

    # ---------------------------------------------------------------- loop
    def _bump(self, key: str, v: float) -> None:
        self._stats[key] = self._stats.get(key, 0.0) + v

    def _pick_engine(self) -> int | None:
        live = [i for i in range(len(self.engines)) if i not in self.dead]
        return min(live, key=lambda i: self._load[i]) if live else None

    def _next_order(self) -> tuple[Order, str, dict[str, Any]] | None:
        if self.paused or not self.orders or self.orders[0].min_version > self.version:
            return None
        if len(self.in_flight) >= self.max_in_flight:
            return None
        o = self.orders[0]
        if o.uid is not None and o.task is not None:
            self.orders.popleft()
            return o, o.uid, o.task
        try:
            uid, task = next(self.loader)
        except StopIteration:
            self.exhausted = True
            return None
        self.orders.popleft()
        return o, uid, task

    async def _run(self) -> None:
        while True:
            started = False
            while True:
                engine = self._pick_engine()
                if engine is None:
                    break
                nxt = self._next_order()
                if nxt is None:
                    break
                order, uid, task = nxt
                self.in_flight[uid] = (order, task, engine)
                self._load[engine] += 1
                asyncio.get_running_loop().create_task(self._one(order, uid, task, engine))
                started = True
            if not started:
                self._wake.clear()
                await self._wake.wait()

    async def _one(self, order: Order, uid: str, task: dict[str, Any], engine: int) -> None:
        params = replace(self.params, seed=group_seed(self.seed, uid) if self.seeded else None)
        t0 = time.perf_counter()
        client = self.engines[engine]
        try:
            timed = self._clock.wrap(client)  # generation wall time, tokens
            if self.scaffold is not None:
                group = await self.scaffold.rollout_group(
                    timed, self.env, self.tokenizer, task, uid, params
                )
            else:
                group = await rollout_group(
                    timed, self.env, self.tokenizer, task, uid, params, self.max_turns
                )
        except Exception as e:
            self._load[engine] -= 1
            del self.in_flight[uid]
            if is_engine_death(e):
                if self.engines[engine] is client:  # not yet replaced by the driver
                    self.dead.add(engine)
                self._bump("collector/engine_failures", 1)
            elif prompt_too_long(e):
                # this task can never fit the context: another task takes its place
                self.skipped_long += 1
                self._bump("collector/skipped_long_prompts", 1)
                self.orders.appendleft(Order(order.min_version))
                self._wake.set()
                return
            else:
                self.errors.append(f"{uid}: {type(e).__name__}: {e}")
                self._bump("collector/errors", 1)
                if len(self.errors) > MAX_ERRORS:
                    self.fatal = f"{len(self.errors)} rollouts failed; the last: {self.errors[-1]}"
                    return
            self.orders.appendleft(Order(order.min_version, uid, task))  # re-queue, same uid
            self._bump("collector/requeued", 1)
            self._wake.set()
            return
        self._load[engine] -= 1
        if self.reward_weights:
            for t in group.trajectories:
                t.rewards = {k: v * self.reward_weights.get(k, 1.0) for k, v in t.rewards.items()}
        self._bump("collector/gen_latency_s", float(group.metadata.get("gen_s", 0.0)))
        self._bump("collector/env_s", sum(t.metadata.get("env_s", 0.0) for t in group.trajectories))
        self._bump("collector/group_s", time.perf_counter() - t0)
        self._bump("collector/groups", 1)
        put = self.buffer.put.remote(group) if hasattr(self.buffer.put, "remote") else None
        if put is not None:
            await put
        else:
            self.buffer.put(group)
        del self.in_flight[uid]
        self._wake.set()


class CollectorHost(Collector):
    """The collector as a Ray actor: builds its environment, tokenizer, sampling and task loader
    from its own config (:class:`~dockyard.train.runtime.collector_config.CollectorConfig`,
    built once by the driver) inside the actor process."""

    def __init__(
        self,
        config: CollectorConfig,
        engines: list[Any],
        buffer: Any,
        sandbox_urls: list[str],
        tasks: list[dict[str, Any]],
        judge_engines: list[Any] | None = None,
    ) -> None:
        c = config
        # the JudgeFn of an environment graded by the judge (judge_engines: a judge fleet's
        # actors, started by the Stack for backend 'engine')
        self.judge = None if c.judge is None else env_judge(c.judge, judge_engines)
        env = build_environment(c.env_name, c.env, sandbox_urls, judge=self.judge)
        tokenizer = PromptRenderer.build(c.prompts, load_tokenizer(c.prompts.tokenizer))
        tasks = tokenizer.filter_tasks(env, tasks)  # data.max_input_seq_length
        g = c.generation
        params = SamplingParams(
            n=c.samples_per_prompt,
            max_tokens=g.max_new_tokens,
            temperature=g.temperature,
            top_p=g.top_p,
            top_k=g.top_k,
            stop=list(g.stop_strings),
            stop_token_ids=list(g.stop_token_ids),
        )
        scaffold = _scaffold(c.env, env)
        if g.tool_call_grammar.enabled:
            if scaffold is not None:
                raise ValueError(
                    "policy.generation.tool_call_grammar with an external scaffold "
                    f"(env.{c.env_name}.scaffold): the scaffold's requests carry its own "
                    "decoding settings; turn one of them off"
                )
            tag = tool_call_structural_tag(g.tool_call_grammar, env.tool_specs())
            params = replace(params, structural_tag=tag)
        super().__init__(
            [RemoteEngine(e) for e in engines],
            env,
            tokenizer,
            TaskLoader(tasks, c.seed, c.shuffle, c.max_num_epochs),
            buffer,
            params,
            seed=c.seed,
            max_turns=c.max_rollout_turns,
            max_groups_in_flight=c.max_groups_in_flight,
            reward_weights=_weights(c.env),
            scaffold=scaffold,
        )

    async def validate(
        self, tasks: list[dict[str, Any]], n: int, temperature: float
    ) -> dict[str, float]:
        """Pass rate (and mean reward) of ``n`` samples per task on the engines' current weights,
        sampled at ``temperature`` (0: greedy decoding, where ``n`` should be 1)."""
        return validation_metrics(await self.validation_groups(tasks, n, temperature), n)

    async def validation_groups(
        self, tasks: list[dict[str, Any]], n: int, temperature: float
    ) -> list[Any]:
        """The groups :meth:`validate` scores (one per task that fits the context): what a
        driver measuring more than the pass rate on them gets (the distillation's held-out
        KL)."""
        params = replace(self.params, n=n, temperature=temperature, seed=None)
        sem = asyncio.Semaphore(self.max_in_flight)
        # prompts over data.max_input_seq_length would make the engine refuse the request
        tasks = self.tokenizer.filter_tasks(self.env, tasks, what="validation")

        async def one(i: int, task: dict[str, Any]) -> Any:
            async with sem:
                live = [k for k in range(len(self.engines)) if k not in self.dead] or [0]
                eng = self.engines[live[i % len(live)]]
                seed = group_seed(self.seed + 1, f"val:{i}") if self.seeded else None
                p = replace(params, seed=seed)
                if self.scaffold is not None:
                    group = await self.scaffold.rollout_group(
                        eng, self.env, self.tokenizer, task, f"val:{i}", p
                    )
                else:
                    group = await rollout_group(
                        eng, self.env, self.tokenizer, task, f"val:{i}", p, self.max_turns
                    )
                group.metadata["domain"] = task_domain(task)
                return group

        return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks))))

    async def drain(self) -> None:
        """Stop starting groups and wait until none is in flight (updates without in-flight)."""
        self.paused = True
        while self.in_flight:
            await asyncio.sleep(0.01)

    def set_version(self, version: int) -> None:
        self.paused = False
        super().set_version(version)


def task_domain(task: dict[str, Any]) -> str:
    """What a held-out task is reported under: its ``data_source`` (verl's field) or ``domain``
    (OSWorld's), else ``""``."""
    return str(task.get("data_source") or task.get("domain") or "")


def validation_metrics(groups: list[Any], n: int) -> dict[str, float]:
    """``val/pass_rate``, ``val/reward`` and ``val/samples`` of validation ``groups`` (``n``
    samples per task), samples masked as ``infra_error`` left out. Where the groups' tasks come
    from more than one domain (``metadata["domain"]``: :func:`task_domain`), also
    ``val/pass_rate/<domain>`` for each: where a mixed held-out set gains or loses."""
    trajs = [t for g in groups for t in g.trajectories if not t.infra_error]
    if not trajs:
        return {"val/pass_rate": float("nan"), "val/infra_errors": float(len(groups) * n)}
    out = {
        "val/pass_rate": sum(passed(t) for t in trajs) / len(trajs),
        "val/reward": sum(t.reward for t in trajs) / len(trajs),
        "val/samples": float(len(trajs)),
    }
    by_domain: dict[str, list[bool]] = {}
    for g in groups:
        done = [passed(t) for t in g.trajectories if not t.infra_error]
        by_domain.setdefault(g.metadata.get("domain", ""), []).extend(done)
    if len(by_domain) > 1:
        out |= {f"val/pass_rate/{d or 'other'}": sum(v) / len(v) for d, v in by_domain.items() if v}
    return out


def _weights(env_cfg: EnvConfig) -> dict[str, float]:
    """``env.<name>.reward_weights``: the weight per named reward component."""
    return dict(env_cfg.reward_weights)


def _scaffold(env_cfg: EnvConfig, env: Any) -> Any:
    """``env.<name>.scaffold`` built for ``env`` (dockyard.train.endpoint), or None."""
    spec = env_cfg.scaffold
    if spec is None:
        return None
    # lazy: the endpoint imports fastapi and uvicorn (heavy: 0.4 s), only scaffold envs need it
    from dockyard.train.endpoint.config import build_scaffold

    return build_scaffold(spec, env)


def load_tokenizer(name: str) -> Any:
    """The tokenizer ``name`` (a folder or Hub id)."""
    try:  # lazy: transformers is optional (dockyard-train's torch extra)
        from transformers import AutoTokenizer
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            'the collector needs transformers: pip install "dockyard-rl[torch]"'
        ) from e
    return AutoTokenizer.from_pretrained(name)
