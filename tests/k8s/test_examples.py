"""Every example recipe renders with its infra specs and validates offline: against the
Kubernetes strict schemas, the vendored KubeRay schemas, and the full KubeRay CRDs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dockyard.k8s import render_files, validate_objects, write_manifests
from dockyard.k8s.cli import main as cli_main
from dockyard.k8s.validate import validate_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "k8s"
MATRIX = yaml.safe_load((EXAMPLES / "matrix.yaml").read_text())
PAIRS = [(p["recipe"], p["infra"]) for p in MATRIX]


def test_matrix_covers_every_example() -> None:
    recipes = {str(p.relative_to(EXAMPLES)) for p in (EXAMPLES / "recipes").glob("*.yaml")}
    infras = {str(p.relative_to(EXAMPLES)) for p in (EXAMPLES / "infra").glob("*.yaml")}
    assert recipes
    assert infras
    assert recipes == {r for r, _ in PAIRS}, "every recipe must appear in examples/k8s/matrix.yaml"
    assert infras == {i for _, i in PAIRS}, (
        "every infra spec must appear in examples/k8s/matrix.yaml"
    )


@pytest.mark.parametrize(
    ("recipe", "infra"), PAIRS, ids=[f"{Path(r).stem}@{Path(i).stem}" for r, i in PAIRS]
)
def test_example_renders_and_validates(recipe: str, infra: str, kuberay_crds: Path) -> None:
    objects = render_files(EXAMPLES / recipe, EXAMPLES / infra)
    version = yaml.safe_load((EXAMPLES / infra).read_text()).get("kubernetes_version", "1.31")
    vendored = validate_objects(objects, kubernetes_version=version)
    assert vendored.ok, vendored.format()
    full = validate_objects(objects, kubernetes_version=version, crd_dir=kuberay_crds)
    assert full.ok, full.format()
    kinds = {o["kind"] for o in objects}
    assert kinds & {"RayJob", "RayCluster"}
    assert "ConfigMap" in kinds
    # every object was checked against a schema, none skipped
    assert len(full.checked) == len(objects)
    assert any("CRDs in" in schema for _, _, schema in full.checked)


def test_cli_render_then_validate(tmp_path: Path, kuberay_crds: Path, capsys) -> None:
    out = tmp_path / "out"
    recipe, infra = EXAMPLES / "recipes" / "grpo-code.yaml", EXAMPLES / "infra" / "gke-a3.yaml"
    rc = cli_main(
        [
            "render",
            "--recipe",
            str(recipe),
            "--infra",
            str(infra),
            "-o",
            str(out),
            "--crd-dir",
            str(kuberay_crds),
        ]
    )
    assert rc == 0, capsys.readouterr()
    files = sorted(out.glob("*.yaml"))
    assert next(f.name for f in files).startswith("00-namespace-")
    assert files[-1].name == f"{len(files) - 1:02d}-rayjob-grpo-code.yaml"
    assert cli_main(["validate", str(out), "--crd-dir", str(kuberay_crds)]) == 0
    report = capsys.readouterr().out
    assert f"{len(files)} objects, 0 errors" in report


def test_written_files_round_trip(tmp_path: Path) -> None:
    objects = render_files(
        EXAMPLES / "recipes" / "tiny-cpu.yaml", EXAMPLES / "infra" / "kind-local.yaml"
    )
    paths = write_manifests(objects, tmp_path)
    assert [yaml.safe_load(p.read_text()) for p in paths] == objects
    report = validate_dir(tmp_path)
    assert report.ok, report.format()
    # a second render into the same directory replaces the files, it does not pile up
    write_manifests(objects[:3], tmp_path)
    assert len(list(tmp_path.glob("*.yaml"))) == 3
