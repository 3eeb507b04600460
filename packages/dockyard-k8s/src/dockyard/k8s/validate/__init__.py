"""Offline validation of Kubernetes manifests: schemas (Kubernetes + KubeRay CRDs) and semantics.

    from dockyard.k8s.validate import validate_objects, validate_dir
    report = validate_dir("out/", kubernetes_version="1.31", crd_dir=None)
    assert report.ok, report.format()

Built-in kinds are checked against kubernetes-validate's strict schemas for the chosen version;
``ray.io`` kinds against the full CRDs in ``crd_dir`` when given, else the vendored KubeRay
schemas (pod templates checked against Kubernetes' PodTemplateSpec); then the cross-object rules
of :mod:`dockyard.k8s.validate.semantic`. A kind with no schema at all is an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dockyard.k8s.validate import k8s_schema, semantic
from dockyard.k8s.validate.crd import crd_validator
from dockyard.k8s.validate.semantic import Finding


@dataclass
class Report:
    """Every finding, per object. ``ok`` is False when any finding is an error."""

    checked: list[tuple[str, str, str]] = field(default_factory=list)  # (source, Kind/name, schema)
    findings: list[tuple[str, Finding]] = field(default_factory=list)  # (source, finding)

    @property
    def errors(self) -> list[tuple[str, Finding]]:
        return [(s, f) for s, f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[tuple[str, Finding]]:
        return [(s, f) for s, f in self.findings if f.severity != "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def format(self, verbose: bool = False) -> str:
        lines = []
        if verbose:
            lines += [f"ok    {src}: {r} against {schema}" for src, r, schema in self.checked]
        for src, f in self.findings:
            lines.append(f"{f.severity.upper():7} {src}: {f.ref}: {f.path}: {f.message}")
        lines.append(
            f"{len(self.checked)} objects, {len(self.errors)} errors, {len(self.warnings)} warnings"
        )
        return "\n".join(lines)


def validate_objects(
    objects: list[dict[str, Any]],
    *,
    kubernetes_version: str = "1.31",
    crd_dir: Path | str | None = None,
    sources: list[str] | None = None,
) -> Report:
    """Validate ``objects`` (``sources[i]`` names where object i came from, for messages)."""
    sources = sources or ["<rendered>"] * len(objects)
    crds, crd_desc = crd_validator(
        Path(crd_dir) if crd_dir is not None else None, kubernetes_version
    )
    k8s_desc = f"Kubernetes {k8s_schema.resolve_version(kubernetes_version)} (strict)"
    report = Report()
    seen: set[tuple[str, Finding]] = set()

    def add(src: str, finding: Finding) -> None:
        if (src, finding) not in seen:
            seen.add((src, finding))
            report.findings.append((src, finding))

    for src, obj in zip(sources, objects, strict=True):
        r = semantic.ref(obj)
        if not isinstance(obj, dict) or "apiVersion" not in obj or "kind" not in obj:
            add(
                src,
                Finding(r, "<root>", "not a Kubernetes object (apiVersion and kind are required)"),
            )
            continue
        if crds.knows(obj):
            result = crds.validate(obj)
            for e in result.errors:
                add(src, Finding(r, e.path, e.message))
            for w in result.warnings:
                add(src, Finding(r, w.path, w.message, "warning"))
            report.checked.append((src, r, crd_desc))
        elif k8s_schema.has_schema(obj, kubernetes_version):
            for e in k8s_schema.validate_object(obj, kubernetes_version):
                add(src, Finding(r, e.path, e.message))
            report.checked.append((src, r, k8s_desc))
        else:
            hint = (
                " (pass --crd-dir with its CRD)"
                if "." in str(obj.get("apiVersion", "")).split("/")[0]
                else ""
            )
            add(
                src,
                Finding(r, "apiVersion", f"no schema for {obj['apiVersion']} {obj['kind']}{hint}"),
            )
    valid = [o for o in objects if isinstance(o, dict) and "kind" in o]
    by_ref = {id(o): s for s, o in zip(sources, objects, strict=True)}
    for f in semantic.check(valid):
        src = next((by_ref[id(o)] for o in valid if semantic.ref(o) == f.ref), "<rendered>")
        add(src, f)
    return report


def load_manifests(path: Path | str) -> tuple[list[dict[str, Any]], list[str]]:
    """Objects from a YAML file or every ``*.yaml``/``*.yml`` file in a directory (sorted)."""
    path = Path(path)
    files = [path] if path.is_file() else sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
    if not files:
        raise FileNotFoundError(f"no YAML manifests in {path}")
    objects, sources = [], []
    for file in files:
        for i, doc in enumerate(yaml.safe_load_all(file.read_text())):
            if doc is None:
                continue
            objects.append(doc)
            sources.append(f"{file.name}#{i}" if i else file.name)
    return objects, sources


def validate_dir(
    path: Path | str, *, kubernetes_version: str = "1.31", crd_dir: Path | str | None = None
) -> Report:
    objects, sources = load_manifests(path)
    return validate_objects(
        objects, kubernetes_version=kubernetes_version, crd_dir=crd_dir, sources=sources
    )


__all__ = ["Finding", "Report", "load_manifests", "validate_dir", "validate_objects"]
