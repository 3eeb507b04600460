"""The recipe: a dockyard config plus the deployment settings that do not depend on the cluster.

A recipe file (YAML) names the dockyard config the trainer uses (``config:``, a path relative
to the recipe or an inline mapping), dotted ``overrides`` to it, and how to deploy each fleet:
the Ray trainer and inference worker groups, the sandbox service, the checkpoint volume and the
opt-in namespace policies. Everything cluster-specific (images, node pools, storage classes,
security profile the nodes allow) lives in the infra spec (:mod:`dockyard.k8s.infra`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from dockyard.k8s.types import STRICT, DnsLabel, Quantity


class Resources(BaseModel):
    """CPU and memory of one container (``requests``; limits follow the QoS rule of the fleet)."""

    model_config = STRICT
    cpu: Quantity = Field(description="CPU cores, e.g. '8' or '500m'.")
    memory: Quantity = Field(description="Memory, e.g. '64Gi'.")


class RayGroup(BaseModel):
    """One Ray worker group = one fleet role (trainer or inference)."""

    model_config = STRICT
    nodes: int | None = Field(
        None,
        ge=1,
        description="Pods (one per node) in this group. Required unless the config says.",
    )
    gpus_per_node: int | None = Field(
        None, ge=0, description="GPUs per pod; default: the config's cluster.gpus_per_node."
    )
    cpu: Quantity = Field("8", description="CPU cores per pod (request = limit).")
    memory: Quantity = Field("64Gi", description="Memory per pod (request = limit).")
    shm: Quantity = Field(
        "16Gi", description="Size of the memory-backed /dev/shm (Ray object store, NCCL)."
    )
    ray_start_params: dict[str, str] = Field(
        default_factory=dict, description="Extra `ray start` flags."
    )


class RayHead(BaseModel):
    """The Ray head pod: runs the driver (which orchestrates and never holds model weights)."""

    model_config = STRICT
    cpu: Quantity = "4"
    memory: Quantity = "16Gi"
    ray_start_params: dict[str, str] = Field(default_factory=dict)


class RaySettings(BaseModel):
    """How the trainer and inference fleets run on KubeRay."""

    model_config = STRICT
    mode: Literal["rayjob", "raycluster"] = Field(
        "rayjob",
        description="rayjob: the cluster lives for one run; raycluster: submit jobs yourself.",
    )
    ray_version: str = Field(
        "2.60.0", description="Ray version in the runtime image (KubeRay's rayVersion)."
    )
    entrypoint: str | None = Field(
        None,
        description="Command the job runs; default: `dockyard train --config <mounted config>`.",
    )
    head: RayHead = Field(default_factory=RayHead)
    trainer: RayGroup = Field(default_factory=RayGroup)
    inference: RayGroup = Field(default_factory=RayGroup)
    auth: Literal["token", "disabled"] = Field(
        "token",
        description="Ray token authentication (KubeRay authOptions.mode; the operator creates the "
        "token Secret). Needs a KubeRay operator whose CRD has authOptions.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment on every Ray pod."
    )
    shutdown_after_job_finishes: bool = True
    ttl_seconds_after_finished: int = Field(3600, ge=0)
    active_deadline_seconds: int | None = Field(None, ge=1)
    backoff_limit: int = Field(0, ge=0)


class Replicas(BaseModel):
    model_config = STRICT
    min: int = Field(2, ge=1, description="Lower bound of the autoscaler (and the initial size).")
    max: int = Field(8, ge=1, description="Upper bound of the autoscaler.")

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class Autoscale(BaseModel):
    """HorizontalPodAutoscaler of the sandbox fleet."""

    model_config = STRICT
    metric: Literal["queue_depth", "cpu"] = Field(
        "queue_depth",
        description="queue_depth: per-pod metric from /metrics (needs a metrics adapter); cpu: resource metric.",
    )
    metric_name: str = Field(
        "dockyard_sandbox_queue_depth", description="Pods metric the HPA reads."
    )
    target_queue_depth: Quantity = Field(
        "4", description="Average queued tasks per pod to aim for."
    )
    target_cpu_percent: int = Field(70, ge=1, le=100)
    scale_down_stabilization_seconds: int = Field(300, ge=0, le=3600)


class SandboxSettings(BaseModel):
    """The sandbox fleet: `dockyard-sandbox serve` behind a Service."""

    model_config = STRICT
    enabled: bool = True
    namespace: DnsLabel | None = Field(
        None,
        description="Run the sandbox fleet in its own namespace (its Pod Security level can then differ "
        "from the Ray pods'); default: the recipe's namespace.",
    )
    port: int = Field(8080, ge=1024, le=65535, description="Container port (non-root: >= 1024).")
    workers: int = Field(4, ge=1, description="Concurrent tasks per pod (`--workers`).")
    per_worker: Resources = Field(
        default_factory=lambda: Resources(cpu="1", memory="1Gi"),
        description="What one concurrent task may use; the pod is sized workers x this + overhead.",
    )
    overhead: Resources = Field(
        default_factory=lambda: Resources(cpu="250m", memory="256Mi"),
        description="The service process itself.",
    )
    workspace_size: Quantity = Field(
        "4Gi", description="Size limit of the writable /workspace emptyDir."
    )
    cache_size: Quantity = Field("1Gi", description="Size limit of the --cache-dir emptyDir.")
    qos: Literal["guaranteed", "burstable"] = Field(
        "guaranteed",
        description="guaranteed: limits = requests (steady timings for test timeouts); burstable: CPU limit 2x.",
    )
    replicas: Replicas = Field(default_factory=Replicas)
    autoscale: Autoscale = Field(default_factory=Autoscale)
    max_unavailable: int = Field(1, ge=1, description="PodDisruptionBudget maxUnavailable.")
    token_secret: DnsLabel | None = Field(
        None,
        description="Existing Secret with key 'token': the service requires it (`--token-file`).",
    )


class CheckpointSettings(BaseModel):
    """The checkpoint volume (a PersistentVolumeClaim; storage class etc. come from the infra spec)."""

    model_config = STRICT
    enabled: bool = True
    mount_path: str = Field("/checkpoints", pattern=r"^/[^\s]*$")
    size: Quantity = "100Gi"
    set_config_paths: bool = Field(
        True,
        description="Point the config's checkpointing.checkpoint_dir and logger.log_dir at "
        "<mount_path>/<name>/checkpoints and .../logs.",
    )


class PriorityClassSettings(BaseModel):
    model_config = STRICT
    value: int = Field(1000, ge=-2147483648, le=1000000000)
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    description: str = "dockyard training run"


class QuotaSettings(BaseModel):
    model_config = STRICT
    headroom: float = Field(1.25, ge=1.0, description="Quota = total rendered requests x headroom.")


class LimitRangeSettings(BaseModel):
    model_config = STRICT
    default_request: Resources = Field(
        default_factory=lambda: Resources(cpu="100m", memory="128Mi")
    )
    default_limit: Resources = Field(default_factory=lambda: Resources(cpu="1", memory="1Gi"))


class Policies(BaseModel):
    """Opt-in namespace-level objects."""

    model_config = STRICT
    create_namespace: bool = Field(
        False, description="Render the Namespace (with Pod Security labels)."
    )
    priority_class: PriorityClassSettings | None = None
    resource_quota: QuotaSettings | None = None
    limit_range: LimitRangeSettings | None = None


class Recipe(BaseModel):
    """A deployment recipe (see the module docstring)."""

    model_config = STRICT
    name: DnsLabel = Field(
        description="Prefix of every object name; at most 40 characters.", max_length=40
    )
    namespace: DnsLabel = "default"
    config: str | dict[str, Any] = Field(
        description="dockyard config: path relative to the recipe, or inline."
    )
    overrides: list[str] = Field(default_factory=list, description="Dotted overrides, `grpo.x=1`.")
    ray: RaySettings = Field(default_factory=RaySettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    checkpoint: CheckpointSettings = Field(default_factory=CheckpointSettings)
    policies: Policies = Field(default_factory=Policies)
