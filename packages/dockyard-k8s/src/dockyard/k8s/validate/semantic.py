"""Checks the schemas cannot express but the API server (or the cluster) enforces.

The OpenAPI schemas say what fields exist and their types; they do not say that a Deployment's
selector must match its template's labels, that quantities must parse, that requests may not
exceed limits, or that ``allowPrivilegeEscalation: false`` cannot go with ``CAP_SYS_ADMIN``.
These rules are written here, one function each, with the message the user needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dockyard.k8s.pods import as_int, pod_templates
from dockyard.k8s.quantity import parse_quantity

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PULL = {"Always", "IfNotPresent", "Never"}
_NAMESPACED_EXEMPT = {"Namespace", "PriorityClass"}


@dataclass(frozen=True)
class Finding:
    """``ref`` = ``Kind/name``; ``path`` inside the object; severity error | warning."""

    ref: str
    path: str
    message: str
    severity: str = "error"


def ref(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def _labels_ok(labels: dict[str, Any], where: str) -> Iterator[tuple[str, str]]:
    for key, value in (labels or {}).items():
        prefix, _, name = str(key).rpartition("/")
        if (
            (prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)))
            or len(name) > 63
            or not _LABEL_NAME.match(name)
        ):
            yield f"{where}.{key}", f"invalid label key {key!r}"
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            yield f"{where}.{key}", f"invalid label value {value!r} (<= 63 chars of [A-Za-z0-9._-])"


def check_metadata(obj: dict[str, Any]) -> Iterator[Finding]:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    if obj.get("kind") == "Service":
        if not _DNS1035.match(name) or len(name) > 63:
            yield Finding(
                ref(obj),
                "metadata.name",
                "a Service name must be a DNS-1035 label (<= 63, starts with a letter)",
            )
    elif not _SUBDOMAIN.match(name) or len(name) > 253:
        yield Finding(ref(obj), "metadata.name", f"{name!r} is not a DNS-1123 subdomain")
    if obj.get("kind") in ("RayJob", "RayCluster") and len(name) > 47:
        yield Finding(
            ref(obj),
            "metadata.name",
            "KubeRay derives service names from it: keep it <= 47 characters",
        )
    if obj.get("kind") not in _NAMESPACED_EXEMPT and not meta.get("namespace"):
        yield Finding(
            ref(obj),
            "metadata.namespace",
            "not set: the object would land in the current kubectl namespace",
            "warning",
        )
    for path, msg in _labels_ok(meta.get("labels") or {}, "metadata.labels"):
        yield Finding(ref(obj), path, msg)


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_pod_template(
    obj: dict[str, Any], path: str, template: dict[str, Any]
) -> Iterator[Finding]:
    r = ref(obj)
    spec = template.get("spec") or {}
    for p, msg in _labels_ok(
        (template.get("metadata") or {}).get("labels") or {}, f"{path}.metadata.labels"
    ):
        yield Finding(r, p, msg)
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    names: set[str] = set()
    containers = spec.get("containers") or []
    if not containers:
        yield Finding(r, f"{path}.spec.containers", "a pod needs at least one container")
    for i, c in enumerate(containers):
        cp = f"{path}.spec.containers[{i}]"
        if c.get("name") in names:
            yield Finding(r, f"{cp}.name", f"duplicate container name {c.get('name')!r}")
        names.add(c.get("name"))
        if c.get("imagePullPolicy") not in (None, *_PULL):
            yield Finding(r, f"{cp}.imagePullPolicy", f"must be one of {sorted(_PULL)}")
        yield from _check_resources(r, cp, c.get("resources") or {})
        for j, m in enumerate(c.get("volumeMounts") or []):
            if m.get("name") not in volumes:
                yield Finding(
                    r,
                    f"{cp}.volumeMounts[{j}].name",
                    f"no volume named {m.get('name')!r} in the pod",
                )
        ports = {p.get("name") for p in c.get("ports") or []}
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
            if isinstance(port, str) and port not in ports:
                yield Finding(r, f"{cp}.{probe}.httpGet.port", f"no container port named {port!r}")
        yield from _check_security(r, cp, c.get("securityContext") or {}, spec)
        env_names = [e.get("name") for e in c.get("env") or []]
        for dup in sorted({n for n in env_names if env_names.count(n) > 1}):
            yield Finding(r, f"{cp}.env", f"environment variable {dup!r} set twice")


def _check_resources(r: str, cp: str, res: dict[str, Any]) -> Iterator[Finding]:
    parsed: dict[str, dict[str, Any]] = {}
    for field in ("requests", "limits"):
        parsed[field] = {}
        for name, value in (res.get(field) or {}).items():
            try:
                parsed[field][name] = parse_quantity(value)
            except ValueError as e:
                yield Finding(r, f"{cp}.resources.{field}.{name}", str(e))
    for name, req in parsed["requests"].items():
        lim = parsed["limits"].get(name)
        if lim is not None and req > lim:
            yield Finding(
                r, f"{cp}.resources.requests.{name}", f"request {req} exceeds limit {lim}"
            )
        if "/" in name and name not in parsed["limits"]:
            yield Finding(
                r,
                f"{cp}.resources.limits.{name}",
                "extended resources (GPUs) must be set in limits",
            )
        if "/" in name and lim is not None and lim != req:
            yield Finding(
                r, f"{cp}.resources.requests.{name}", "extended resources need requests == limits"
            )


def _check_security(
    r: str, cp: str, sc: dict[str, Any], pod_spec: dict[str, Any]
) -> Iterator[Finding]:
    added = {
        str(c).upper().removeprefix("CAP_") for c in (sc.get("capabilities") or {}).get("add") or []
    }
    if sc.get("allowPrivilegeEscalation") is False and (
        sc.get("privileged") or "SYS_ADMIN" in added
    ):
        yield Finding(
            r, f"{cp}.securityContext.allowPrivilegeEscalation",
            "the API server rejects allowPrivilegeEscalation: false together with privileged or CAP_SYS_ADMIN",
        )  # fmt: skip
    if sc.get("procMount") == "Unmasked" and pod_spec.get("hostUsers", True) is not False:
        yield Finding(
            r, f"{cp}.securityContext.procMount", "Unmasked requires the pod's hostUsers: false"
        )
    if sc.get("readOnlyRootFilesystem") and not (pod_spec.get("volumes")):
        yield Finding(
            r,
            f"{cp}.securityContext.readOnlyRootFilesystem",
            "read-only root and no writable volume",
            "warning",
        )


@dataclass(frozen=True)
class _Rendered:
    """What the rendered objects provide, by namespace: pod labels and the names of referents."""

    pod_labels: dict[str, list[dict[str, str]]]
    deployments: set[tuple[str, str]]
    config_maps: set[tuple[str, str]]
    claims: set[tuple[str, str]]


def _namespace(obj: dict[str, Any]) -> str:
    """The object's namespace ("" when unset), the key every cross-object lookup uses."""
    return str(obj.get("metadata", {}).get("namespace", ""))


def _index(objects: list[dict[str, Any]]) -> _Rendered:
    """Collect what references and selectors may point at, so each check is a set lookup."""
    rendered = _Rendered({}, set(), set(), set())
    for obj in objects:
        ns = _namespace(obj)
        name = str(obj.get("metadata", {}).get("name", ""))
        if obj.get("kind") == "Deployment":
            rendered.deployments.add((ns, name))
        if obj.get("kind") == "ConfigMap":
            rendered.config_maps.add((ns, name))
        if obj.get("kind") == "PersistentVolumeClaim":
            rendered.claims.add((ns, name))
        for pt in pod_templates(obj):
            labels = (pt.template.get("metadata") or {}).get("labels") or {}
            rendered.pod_labels.setdefault(ns, []).append(labels)
    return rendered


def _check_volume_refs(
    r: str, ns: str, template: dict[str, Any], rendered: _Rendered
) -> Iterator[Finding]:
    """Warn about pod volumes whose ConfigMap, claim or Secret the render does not provide."""
    for v in (template.get("spec") or {}).get("volumes") or []:
        cm = (v.get("configMap") or {}).get("name")
        if cm and (ns, cm) not in rendered.config_maps:
            yield Finding(
                r,
                "volumes",
                f"ConfigMap {cm!r} is not among the rendered objects",
                "warning",
            )
        pvc = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if pvc and (ns, pvc) not in rendered.claims:
            yield Finding(
                r,
                "volumes",
                f"PersistentVolumeClaim {pvc!r} is not rendered: it must exist",
                "warning",
            )
        secret = (v.get("secret") or {}).get("secretName")
        if secret:
            yield Finding(
                r, "volumes", f"Secret {secret!r} must exist in namespace {ns!r}", "warning"
            )


def _check_deployment_selector(obj: dict[str, Any]) -> Iterator[Finding]:
    """A Deployment whose selector misses its own template is rejected by the API server."""
    if obj.get("kind") != "Deployment":
        return
    spec = obj.get("spec") or {}
    sel = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not _matches(sel, labels):
        yield Finding(
            ref(obj), "spec.selector.matchLabels", "must match spec.template.metadata.labels"
        )


def _check_selects_pods(obj: dict[str, Any], ns: str, rendered: _Rendered) -> Iterator[Finding]:
    """A Service, PodDisruptionBudget or NetworkPolicy must select some rendered pod."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind not in ("Service", "PodDisruptionBudget", "NetworkPolicy"):
        return
    sel = (
        spec.get("selector")
        if kind == "Service"
        else (spec.get("selector") or spec.get("podSelector") or {}).get("matchLabels")
    )
    field = (
        "spec.selector"
        if kind == "Service"
        else (
            "spec.selector.matchLabels"
            if kind == "PodDisruptionBudget"
            else "spec.podSelector.matchLabels"
        )
    )
    if not any(_matches(sel or {}, labels) for labels in rendered.pod_labels.get(ns, [])):
        yield Finding(ref(obj), field, f"selects no rendered pod in namespace {ns!r}")


def _check_autoscaler(obj: dict[str, Any], ns: str, rendered: _Rendered) -> Iterator[Finding]:
    """An HPA must target a rendered Deployment and keep minReplicas <= maxReplicas."""
    if obj.get("kind") != "HorizontalPodAutoscaler":
        return
    r, spec = ref(obj), obj.get("spec") or {}
    target = spec.get("scaleTargetRef") or {}
    if target.get("kind") == "Deployment" and (ns, target.get("name")) not in rendered.deployments:
        yield Finding(
            r, "spec.scaleTargetRef.name", f"no Deployment {target.get('name')!r} in {ns!r}"
        )
    if as_int(spec.get("minReplicas"), 1) > as_int(spec.get("maxReplicas"), 2**31):
        yield Finding(r, "spec.minReplicas", "exceeds spec.maxReplicas")


def _check_ray_groups(obj: dict[str, Any]) -> Iterator[Finding]:
    """Ray worker groups need unique names and replicas within their min/max bounds."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind not in ("RayJob", "RayCluster"):
        return
    r = ref(obj)
    cluster = spec.get("rayClusterSpec", {}) if kind == "RayJob" else spec
    seen: set[str] = set()
    for i, g in enumerate(cluster.get("workerGroupSpecs") or []):
        gp = f"{'spec.rayClusterSpec' if kind == 'RayJob' else 'spec'}.workerGroupSpecs[{i}]"
        if g.get("groupName") in seen:
            yield Finding(r, f"{gp}.groupName", f"duplicate group {g.get('groupName')!r}")
        seen.add(g.get("groupName"))
        lo, n = as_int(g.get("minReplicas"), 0), as_int(g.get("replicas"), 0)
        hi = as_int(g.get("maxReplicas"), 2**31 - 1)
        if not lo <= n <= hi:
            yield Finding(
                r,
                f"{gp}.replicas",
                f"needs minReplicas <= replicas <= maxReplicas ({lo}, {n}, {hi})",
            )


def check_workloads(objects: list[dict[str, Any]]) -> Iterator[Finding]:
    """Selectors match pods, references resolve, replica bounds hold."""
    rendered = _index(objects)
    for obj in objects:
        ns = _namespace(obj)
        for pt in pod_templates(obj):
            yield from check_pod_template(obj, pt.path, pt.template)
            yield from _check_volume_refs(ref(obj), ns, pt.template, rendered)
        yield from _check_deployment_selector(obj)
        yield from _check_selects_pods(obj, ns, rendered)
        yield from _check_autoscaler(obj, ns, rendered)
        yield from _check_ray_groups(obj)


def check(objects: list[dict[str, Any]]) -> list[Finding]:
    findings: list[Finding] = []
    for obj in objects:
        findings += check_metadata(obj)
    findings += check_workloads(objects)
    return findings
