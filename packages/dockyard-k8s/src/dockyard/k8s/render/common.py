"""Names, labels and pod-spec pieces shared by the renderers."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from dockyard.k8s.infra import Infra
from dockyard.k8s.recipe import Recipe

FLEET_ROLE_LABEL = "dockyard.io/fleet-role"
"""Pod label and Ray node label carrying the fleet role (trainer | inference | sandbox | head)."""
FLEET_ROLE_ENV = "DOCKYARD_FLEET_ROLE"
"""Environment variable the dockyard Ray runtime reads to learn a node's fleet role."""
RAY_POD_LABEL = "dockyard.io/ray"
"""Set to "true" on every Ray pod: the sandbox NetworkPolicy admits traffic only from these."""
SANDBOX_URL_ENV = "DOCKYARD_SANDBOX_URL"
SANDBOX_TOKEN_FILE_ENV = "DOCKYARD_SANDBOX_TOKEN_FILE"
CONFIG_FILE = "config.yaml"
CONFIG_MOUNT = "/etc/dockyard"
TOKEN_MOUNT = "/var/run/secrets/dockyard/sandbox"


@dataclass(frozen=True)
class FleetShape:
    """The resolved size of the Ray fleets: pods per role and GPUs per pod."""

    trainer_nodes: int
    trainer_gpus: int
    inference_nodes: int
    inference_gpus: int


@dataclass(frozen=True)
class Context:
    """Everything a renderer needs: the validated recipe and infra, and the resolved config."""

    recipe: Recipe
    infra: Infra
    config: dict[str, Any]
    shape: FleetShape

    @property
    def name(self) -> str:
        return self.recipe.name

    @property
    def namespace(self) -> str:
        return self.recipe.namespace

    def object_name(self, suffix: str) -> str:
        return f"{self.recipe.name}-{suffix}"

    @property
    def sandbox_namespace(self) -> str:
        return self.recipe.sandbox.namespace or self.recipe.namespace

    @property
    def sandbox_service(self) -> str:
        return self.object_name("sandbox")

    @property
    def sandbox_url(self) -> str:
        port = self.recipe.sandbox.port
        return f"http://{self.sandbox_service}.{self.sandbox_namespace}.svc.cluster.local:{port}"

    def labels(self, component: str, role: str | None = None) -> dict[str, str]:
        out = {
            "app.kubernetes.io/name": "dockyard",
            "app.kubernetes.io/instance": self.name,
            "app.kubernetes.io/component": component,
            "app.kubernetes.io/part-of": "dockyard",
            "app.kubernetes.io/managed-by": "dockyard-k8s",
        }
        if role is not None:
            out[FLEET_ROLE_LABEL] = role
        return out

    def selector(self, component: str) -> dict[str, str]:
        """The stable subset of labels used in selectors (never changes between renders)."""
        return {"app.kubernetes.io/instance": self.name, "app.kubernetes.io/component": component}

    def metadata(
        self,
        suffix: str | None,
        component: str,
        role: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        name = self.name if suffix is None else self.object_name(suffix)
        ns = namespace or self.namespace
        return {"name": name, "namespace": ns, "labels": self.labels(component, role)}

    @property
    def priority_class_name(self) -> str | None:
        return f"dockyard-{self.name}" if self.recipe.policies.priority_class is not None else None


def scheduling(ctx: Context, fleet: str) -> dict[str, Any]:
    """nodeSelector / tolerations / affinity of ``fleet``'s pool (empty parts left out)."""
    pool = ctx.infra.pool_for(fleet)
    out: dict[str, Any] = {}
    if pool.node_selector:
        out["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        out["tolerations"] = copy.deepcopy(pool.tolerations)
    if pool.affinity:
        out["affinity"] = copy.deepcopy(pool.affinity)
    if ctx.priority_class_name:
        out["priorityClassName"] = ctx.priority_class_name
    if ctx.infra.images.pull_secrets:
        out["imagePullSecrets"] = [{"name": s} for s in ctx.infra.images.pull_secrets]
    return out


def env_list(env: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in env.items()]


def scale(quantity: Decimal, factor: int | Decimal) -> Decimal:
    return quantity * Decimal(factor)
