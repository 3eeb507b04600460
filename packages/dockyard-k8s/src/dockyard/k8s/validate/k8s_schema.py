"""Kubernetes' own object schemas, offline, from the files the `kubernetes-validate` package ships.

kubernetes-validate bundles the OpenAPI-derived JSON schemas of every Kubernetes minor version it
supports (``kubernetes_validate/kubernetes-json-schema/v1.N.0-local[-strict]/``): one file per
kind plus ``_definitions.json``. We use the *strict* variant (unknown fields are errors, as with
``kubectl apply --validate=strict``) and collect every error rather than the first one.
Nothing here touches the network.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jsonschema
from referencing import Registry, Resource

_DEFS_ID = "https://kubernetes.io/api/_definitions.json"


@dataclass(frozen=True)
class SchemaError:
    """One schema violation: ``path`` is the dotted path inside the object (``spec.replicas``)."""

    path: str
    message: str


def _schema_root() -> Any:
    return resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")


@functools.cache
def available_versions() -> tuple[str, ...]:
    """Minor versions with bundled strict schemas, oldest first: ``("1.25", ..., "1.37")``."""
    found = []
    for entry in _schema_root().iterdir():
        m = re.fullmatch(r"v(\d+)\.(\d+)\.\d+-local-strict", entry.name)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), entry.name))
    return tuple(f"{a}.{b}" for a, b, _ in sorted(found))


def _key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@functools.cache
def resolve_version(version: str) -> str:
    """The newest bundled minor version not newer than ``version`` (ValueError if none)."""
    versions = available_versions()
    usable = [v for v in versions if _key(v) <= _key(version)]
    if not usable:
        raise ValueError(
            f"kubernetes-validate has no schemas for Kubernetes {version} or older "
            f"(bundled: {versions[0]}..{versions[-1]}); pick kubernetes_version >= {versions[0]}"
        )
    if _key(version) > _key(versions[-1]):
        raise ValueError(
            f"kubernetes-validate's newest schemas are for Kubernetes {versions[-1]}, not {version}: "
            "upgrade it (pip install -U kubernetes-validate) or validate against an older version"
        )
    return usable[-1]


def _dir(version: str) -> Any:
    return _schema_root().joinpath(f"v{resolve_version(version)}.0-local-strict")


@functools.cache
def _registry(version: str) -> Registry:
    defs = json.loads(_dir(version).joinpath("_definitions.json").read_text())
    return Registry().with_resource(_DEFS_ID, Resource.from_contents(defs))


def _file_name(api_version: str, kind: str) -> str:
    # "apps/v1" -> "apps-v1"; "networking.k8s.io/v1" -> "networking-v1"; "v1" -> "v1"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


@functools.cache
def _object_validator(
    version: str, api_version: str, kind: str
) -> jsonschema.Draft202012Validator | None:
    path = _dir(version).joinpath(_file_name(api_version, kind))
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    return jsonschema.Draft202012Validator(schema, registry=_registry(version))


@functools.cache
def _definition_validator(version: str, definition: str) -> jsonschema.Draft202012Validator:
    schema = {"$ref": f"{_DEFS_ID}#/$defs/{definition}"}
    return jsonschema.Draft202012Validator(schema, registry=_registry(version))


def has_schema(obj: dict[str, Any], version: str) -> bool:
    return (
        _object_validator(version, str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        is not None
    )


def _errors(
    validator: jsonschema.Draft202012Validator, instance: Any, prefix: str = ""
) -> list[SchemaError]:
    out = []
    for err in sorted(
        validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path))
    ):
        best = _most_specific(err)
        out.append(SchemaError(join_path(prefix, best.absolute_path), best.message))
    return out


def validate_object(obj: dict[str, Any], version: str) -> list[SchemaError]:
    """Errors of a built-in Kubernetes object against the strict schema of ``version``.

    Raises LookupError when no bundled schema covers its apiVersion/kind (e.g. a CRD kind).
    """
    validator = _object_validator(version, str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    if validator is None:
        raise LookupError(
            f"no Kubernetes {version} schema for {obj.get('apiVersion')}/{obj.get('kind')}"
        )
    return _errors(validator, obj)


def validate_definition(
    instance: Any, definition: str, version: str, prefix: str = ""
) -> list[SchemaError]:
    """Errors of ``instance`` against one named definition, e.g. ``io.k8s.api.core.v1.Toleration``."""
    return _errors(_definition_validator(version, definition), instance, prefix)


def join_path(prefix: str, parts: Any) -> str:
    out = prefix
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<root>"


def _most_specific(err: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For oneOf/anyOf failures (every nullable field is one), the deepest sub-error, skipping
    the "is not of type 'null'" branch."""
    while err.context:
        candidates = [e for e in err.context if "null" not in str(e.validator_value)]
        if not candidates:
            break
        deepest = max(candidates, key=lambda e: len(e.absolute_path))
        if len(deepest.absolute_path) < len(err.absolute_path):
            break
        err = deepest
    return err
