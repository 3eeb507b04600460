"""The package graph of docs/architecture.md is the code's (scripts/package_graph.py), every
package declares what its code imports, the graph has no cycle, and the floors hold: core
imports nothing of ours, the application imports everything it runs, nothing imports it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def graph(repo: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "package_graph", repo / "scripts/package_graph.py"
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_architecture_page_shows_the_graph_as_it_is(graph: ModuleType, repo: Path) -> None:
    page = (repo / "docs/architecture.md").read_text()
    assert graph.render_page(page, repo) == page, (
        "docs/architecture.md's package table is stale: run python scripts/package_graph.py"
    )


def test_every_package_declares_what_its_code_imports(graph: ModuleType, repo: Path) -> None:
    undeclared = {}
    for pkg in graph.packages(repo):
        hard, extra = graph.declared(pkg, repo)
        for dep, files in graph.code_imports(pkg, repo).items():
            if dep not in hard and dep not in extra:
                undeclared[f"dockyard-{pkg} -> dockyard-{dep}"] = files
    assert not undeclared, f"imports without a declared dependency: {undeclared}"


def test_no_package_cycle_and_the_floors_hold(graph: ModuleType, repo: Path) -> None:
    assert graph.cycles(repo) == []
    pkgs = graph.packages(repo)
    assert "train" in pkgs
    assert graph.code_imports("core", repo) == {}
    assert graph.code_imports("sandbox", repo) == {}  # installs alone on CPU nodes
    for pkg in pkgs:
        if pkg != "train":
            assert "train" not in graph.code_imports(pkg, repo), f"{pkg} imports the application"
    assert {"core", "envs", "serve", "sandbox"} <= set(graph.code_imports("train", repo))


def test_the_graph_sees_lazy_imports_and_import_strings(graph: ModuleType, tmp_path: Path) -> None:
    """Not vacuous: a lazy import and a ``module:attr`` string make edges, prose does not."""
    for pkg in ("core", "envs"):
        src = tmp_path / "packages" / f"dockyard-{pkg}" / "src" / "dockyard" / pkg
        src.mkdir(parents=True)
        (src.parents[2] / "pyproject.toml").write_text(
            f'[project]\nname = "dockyard-{pkg}"\ndescription = "x: y"\ndependencies = []\n'
        )
    (tmp_path / "packages/dockyard-core/src/dockyard/core/m.py").write_text(
        'def f():\n    import dockyard.envs.x\n\nX = "dockyard.envs.y:Z"\n"""dockyard.envs in prose"""\n'
    )
    (tmp_path / "packages/dockyard-envs/src/dockyard/envs/n.py").write_text(
        "from dockyard.core.m import f\n"
    )
    assert graph.code_imports("core", tmp_path) == {"envs": ["core/m.py"]}
    assert graph.cycles(tmp_path) == [["core", "envs"]]
