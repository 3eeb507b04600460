"""Opt-in namespace policies: Namespace (with Pod Security labels), PriorityClass, ResourceQuota,
LimitRange.

The ResourceQuota is derived from what was rendered: for every resource,
``hard = headroom x sum over pod templates of (max pods x per-pod amount)``, where max pods is a
Deployment's HPA ``maxReplicas`` and a Ray group's ``maxReplicas``; plus 2 pods and a little CPU
and memory for the RayJob submitter that KubeRay adds.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from dockyard.k8s.pods import container_totals, pod_templates
from dockyard.k8s.quantity import format_bytes, format_cpu
from dockyard.k8s.render.common import Context

# Linux capabilities Pod Security "baseline" allows to be added.
BASELINE_CAPS = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
SUBMITTER = {"cpu": Decimal(1), "memory": Decimal(2**30)}  # KubeRay's default submitter limits


def sandbox_pod_security_level(ctx: Context) -> str:
    """The strictest Pod Security Standard the sandbox pods meet: privileged | baseline | restricted."""
    sec = ctx.infra.sandbox_security
    if (
        set(sec.capabilities) - BASELINE_CAPS
        or sec.apparmor == "Unconfined"
        or sec.proc_mount == "Unmasked"
    ):
        return "privileged"
    if sec.capabilities:  # restricted allows adding NET_BIND_SERVICE only
        return "restricted" if set(sec.capabilities) <= {"NET_BIND_SERVICE"} else "baseline"
    return "restricted"


def namespaces(ctx: Context) -> list[dict[str, Any]]:
    """The recipe's namespace (Ray pods: baseline) and, if separate, the sandbox namespace."""
    sandbox_level = sandbox_pod_security_level(ctx) if ctx.recipe.sandbox.enabled else "restricted"
    levels: dict[str, str] = {ctx.namespace: "baseline"}
    if ctx.recipe.sandbox.enabled:
        order = ["restricted", "baseline", "privileged"]
        current = levels.get(ctx.sandbox_namespace, "restricted")
        levels[ctx.sandbox_namespace] = max(current, sandbox_level, key=order.index)
    out = []
    for ns, level in levels.items():
        labels = ctx.labels("namespace") | {
            "pod-security.kubernetes.io/enforce": level,
            "pod-security.kubernetes.io/warn": level,
            "pod-security.kubernetes.io/audit": "restricted",
        }
        out.append(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}
        )
    return out


def priority_class(ctx: Context) -> dict[str, Any]:
    pc = ctx.recipe.policies.priority_class
    assert pc is not None
    assert ctx.priority_class_name is not None
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": ctx.priority_class_name, "labels": ctx.labels("policy")},
        "value": pc.value,
        "preemptionPolicy": pc.preemption_policy,
        "globalDefault": False,
        "description": pc.description,
    }


def _quota_totals(objects: list[dict[str, Any]], namespace: str) -> tuple[dict[str, Decimal], int]:
    hpa_max = {
        o["spec"]["scaleTargetRef"]["name"]: int(o["spec"]["maxReplicas"])
        for o in objects
        if o.get("kind") == "HorizontalPodAutoscaler"
    }
    totals: dict[str, Decimal] = {}
    pods = 0
    for obj in objects:
        if obj.get("metadata", {}).get("namespace") != namespace:
            continue
        for pt in pod_templates(obj, hpa_max):
            pods += pt.max_pods
            for field in ("requests", "limits"):
                for name, amount in container_totals(pt.template, field).items():
                    key = f"{field}.{name}"
                    totals[key] = totals.get(key, Decimal(0)) + amount * pt.max_pods
        if obj.get("kind") == "RayJob":
            pods += 1
            for field in ("requests", "limits"):
                for name, amount in SUBMITTER.items():
                    key = f"{field}.{name}"
                    totals[key] = totals.get(key, Decimal(0)) + amount
    return totals, pods


def resource_quotas(ctx: Context, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    q = ctx.recipe.policies.resource_quota
    assert q is not None
    out = []
    for ns in dict.fromkeys(
        [ctx.namespace, ctx.sandbox_namespace if ctx.recipe.sandbox.enabled else ctx.namespace]
    ):
        totals, pods = _quota_totals(objects, ns)
        headroom = Decimal(str(q.headroom))
        hard: dict[str, str] = {"pods": str(math.ceil(pods * q.headroom))}
        for key, amount in sorted(totals.items()):
            resource = key.split(".", 1)[1]
            scaled = amount * headroom
            if resource == "cpu":
                hard[key] = format_cpu(scaled)
            elif resource in ("memory", "ephemeral-storage"):
                hard[key] = format_bytes(scaled.to_integral_value(rounding="ROUND_CEILING"))
            elif key.startswith("requests."):  # extended resources (GPUs): requests only
                hard[key] = str(math.ceil(scaled))
        if (
            ns == ctx.namespace
            and ctx.recipe.checkpoint.enabled
            and not ctx.infra.storage.checkpoint.existing_claim
        ):
            hard["persistentvolumeclaims"] = "2"
        meta = ctx.metadata("quota", "policy")
        meta["namespace"] = ns
        out.append(
            {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta, "spec": {"hard": hard}}
        )
    return out


def limit_ranges(ctx: Context) -> list[dict[str, Any]]:
    lr = ctx.recipe.policies.limit_range
    assert lr is not None
    out = []
    for ns in dict.fromkeys(
        [ctx.namespace, ctx.sandbox_namespace if ctx.recipe.sandbox.enabled else ctx.namespace]
    ):
        meta = ctx.metadata("limits", "policy")
        meta["namespace"] = ns
        item = {
            "type": "Container",
            "defaultRequest": {"cpu": lr.default_request.cpu, "memory": lr.default_request.memory},
            "default": {"cpu": lr.default_limit.cpu, "memory": lr.default_limit.memory},
        }
        out.append(
            {"apiVersion": "v1", "kind": "LimitRange", "metadata": meta, "spec": {"limits": [item]}}
        )
    return out


def render_policies(ctx: Context, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The opt-in policy objects; they are applied before the workloads (a LimitRange's defaults
    and a quota only act on pods admitted after them). ``objects``: the rendered workloads."""
    first: list[dict[str, Any]] = []
    p = ctx.recipe.policies
    if p.create_namespace:
        first += namespaces(ctx)
    if p.priority_class is not None:
        first.append(priority_class(ctx))
    if p.limit_range is not None:
        first += limit_ranges(ctx)
    if p.resource_quota is not None:
        first += resource_quotas(ctx, objects)
    return first
