"""Find the pod templates inside rendered objects (Deployments, RayJobs, RayClusters)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from dockyard.k8s.quantity import parse_quantity


@dataclass(frozen=True)
class PodTemplate:
    """One pod template: where it is (``spec.template``), and how many pods it makes at most."""

    path: str
    template: dict[str, Any]
    max_pods: int


def as_int(value: Any, default: int) -> int:
    """``value`` if it is an int (not bool), else ``default``: objects may be schema-invalid here."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _ray_cluster(spec: dict[str, Any], prefix: str) -> Iterator[PodTemplate]:
    head = spec.get("headGroupSpec", {})
    if "template" in head:
        yield PodTemplate(f"{prefix}.headGroupSpec.template", head["template"], 1)
    for i, group in enumerate(spec.get("workerGroupSpecs", []) or []):
        if "template" in group:
            count = max(as_int(group.get("maxReplicas"), 0), as_int(group.get("replicas"), 0))
            count *= as_int(group.get("numOfHosts"), 1)
            yield PodTemplate(f"{prefix}.workerGroupSpecs[{i}].template", group["template"], count)


def pod_templates(
    obj: dict[str, Any], hpa_max: dict[str, int] | None = None
) -> Iterator[PodTemplate]:
    """Every pod template of ``obj``. ``hpa_max`` maps Deployment name -> HPA maxReplicas."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "ReplicaSet") and "template" in spec:
        count = as_int(spec.get("replicas"), 1)
        name = obj.get("metadata", {}).get("name")
        if hpa_max and name in hpa_max:
            count = max(count, hpa_max[name])
        yield PodTemplate("spec.template", spec["template"], count)
    elif kind == "RayCluster":
        yield from _ray_cluster(spec, "spec")
    elif kind == "RayJob":
        yield from _ray_cluster(spec.get("rayClusterSpec") or {}, "spec.rayClusterSpec")
        if "submitterPodTemplate" in spec:
            yield PodTemplate("spec.submitterPodTemplate", spec["submitterPodTemplate"], 1)


def container_totals(template: dict[str, Any], field: str) -> dict[str, Decimal]:
    """Sum over the template's containers of ``resources[field]`` (``"requests"`` or ``"limits"``)."""
    totals: dict[str, Decimal] = {}
    for container in (template.get("spec") or {}).get("containers") or []:
        for name, value in ((container.get("resources") or {}).get(field) or {}).items():
            try:
                totals[name] = totals.get(name, Decimal(0)) + parse_quantity(value)
            except ValueError:
                continue  # reported by the semantic checks

    return totals
