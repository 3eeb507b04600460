"""The infra spec: what is particular to one cluster.

Images, node pools (node selectors, tolerations, affinity) and which pool each fleet lands on,
the GPU resource name, storage classes, and the security profile the sandbox nodes allow.
Tolerations and affinity are Kubernetes objects: they are checked against the Kubernetes
schemas when the spec is loaded, so a typo names the infra field, not a rendered manifest.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from dockyard.k8s.types import STRICT, DnsLabel

FLEETS = ("head", "trainer", "inference", "sandbox")


class Images(BaseModel):
    model_config = STRICT
    runtime: str = Field(description="Trainer + inference image (deploy/Containerfile.runtime).")
    sandbox: str = Field(description="Sandbox service image (deploy/Containerfile.sandbox).")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    pull_secrets: list[DnsLabel] = Field(default_factory=list)


class Pool(BaseModel):
    """Where a set of pods may run."""

    model_config = STRICT
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="core/v1 Toleration objects."
    )
    affinity: dict[str, Any] | None = Field(None, description="A core/v1 Affinity object.")


class Placement(BaseModel):
    """Pool name per fleet; None = no scheduling constraints for that fleet."""

    model_config = STRICT
    head: str | None = None
    trainer: str | None = None
    inference: str | None = None
    sandbox: str | None = None


class VolumeSpec(BaseModel):
    model_config = STRICT
    storage_class: str | None = Field(
        None, description="StorageClass name; None = the cluster default."
    )
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"] = Field(
        "ReadWriteMany",
        description="Several trainer nodes write shards: ReadWriteMany unless one node.",
    )
    existing_claim: DnsLabel | None = Field(
        None, description="Use this PVC instead of rendering one."
    )


class Storage(BaseModel):
    model_config = STRICT
    checkpoint: VolumeSpec = Field(default_factory=VolumeSpec)


_PROFILE = re.compile(r"^(RuntimeDefault|Unconfined|Localhost:\S+)$")


class SandboxSecurity(BaseModel):
    """Security profile of the sandbox pods (see docs/deployment.md, "Sandbox pod hardening").

    bubblewrap creates user, mount, pid and network namespaces. Under the container runtime's
    default seccomp profile (``RuntimeDefault``) the namespace-creating calls (``unshare``,
    ``clone`` with ``CLONE_NEW*``, ``mount``, ``setns``) are allowed only when ``CAP_SYS_ADMIN``
    is in the container's capability set, hence the default ``capabilities: [SYS_ADMIN]``.
    For a non-root user the runtime puts added capabilities in the bounding set only, so the
    process does not hold SYS_ADMIN itself; the capability opens the seccomp gate, and bwrap then
    gets its powers inside the user namespace it creates. A ``Localhost`` seccomp profile that
    allows those calls removes the need for the capability.
    """

    model_config = STRICT
    capabilities: list[str] = Field(
        default_factory=lambda: ["SYS_ADMIN"],
        description="Added after dropping ALL. [] with a Localhost seccomp profile that allows unshare/mount.",
    )
    seccomp: str = Field(
        "RuntimeDefault", description="RuntimeDefault or Localhost:<path on the node>."
    )
    apparmor: str | None = Field(
        None,
        description="None (node default), RuntimeDefault, Unconfined or Localhost:<profile>. "
        "AppArmor's default container profile denies mount(2), which bwrap needs.",
    )
    host_users: bool = Field(
        True,
        description="false: the pod gets its own user namespace (Kubernetes >= 1.30, node support needed).",
    )
    proc_mount: Literal["Default", "Unmasked"] = Field(
        "Default",
        description="Unmasked lets bwrap mount a fresh /proc; Kubernetes requires host_users: false.",
    )
    run_as_user: int = Field(10001, ge=1)
    run_as_group: int = Field(10001, ge=1)

    @field_validator("seccomp")
    @classmethod
    def _seccomp(cls, v: str) -> str:
        if v == "Unconfined" or not _PROFILE.match(v):
            raise ValueError(
                "must be RuntimeDefault or Localhost:<path> (the sandbox never runs Unconfined)"
            )
        return v

    @field_validator("apparmor")
    @classmethod
    def _apparmor(cls, v: str | None) -> str | None:
        if v is not None and not _PROFILE.match(v):
            raise ValueError("must be RuntimeDefault, Unconfined or Localhost:<profile name>")
        return v

    @field_validator("capabilities")
    @classmethod
    def _caps(cls, v: list[str]) -> list[str]:
        out = []
        for cap in v:
            name = cap.upper().removeprefix("CAP_")
            if not re.fullmatch(r"[A-Z_]+", name) or name == "ALL":
                raise ValueError(f"{cap!r} is not a capability name (e.g. SYS_ADMIN)")
            out.append(name)
        return out

    @model_validator(mode="after")
    def _unmasked_needs_userns(self) -> SandboxSecurity:
        if self.proc_mount == "Unmasked" and self.host_users:
            raise ValueError(
                "proc_mount: Unmasked requires host_users: false (Kubernetes rejects it otherwise)"
            )
        return self


class MetricsScraper(BaseModel):
    """Who may reach the sandbox pods' /metrics (e.g. Prometheus) through the NetworkPolicy."""

    model_config = STRICT
    namespace_labels: dict[str, str] = Field(default_factory=dict)
    pod_labels: dict[str, str] = Field(default_factory=dict)


class Infra(BaseModel):
    """An infra spec (see the module docstring)."""

    model_config = STRICT
    name: str
    kubernetes_version: str = Field(
        "1.31", pattern=r"^1\.\d+$", description="Minor version to validate against."
    )
    images: Images
    gpu_resource: str = Field("nvidia.com/gpu", description="Extended resource name of a GPU.")
    pools: dict[str, Pool] = Field(default_factory=dict)
    placement: Placement = Field(default_factory=Placement)
    storage: Storage = Field(default_factory=Storage)
    sandbox_security: SandboxSecurity = Field(default_factory=SandboxSecurity)
    metrics_scraper: MetricsScraper | None = None
    runtime_class: str | None = Field(
        None, description="runtimeClassName for the sandbox pods (e.g. gvisor)."
    )

    @model_validator(mode="after")
    def _placement_names_pools(self) -> Infra:
        for fleet in FLEETS:
            pool = getattr(self.placement, fleet)
            if pool is not None and pool not in self.pools:
                known = ", ".join(sorted(self.pools)) or "none defined"
                raise ValueError(
                    f"placement.{fleet} names pool {pool!r}, which is not in pools ({known})"
                )
        return self

    def pool_for(self, fleet: str) -> Pool:
        name = getattr(self.placement, fleet)
        return self.pools[name] if name is not None else Pool()
