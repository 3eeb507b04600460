"""Regenerate the vendored KubeRay schemas from a directory of KubeRay CRD files.

    python -m dockyard.k8s.validate.vendor ../shared/k8s/kuberay-crds "kuberay commit feeaf72"

Keeps RayCluster and RayJob (apiVersion ray.io/v1) with their pod templates cut out
(:func:`dockyard.k8s.validate.crd.strip_pod_templates`): the pod templates are validated against
Kubernetes' own PodTemplateSpec schema from kubernetes-validate, which keeps the vendored file
small (the full CRDs are ~2 MB).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dockyard.k8s.validate.crd import load_crd_dir, strip_pod_templates

KINDS = (("ray.io/v1", "RayCluster"), ("ray.io/v1", "RayJob"))
TARGET = Path(__file__).resolve().parents[1] / "schemas" / "kuberay-v1.json"


def build(crd_dir: Path, source: str) -> dict[str, Any]:
    """The vendored document: ``{"source": ..., "schemas": {apiVersion: {kind: schema}}}``."""
    schemas = load_crd_dir(crd_dir)
    out: dict[str, Any] = {"source": source, "schemas": {}}
    for api_version, kind in KINDS:
        schema = schemas[(api_version, kind)]
        schema = {k: v for k, v in schema.items() if k != "description"}
        props = dict(schema["properties"])
        props.pop("status", None)  # written by the operator, never by us
        schema["properties"] = props
        out["schemas"].setdefault(api_version, {})[kind] = strip_pod_templates(schema)
    return out


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    doc = build(Path(argv[0]), argv[1])
    TARGET.write_text(render(doc))
    print(f"wrote {TARGET} ({TARGET.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
