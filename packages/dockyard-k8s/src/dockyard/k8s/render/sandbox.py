"""The sandbox fleet: ServiceAccount, Deployment, Service, HPA, PodDisruptionBudget, NetworkPolicy.

Sizing (``recipe.sandbox``), one pod running ``dockyard-sandbox serve --workers W``::

    requests.cpu    = overhead.cpu    + W * per_worker.cpu
    requests.memory = overhead.memory + W * per_worker.memory
    limits          = requests                      (qos: guaranteed)
                      cpu x2, memory = requests     (qos: burstable; memory is never overcommitted)
    ephemeral-storage = workspace + cache + 256Mi of /tmp   (requests = limits)

Hardening (why each piece is there is in docs/deployment.md, "Sandbox pod hardening"): non-root
uid, read-only root filesystem with writable emptyDirs for /workspace, /tmp and the cache, ALL
capabilities dropped and only ``infra.sandbox_security.capabilities`` added back, seccomp
``RuntimeDefault`` (or a Localhost profile), no service-account token, no service links, and a
NetworkPolicy with no egress at all and ingress only from this deployment's Ray pods.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from dockyard.k8s.quantity import format_bytes, format_cpu, parse_quantity
from dockyard.k8s.render.common import (
    FLEET_ROLE_ENV,
    FLEET_ROLE_LABEL,
    RAY_POD_LABEL,
    TOKEN_MOUNT,
    Context,
    env_list,
    scheduling,
)

COMPONENT = "sandbox"
CONTAINER = "sandbox"
WORKSPACE = "/workspace"
CACHE = "/var/cache/dockyard"
TMP_SIZE = Decimal(256 * 2**20)
DRAIN_S = 60
"""Seconds the service finishes running tasks on SIGTERM; the pod's grace period adds 15."""


def sandbox_resources(ctx: Context) -> dict[str, dict[str, str]]:
    """requests/limits of the sandbox container (see the module docstring for the rule)."""
    s = ctx.recipe.sandbox
    cpu = parse_quantity(s.overhead.cpu) + s.workers * parse_quantity(s.per_worker.cpu)
    mem = parse_quantity(s.overhead.memory) + s.workers * parse_quantity(s.per_worker.memory)
    disk = parse_quantity(s.workspace_size) + parse_quantity(s.cache_size) + TMP_SIZE
    requests = {
        "cpu": format_cpu(cpu),
        "memory": format_bytes(mem),
        "ephemeral-storage": format_bytes(disk),
    }
    limits = dict(requests)
    if s.qos == "burstable":
        limits["cpu"] = format_cpu(cpu * 2)
    return {"requests": requests, "limits": limits}


def _profile(value: str) -> dict[str, str]:
    if value.startswith("Localhost:"):
        return {"type": "Localhost", "localhostProfile": value.split(":", 1)[1]}
    return {"type": value}


def _apparmor_annotation(value: str) -> str:
    if value.startswith("Localhost:"):
        return "localhost/" + value.split(":", 1)[1]
    return {"RuntimeDefault": "runtime/default", "Unconfined": "unconfined"}[value]


def _k8s_at_least(ctx: Context, minor: int) -> bool:
    return int(ctx.infra.kubernetes_version.split(".")[1]) >= minor


def _security(ctx: Context) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """(pod securityContext, container securityContext, pod annotations)."""
    sec = ctx.infra.sandbox_security
    pod: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": sec.run_as_user,
        "runAsGroup": sec.run_as_group,
        "fsGroup": sec.run_as_group,
        "seccompProfile": _profile(sec.seccomp),
    }
    container: dict[str, Any] = {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {
            "drop": ["ALL"],
            **({"add": list(sec.capabilities)} if sec.capabilities else {}),
        },
    }
    # Kubernetes rejects allowPrivilegeEscalation=false together with CAP_SYS_ADMIN; without
    # SYS_ADMIN we set it (no_new_privs for the service and everything it starts).
    if "SYS_ADMIN" not in sec.capabilities:
        container["allowPrivilegeEscalation"] = False
    if sec.proc_mount != "Default":
        container["procMount"] = sec.proc_mount
    annotations: dict[str, str] = {}
    if sec.apparmor is not None:
        if _k8s_at_least(ctx, 30):
            pod["appArmorProfile"] = _profile(sec.apparmor)
        else:
            annotations[f"container.apparmor.security.beta.kubernetes.io/{CONTAINER}"] = (
                _apparmor_annotation(sec.apparmor)
            )
    return pod, container, annotations


def _probe(path: str, period: int, failures: int, delay: int = 0) -> dict[str, Any]:
    probe: dict[str, Any] = {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }
    if delay:
        probe["initialDelaySeconds"] = delay
    return probe


def _args(ctx: Context) -> list[str]:
    """``dockyard-sandbox`` arguments: listen address, worker count, writable dirs, drain, token."""
    s = ctx.recipe.sandbox
    args = ["serve", "--host", "0.0.0.0", "--port", str(s.port), "--workers", str(s.workers)]
    args += ["--work-dir", WORKSPACE, "--cache-dir", CACHE, "--drain-timeout", str(DRAIN_S)]
    if s.token_secret:
        args += ["--token-file", f"{TOKEN_MOUNT}/token"]
    return args


def _volumes(ctx: Context) -> list[dict[str, Any]]:
    """Size-limited emptyDirs for the writable paths of the read-only root, plus the token Secret."""
    s = ctx.recipe.sandbox
    volumes: list[dict[str, Any]] = [
        {"name": "workspace", "emptyDir": {"sizeLimit": s.workspace_size}},
        {"name": "cache", "emptyDir": {"sizeLimit": s.cache_size}},
        {"name": "tmp", "emptyDir": {"sizeLimit": format_bytes(TMP_SIZE)}},
    ]
    if s.token_secret:
        volumes.append(
            {
                "name": "token",
                "secret": {
                    "secretName": s.token_secret,
                    "defaultMode": 0o440,
                    "items": [{"key": "token", "path": "token"}],
                },
            }
        )
    return volumes


def _mounts(ctx: Context) -> list[dict[str, Any]]:
    """Where the container sees the volumes of :func:`_volumes` (the token read-only)."""
    mounts: list[dict[str, Any]] = [
        {"name": "workspace", "mountPath": WORKSPACE},
        {"name": "cache", "mountPath": CACHE},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if ctx.recipe.sandbox.token_secret:
        mounts.append({"name": "token", "mountPath": TOKEN_MOUNT, "readOnly": True})
    return mounts


def _container(ctx: Context, security: dict[str, Any]) -> dict[str, Any]:
    """The sandbox container: image, command, sizing, hardening, mounts and health probes."""
    s = ctx.recipe.sandbox
    return {
        "name": CONTAINER,
        "image": ctx.infra.images.sandbox,
        "imagePullPolicy": ctx.infra.images.pull_policy,
        "command": ["dockyard-sandbox"],
        "args": _args(ctx),
        "env": env_list({FLEET_ROLE_ENV: "sandbox", "HOME": WORKSPACE, "TMPDIR": "/tmp"}),
        "ports": [{"name": "http", "containerPort": s.port, "protocol": "TCP"}],
        "resources": sandbox_resources(ctx),
        "securityContext": security,
        "volumeMounts": _mounts(ctx),
        "startupProbe": _probe("/healthz", period=2, failures=30),
        "readinessProbe": _probe("/healthz", period=5, failures=2),
        "livenessProbe": _probe("/healthz", period=10, failures=3),
    }


def _pod_annotations(ctx: Context, security: dict[str, str]) -> dict[str, str]:
    """The security annotations (AppArmor on old clusters) plus where Prometheus scrapes."""
    return security | {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(ctx.recipe.sandbox.port),
        "prometheus.io/path": "/metrics",
    }


def _pod_spec(ctx: Context, security: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The pod: no API token or service links, drain grace, spread over nodes, isolation knobs."""
    pod_spec: dict[str, Any] = {
        "serviceAccountName": ctx.object_name("sandbox"),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": DRAIN_S + 15,
        "securityContext": security,
        "containers": [container],
        "volumes": _volumes(ctx),
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": ctx.selector(COMPONENT)},
            }
        ],
        **scheduling(ctx, "sandbox"),
    }
    if not ctx.infra.sandbox_security.host_users:
        pod_spec["hostUsers"] = False
    if ctx.infra.runtime_class:
        pod_spec["runtimeClassName"] = ctx.infra.runtime_class
    return pod_spec


def deployment(ctx: Context) -> dict[str, Any]:
    """The sandbox Deployment: hardened pods, rolled one at a time without losing capacity."""
    pod_sec, container_sec, annotations = _security(ctx)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": ctx.metadata("sandbox", COMPONENT, "sandbox", ctx.sandbox_namespace),
        "spec": {
            "replicas": ctx.recipe.sandbox.replicas.min,
            "selector": {"matchLabels": ctx.selector(COMPONENT)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {
                "metadata": {
                    "labels": ctx.labels(COMPONENT, "sandbox"),
                    "annotations": _pod_annotations(ctx, annotations),
                },
                "spec": _pod_spec(ctx, pod_sec, _container(ctx, container_sec)),
            },
        },
    }


def service(ctx: Context) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": ctx.metadata("sandbox", COMPONENT, "sandbox", ctx.sandbox_namespace),
        "spec": {
            "type": "ClusterIP",
            "selector": ctx.selector(COMPONENT),
            "ports": [
                {
                    "name": "http",
                    "port": ctx.recipe.sandbox.port,
                    "targetPort": "http",
                    "protocol": "TCP",
                }
            ],
        },
    }


def autoscaler(ctx: Context) -> dict[str, Any]:
    s = ctx.recipe.sandbox
    if s.autoscale.metric == "queue_depth":
        metric = {
            "type": "Pods",
            "pods": {
                "metric": {"name": s.autoscale.metric_name},
                "target": {"type": "AverageValue", "averageValue": s.autoscale.target_queue_depth},
            },
        }
    else:
        metric = {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {
                    "type": "Utilization",
                    "averageUtilization": s.autoscale.target_cpu_percent,
                },
            },
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": ctx.metadata("sandbox", COMPONENT, "sandbox", ctx.sandbox_namespace),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": ctx.object_name("sandbox"),
            },
            "minReplicas": s.replicas.min,
            "maxReplicas": s.replicas.max,
            "metrics": [metric],
            "behavior": {
                "scaleDown": {
                    "stabilizationWindowSeconds": s.autoscale.scale_down_stabilization_seconds
                },
                "scaleUp": {"stabilizationWindowSeconds": 0},
            },
        },
    }


def disruption_budget(ctx: Context) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": ctx.metadata("sandbox", COMPONENT, "sandbox", ctx.sandbox_namespace),
        "spec": {
            "maxUnavailable": ctx.recipe.sandbox.max_unavailable,
            "selector": {"matchLabels": ctx.selector(COMPONENT)},
        },
    }


def network_policy(ctx: Context) -> dict[str, Any]:
    """No egress at all; ingress on the service port only from this deployment's Ray pods
    (and, if ``infra.metrics_scraper`` is set, from the scraper for /metrics)."""
    port = [{"protocol": "TCP", "port": ctx.recipe.sandbox.port}]
    ray_pods: dict[str, Any] = {
        "podSelector": {
            "matchLabels": {RAY_POD_LABEL: "true", "app.kubernetes.io/instance": ctx.name}
        }
    }
    if ctx.sandbox_namespace != ctx.namespace:
        ray_pods["namespaceSelector"] = {
            "matchLabels": {"kubernetes.io/metadata.name": ctx.namespace}
        }
    ingress: list[dict[str, Any]] = [{"from": [ray_pods], "ports": port}]
    scraper = ctx.infra.metrics_scraper
    if scraper is not None:
        peer: dict[str, Any] = {}
        if scraper.namespace_labels:
            peer["namespaceSelector"] = {"matchLabels": dict(scraper.namespace_labels)}
        if scraper.pod_labels:
            peer["podSelector"] = {"matchLabels": dict(scraper.pod_labels)}
        ingress.append({"from": [peer], "ports": port})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": ctx.metadata("sandbox", COMPONENT, "sandbox", ctx.sandbox_namespace),
        "spec": {
            "podSelector": {"matchLabels": ctx.selector(COMPONENT)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": [],
        },
    }


def service_account(ctx: Context) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": ctx.metadata("sandbox", COMPONENT, "sandbox", ctx.sandbox_namespace),
        "automountServiceAccountToken": False,
    }


def render_sandbox(ctx: Context) -> list[dict[str, Any]]:
    if not ctx.recipe.sandbox.enabled:
        return []
    return [
        service_account(ctx),
        deployment(ctx),
        service(ctx),
        autoscaler(ctx),
        disruption_budget(ctx),
        network_policy(ctx),
    ]


__all__ = ["FLEET_ROLE_LABEL", "render_sandbox", "sandbox_resources"]
