"""The run's config is split once, at the top (issue 36 item 1): the drivers hold the whole
``MasterConfig`` — the algorithm drivers (``algorithms/``), the commands (``cli/``), the
evaluation's driver (``eval/__init__.py``, ``eval/plan.py``) and the pre-flight that checks a
whole config (``preflight.py``) — and every module below them takes its component's own typed
config, built by :mod:`dockyard.train.algorithms.configs`.

Every package is scanned, not only dockyard-train: the backends (torch, jax, serve), the
environments, k8s and the core's RL math take their own sections too. Two places may hold the
whole config: the schema that defines it (``dockyard.core.config``) and, in dockyard-train, the
drivers. dockyard-sandbox is not scanned: it does not depend on dockyard-core (its
``policy`` is the operator's source policy, another thing), so it cannot hold the run's config.

Read with :mod:`ast`: a module below the drivers never names ``MasterConfig``, never calls a
``from_master`` mapping or ``env_for_data``, and never reads a section that only the whole config
has (``x.grpo.seed``, ``x.policy.model_name``, ...). Sections a component holds as its own config
(``cluster`` in the stack's, ``env`` and ``judge`` in the collector's) are not such sections.
The constructors of the actors are checked in ``tests/train/runtime/test_stack_config.py``.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from dockyard.core.config import MasterConfig

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "packages" / "dockyard-train" / "src" / "dockyard" / "train"
DRIVERS = ("algorithms/", "cli/", "eval/__init__.py", "eval/plan.py", "preflight.py")
SCHEMA = REPO / "packages" / "dockyard-core" / "src" / "dockyard" / "core" / "config"
OWNED = {"cluster", "env", "judge"}  # sections that are a component's own config too
MASTER_ONLY = set(MasterConfig.model_fields) - OWNED
MASTER_CALLS = {"from_master", "env_for_data"}


def master_reads(path: Path) -> list[str]:
    """Where ``path`` reads the whole run's config (see the module docstring)."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        what = None
        if isinstance(n, ast.Name) and n.id == "MasterConfig":
            what = "names MasterConfig"
        elif isinstance(n, ast.alias) and n.name == "MasterConfig":
            what = "imports MasterConfig"
        elif isinstance(n, ast.Attribute) and n.attr in MASTER_CALLS:
            what = f"calls {n.attr}"
        elif (
            isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Attribute)
            and n.value.attr in MASTER_ONLY
        ):
            what = f"reads .{n.value.attr}.{n.attr}"
        if what:
            out.append(f"{path.relative_to(REPO)}:{getattr(n, 'lineno', '?')}: {what}")
    return out


def depends_on_core(package: Path) -> bool:
    """Whether ``package`` (a folder under ``packages/``) is dockyard-core or depends on it."""
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    deps = [Requirement(d).name for d in project.get("dependencies", [])]
    return project["name"] == "dockyard-core" or "dockyard-core" in deps


def below_the_drivers() -> list[Path]:
    """Every module of a package that can hold the run's config, but the schema and the
    drivers (module docstring)."""
    packages = [p for p in sorted((REPO / "packages").iterdir()) if (p / "pyproject.toml").exists()]
    out = []
    for package in filter(depends_on_core, packages):
        for f in sorted((package / "src").rglob("*.py")):
            if f.is_relative_to(SCHEMA):
                continue
            if f.is_relative_to(TRAIN) and str(f.relative_to(TRAIN)).startswith(DRIVERS):
                continue
            out.append(f)
    return out


def test_no_module_below_the_drivers_reads_the_run_config() -> None:
    below = below_the_drivers()
    scanned = {f.relative_to(REPO / "packages").parts[0] for f in below}
    # the runtime, the collector, the batching, the backends, the environments, the RL math
    assert scanned == {"dockyard-core", "dockyard-envs", "dockyard-jax", "dockyard-k8s",
                       "dockyard-serve", "dockyard-torch", "dockyard-train"}  # fmt: skip
    assert sum(f.is_relative_to(TRAIN) for f in below) > 30
    bad = [r for f in below for r in master_reads(f)]
    assert not bad, (
        "modules below the drivers take their own config (split in "
        "dockyard.train.algorithms.configs), not the run's:\n" + "\n".join(bad)
    )


def test_the_check_sees_each_way_of_reading_the_run_config(tmp_path: Path) -> None:
    f = REPO / "packages" / "tmp_probe_split.py"  # under REPO for relative_to; removed below
    f.write_text(
        "from dockyard.core.config import MasterConfig\n"
        "def a(cfg):\n    return cfg.grpo.seed, cfg.policy.model_name\n"
        "def b(cfg):\n    return X.from_master(cfg), cfg.env_for_data()\n"
        "def c(own):\n    return own.cluster.num_nodes, own.env.options, own.judge.model_name\n"
    )
    try:
        found = [r.split(": ", 1)[1] for r in master_reads(f)]
    finally:
        f.unlink()
    assert sorted(found) == sorted(
        ["imports MasterConfig", "reads .grpo.seed", "reads .policy.model_name",
         "calls from_master", "calls env_for_data"]
    )  # fmt: skip


def untyped_run_configs(path: Path) -> list[str]:
    """Where ``path`` takes a ``cfg`` parameter annotated ``Any`` (a driver's ``cfg`` is the
    run's ``MasterConfig``, typed: pyright then checks every section it reads)."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            for a in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs]:
                if (
                    a.arg == "cfg"
                    and isinstance(a.annotation, ast.Name)
                    and a.annotation.id == "Any"
                ):
                    out.append(f"{path.relative_to(REPO)}:{a.lineno}: {n.name}(cfg: Any)")
    return out


def test_the_drivers_type_the_run_config() -> None:
    drivers = [
        f for f in sorted(TRAIN.rglob("*.py")) if str(f.relative_to(TRAIN)).startswith(DRIVERS)
    ]
    assert len(drivers) > 20
    bad = [r for f in drivers for r in untyped_run_configs(f)]
    assert not bad, "a driver's cfg is the run's MasterConfig:\n" + "\n".join(bad)
    probe = REPO / "packages" / "tmp_probe_any.py"
    probe.write_text("from typing import Any\ndef f(cfg: Any, *, x: int) -> None:\n    pass\n")
    try:
        assert [r.split(": ", 1)[1] for r in untyped_run_configs(probe)] == ["f(cfg: Any)"]
    finally:
        probe.unlink()
