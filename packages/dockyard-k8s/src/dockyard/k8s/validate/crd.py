"""Custom resources (KubeRay's RayCluster / RayJob) validated offline against CRD schemas.

A CRD's ``openAPIV3Schema`` is turned into a JSON schema the way the API server reads it:

* objects with ``properties`` reject unknown fields (``kubectl apply --validate=strict``), unless
  marked ``x-kubernetes-preserve-unknown-fields``;
* ``nullable: true`` admits null; ``format: int32/int64`` bounds integers;
* ``x-kubernetes-validations`` (CEL rules) cannot be evaluated offline: when an object sets a
  field that carries such a rule, a *warning* says which rule went unchecked;
* ``metadata`` is checked against Kubernetes' ObjectMeta.

Two sources of CRD schemas:

* full CRD files (``--crd-dir``; the tests use the reference copies in ``../shared/k8s/kuberay-crds``);
* without them, the vendored ``schemas/kuberay-v1.json``: the same CRD schemas with every embedded
  PodTemplateSpec cut out (:func:`strip_pod_templates`) and replaced by a marker, at whose place
  the pod template is checked against Kubernetes' own ``PodTemplateSpec`` schema instead.
  ``python -m dockyard.k8s.validate.vendor CRD_DIR`` regenerates it; a test checks it matches.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from dockyard.k8s.validate import k8s_schema
from dockyard.k8s.validate.k8s_schema import SchemaError

POD_TEMPLATE_MARK = "x-dockyard-pod-template"
_CEL = "x-kubernetes-validations"
_INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}

CrdKey = tuple[str, str]  # (apiVersion, kind), e.g. ("ray.io/v1", "RayJob")


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~10x faster on 1 MB CRDs


def load_crd_dir(path: Path) -> dict[CrdKey, dict[str, Any]]:
    """``openAPIV3Schema`` of every served version of every CRD in the YAML files under ``path``."""
    files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
    if not files:
        raise FileNotFoundError(f"no CRD YAML files in {path}")
    stamp = tuple((str(f.resolve()), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    return _load_crd_files(stamp)  # shared: callers only read it


@functools.cache
def _load_crd_files(stamp: tuple[tuple[str, int, int], ...]) -> dict[CrdKey, dict[str, Any]]:
    out: dict[CrdKey, dict[str, Any]] = {}
    for name, _, _ in stamp:
        for doc in yaml.load_all(Path(name).read_text(), Loader=_Loader):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                if version.get("served", True) and "schema" in version:
                    out[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return out


def is_pod_template(schema: Mapping[str, Any]) -> bool:
    """A PodTemplateSpec: {metadata, spec} where spec has containers."""
    props = schema.get("properties", {})
    spec = props.get("spec", {})
    return set(props) == {"metadata", "spec"} and "containers" in spec.get("properties", {})


def strip_pod_templates(schema: Any) -> Any:
    """A copy of ``schema`` with every embedded PodTemplateSpec replaced by the marker."""
    if isinstance(schema, dict):
        if is_pod_template(schema):
            return {POD_TEMPLATE_MARK: True}
        return {k: strip_pod_templates(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [strip_pod_templates(v) for v in schema]
    return schema


def to_json_schema(openapi: Any) -> Any:
    """A structural OpenAPI v3 schema -> JSON schema with the API server's strictness."""
    if isinstance(openapi, list):
        return [to_json_schema(v) for v in openapi]
    if not isinstance(openapi, dict):
        return openapi
    out = {k: to_json_schema(v) for k, v in openapi.items() if k not in ("nullable", "default")}
    if openapi.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not openapi.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    bounds = _INT_BOUNDS.get(str(openapi.get("format")))
    if bounds and openapi.get("type") == "integer":
        out.setdefault("minimum", bounds[0])
        out.setdefault("maximum", bounds[1])
    if openapi.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


@functools.cache
def vendored_schemas() -> dict[CrdKey, dict[str, Any]]:
    """The vendored KubeRay schemas (pod templates cut out), keyed by (apiVersion, kind)."""
    data = json.loads(
        resources.files("dockyard.k8s").joinpath("schemas/kuberay-v1.json").read_text()
    )
    return {
        (api, kind): schema
        for api, kinds in data["schemas"].items()
        for kind, schema in kinds.items()
    }


def vendored_source() -> str:
    data = json.loads(
        resources.files("dockyard.k8s").joinpath("schemas/kuberay-v1.json").read_text()
    )
    return str(data["source"])


@dataclass(frozen=True)
class CrdResult:
    errors: list[SchemaError]
    warnings: list[SchemaError]


class CrdValidator:
    """Validates custom resources against a set of CRD schemas (full or vendored)."""

    def __init__(self, schemas: Mapping[CrdKey, dict[str, Any]], k8s_version: str) -> None:
        self.schemas = dict(schemas)
        self.k8s_version = k8s_version
        self._compiled: dict[CrdKey, jsonschema.protocols.Validator] = {}

    def knows(self, obj: Mapping[str, Any]) -> bool:
        return (str(obj.get("apiVersion")), str(obj.get("kind"))) in self.schemas

    def _validator(self, key: CrdKey) -> jsonschema.protocols.Validator:
        if key not in self._compiled:
            schema = to_json_schema(self.schemas[key])
            cls = jsonschema.validators.extend(
                jsonschema.Draft202012Validator,
                {POD_TEMPLATE_MARK: self._pod_template_keyword, _CEL: _cel_keyword},
            )
            self._compiled[key] = cls(schema)
        return self._compiled[key]

    def _pod_template_keyword(self, validator: Any, value: Any, instance: Any, schema: Any):
        for err in k8s_schema.validate_definition(
            instance, "io.k8s.api.core.v1.PodTemplateSpec", self.k8s_version
        ):
            yield jsonschema.ValidationError(
                f"{err.message} (at {err.path} of the pod template)", validator=POD_TEMPLATE_MARK
            )

    def validate(self, obj: Mapping[str, Any]) -> CrdResult:
        key = (str(obj.get("apiVersion")), str(obj.get("kind")))
        errors: list[SchemaError] = []
        warnings: list[SchemaError] = []
        for err in self._validator(key).iter_errors(obj):
            path = k8s_schema.join_path("", err.absolute_path)
            if err.validator == _CEL:
                warnings.append(SchemaError(path, err.message))
            elif err.validator == POD_TEMPLATE_MARK:
                errors.append(_pod_template_error(path, err.message))
            else:
                errors.append(SchemaError(path, err.message))
        if isinstance(obj.get("metadata"), dict):
            errors += k8s_schema.validate_definition(
                obj["metadata"],
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                self.k8s_version,
                "metadata",
            )
        return CrdResult(errors, warnings)


def _pod_template_error(path: str, message: str) -> SchemaError:
    # "msg (at spec.containers[0].x of the pod template)" -> path + inner path
    inner = message.rsplit(" (at ", 1)
    if len(inner) == 2 and inner[1].endswith(" of the pod template)"):
        sub = inner[1].removesuffix(" of the pod template)")
        return SchemaError(f"{path}.{sub}" if sub != "<root>" else path, inner[0])
    return SchemaError(path, message)


def _cel_keyword(validator: Any, rules: Any, instance: Any, schema: Any):
    for rule in rules:
        if "oldSelf" in rule.get("rule", ""):
            continue  # transition rules only apply to updates of an existing object
        yield jsonschema.ValidationError(
            f"CEL rule not evaluated offline: {rule.get('message') or rule.get('rule')}",
            validator=_CEL,
        )


def crd_validator(crd_dir: Path | None, k8s_version: str) -> tuple[CrdValidator, str]:
    """A (cached) validator over the full CRDs in ``crd_dir``, else the vendored schemas; and a
    description of the source for reports."""
    if crd_dir is not None:
        schemas = load_crd_dir(crd_dir)
        return _cached_validator(id(schemas), k8s_version, schemas), f"CRDs in {crd_dir}"
    schemas = vendored_schemas()
    return _cached_validator(
        id(schemas), k8s_version, schemas
    ), f"vendored KubeRay schemas ({vendored_source()})"


_VALIDATORS: dict[tuple[int, str], CrdValidator] = {}


def _cached_validator(
    key: int, k8s_version: str, schemas: Mapping[CrdKey, dict[str, Any]]
) -> CrdValidator:
    # ``schemas`` objects are themselves cached for the process, so their id is a stable key
    if (key, k8s_version) not in _VALIDATORS:
        _VALIDATORS[(key, k8s_version)] = CrdValidator(schemas, k8s_version)
    return _VALIDATORS[(key, k8s_version)]
