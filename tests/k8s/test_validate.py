"""The offline validator fails on what a cluster would reject, and its vendored KubeRay schemas
are what the reference CRDs say."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dockyard.k8s import render_files, validate_objects
from dockyard.k8s.validate import vendor
from dockyard.k8s.validate.crd import vendored_schemas

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "k8s"


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return render_files(EXAMPLES / "recipes" / "grpo-code.yaml", EXAMPLES / "infra" / "gke-a3.yaml")


def _by_kind(objects: list[dict], kind: str) -> int:
    return next(i for i, o in enumerate(objects) if o["kind"] == kind)


def _errors(objects: list[dict], crd_dir: Path | None = None) -> list[tuple[str, str]]:
    report = validate_objects(objects, kubernetes_version="1.31", crd_dir=crd_dir)
    return [(f.path, f.message) for _, f in report.errors]


def _break(objects: list[dict], kind: str, edit) -> list[dict]:
    broken = copy.deepcopy(objects)
    edit(broken[_by_kind(broken, kind)])
    return broken


def _head_container(rayjob: dict) -> dict:
    return rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("source", ["vendored", "full"])
def test_rayjob_errors_are_found_with_their_path(objects, source, kuberay_crds) -> None:
    crd = kuberay_crds if source == "full" else None
    assert _errors(objects, crd) == []
    # an unknown field deep inside a pod template
    broken = _break(
        objects, "RayJob", lambda o: _head_container(o).update(imagePullPolicyy="Always")
    )
    errs = _errors(broken, crd)
    assert any(
        p == "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0]"
        and "imagePullPolicyy" in m
        for p, m in errs
    ), errs
    # a misspelt RayJob field
    broken = _break(objects, "RayJob", lambda o: o["spec"].update(entryPoint="x"))
    assert any(p == "spec" and "entryPoint" in m for p, m in _errors(broken, crd))
    # a wrong type in the group spec
    broken = _break(
        objects,
        "RayJob",
        lambda o: o["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(replicas="two"),
    )
    assert any(p.endswith("workerGroupSpecs[0].replicas") for p, _ in _errors(broken, crd))
    # an int32 overflow
    broken = _break(
        objects,
        "RayJob",
        lambda o: o["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(maxReplicas=2**31),
    )
    assert any(p.endswith("workerGroupSpecs[0].maxReplicas") for p, _ in _errors(broken, crd))
    # a malformed label in metadata (ObjectMeta schema and label rules)
    broken = _break(objects, "RayJob", lambda o: o["metadata"].update(labels={"bad key!": "x"}))
    assert any(p.startswith("metadata.labels") for p, _ in _errors(broken, crd))


def test_kubernetes_objects_errors(objects) -> None:
    def sel(o):
        o["spec"]["selector"]["matchLabels"] = {"app": "other"}

    assert ("spec.selector.matchLabels", "must match spec.template.metadata.labels") in _errors(
        _break(objects, "Deployment", sel)
    )

    def escalation(o):
        o["spec"]["template"]["spec"]["containers"][0]["securityContext"][
            "allowPrivilegeEscalation"
        ] = False

    errs = _errors(_break(objects, "Deployment", escalation))
    assert any("allowPrivilegeEscalation" in p and "CAP_SYS_ADMIN" in m for p, m in errs), errs

    def quantity(o):
        o["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "16GB"

    errs = _errors(_break(objects, "Deployment", quantity))
    assert any(p.endswith("resources.requests.memory") for p, _ in errs), errs

    def request_over_limit(o):
        o["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "100"

    errs = _errors(_break(objects, "Deployment", request_over_limit))
    assert any(p.endswith("resources.requests.cpu") and "exceeds limit" in m for p, m in errs), errs

    def unknown_field(o):
        o["spec"]["ingress"][0]["form"] = []

    errs = _errors(_break(objects, "NetworkPolicy", unknown_field))
    assert any(p == "spec.ingress[0]" and "'form' was unexpected" in m for p, m in errs), errs

    def hpa_target(o):
        o["spec"]["scaleTargetRef"]["name"] = "nothing"

    assert any(
        p == "spec.scaleTargetRef.name"
        for p, _ in _errors(_break(objects, "HorizontalPodAutoscaler", hpa_target))
    )

    def service_selector(o):
        o["spec"]["selector"] = {"app": "nothing"}

    assert any(
        p == "spec.selector" for p, _ in _errors(_break(objects, "Service", service_selector))
    )

    def mount(o):
        o["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "ghost", "mountPath": "/x"}
        )

    assert any("volumeMounts" in p for p, _ in _errors(_break(objects, "Deployment", mount)))


def test_unknown_kind_is_an_error(objects) -> None:
    extra = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "x"},
    }
    errs = _errors([*objects, extra])
    assert (
        "apiVersion",
        "no schema for example.com/v1 Widget (pass --crd-dir with its CRD)",
    ) in errs


def test_vendored_schemas_match_the_reference_crds(kuberay_crds) -> None:
    doc = vendor.build(kuberay_crds, "x")
    assert doc["schemas"] == json.loads(vendor.TARGET.read_text())["schemas"], (
        "the vendored KubeRay schemas drifted from the reference CRDs: "
        f"python -m dockyard.k8s.validate.vendor {kuberay_crds} '<source>'"
    )
    assert set(vendored_schemas()) == {("ray.io/v1", "RayCluster"), ("ray.io/v1", "RayJob")}


def test_rendering_imports_no_heavy_framework() -> None:
    code = (
        "import sys; from pathlib import Path; from dockyard.k8s import render_files, validate_objects; "
        f"o = render_files(Path({str(EXAMPLES)!r}) / 'recipes/grpo-code.yaml', Path({str(EXAMPLES)!r}) / 'infra/gke-a3.yaml'); "
        "assert validate_objects(o).ok; "
        "print(sorted(m for m in ('torch', 'jax', 'vllm', 'ray', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
