"""A broken recipe, infra spec or config fails with an error that names the field at fault."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dockyard.k8s import SpecError, SpecErrors, render_files
from dockyard.k8s.cli import main as cli_main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "k8s"
RECIPE = yaml.safe_load((EXAMPLES / "recipes" / "grpo-code.yaml").read_text())
INFRA = yaml.safe_load((EXAMPLES / "infra" / "gke-a3.yaml").read_text())
RECIPE["config"] = str((EXAMPLES / "recipes" / RECIPE["config"]).resolve())


def _write(tmp: Path, recipe: dict[str, Any], infra: dict[str, Any]) -> tuple[Path, Path]:
    (tmp / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    (tmp / "infra.yaml").write_text(yaml.safe_dump(infra))
    return tmp / "recipe.yaml", tmp / "infra.yaml"


def _fields(err: Exception) -> list[str]:
    errors = err.errors if isinstance(err, SpecErrors) else [err]
    return [e.field for e in errors]


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def apply(d: dict) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d.setdefault(p, {})
        d[last] = value

    return apply


def _delete(path: str) -> Callable[[dict], None]:
    def apply(d: dict) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        del d[last]

    return apply


RECIPE_CASES = [
    ("typo", _set("sandbox.worker", 4), "recipe.sandbox.worker", "did you mean 'workers'"),
    (
        "bad quantity",
        _set("ray.trainer.memory", "64GB"),
        "recipe.ray.trainer.memory",
        "not a Kubernetes quantity",
    ),
    (
        "replicas",
        _set("sandbox.replicas", {"min": 8, "max": 2}),
        "recipe.sandbox.replicas",
        "max (2) must be >= min (8)",
    ),
    ("name", _set("name", "GRPO_code"), "recipe.name", "DNS-1123"),
    (
        "nodes vs config",
        _set("ray.trainer.nodes", 3),
        "recipe.ray.trainer.nodes",
        "cluster.num_nodes is 4",
    ),
    (
        "no token",
        _delete("sandbox.token_secret"),
        "recipe.sandbox.token_secret",
        "refuses to listen",
    ),
    (
        "shm transport",
        _set("overrides", ["data_plane.weight_transport.type=shm"]),
        "recipe.config.data_plane.weight_transport.type",
        "separate pods",
    ),
    (
        "config section",
        _set("overrides", ["grpoo.x=1"]),
        "recipe.config.grpoo",
        "did you mean 'grpo'",
    ),
    (
        "bad override",
        _set("overrides", ["grpo.max_num_steps"]),
        "recipe.overrides[0]",
        "is not key.path=value",
    ),
    (
        "missing config",
        _set("config", "/nonexistent/config.yaml"),
        "recipe.config",
        "file not found",
    ),
    (
        "hpa metric",
        _set("sandbox.autoscale.metric", "memory"),
        "recipe.sandbox.autoscale.metric",
        "queue_depth",
    ),
    (
        "trainer ranks vs the trainer fleet",
        _set("overrides", ["cluster.trainer_ranks=4"]),
        "recipe.config.cluster.trainer_ranks",
        "set it to 16",
    ),
    (
        "strict spread trainer on fewer nodes than ranks",
        _set("overrides", ["cluster.placement.trainer=STRICT_SPREAD"]),
        "recipe.ray.trainer.nodes",
        "STRICT_SPREAD with cluster.trainer_ranks = 16",
    ),
    (
        "cpus_per_node",
        _set("overrides", ["cluster.cpus_per_node=128"]),
        "recipe.ray.trainer.cpu",
        "cluster.cpus_per_node",
    ),
]


@pytest.mark.parametrize(
    ("case", "mutate", "field", "text"), RECIPE_CASES, ids=[c[0] for c in RECIPE_CASES]
)
def test_broken_recipe_names_the_field(tmp_path, case, mutate, field, text) -> None:
    recipe = copy.deepcopy(RECIPE)
    mutate(recipe)
    with pytest.raises((SpecError, SpecErrors)) as info:
        render_files(*_write(tmp_path, recipe, INFRA))
    assert field in _fields(info.value), str(info.value)
    assert text in str(info.value)


def test_config_key_typo_is_caught_by_the_trainer_schema(tmp_path) -> None:
    pytest.importorskip("dockyard.core.config.loader")
    recipe = copy.deepcopy(RECIPE)
    recipe["overrides"] = ["grpo.num_prompt_per_step=3"]
    with pytest.raises((SpecError, SpecErrors)) as info:
        render_files(*_write(tmp_path, recipe, INFRA))
    assert "recipe.config.grpo.num_prompt_per_step" in _fields(info.value), str(info.value)


INFRA_CASES = [
    (
        "toleration",
        _set("pools.h100.tolerations", [{"key": "x", "operator": "Exists", "efect": "NoSchedule"}]),
        "infra.pools.h100.tolerations[0]",
        "'efect' was unexpected",
    ),
    (
        "toleration effect",
        _set("pools.h100.tolerations", [{"key": "x", "operator": "Exists", "effect": "NoSchedul"}]),
        "infra.pools.h100.tolerations[0].effect",
        "NoSchedule",
    ),
    (
        "affinity",
        _set("pools.cpu.affinity", {"nodeAfinity": {}}),
        "infra.pools.cpu.affinity",
        "'nodeAfinity' was unexpected",
    ),
    ("placement", _set("placement.trainer", "a100"), "infra", "not in pools"),
    ("images", _delete("images.sandbox"), "infra.images.sandbox", "Field required"),
    (
        "unmasked",
        _set("sandbox_security.proc_mount", "Unmasked"),
        "infra.sandbox_security",
        "host_users: false",
    ),
    (
        "seccomp",
        _set("sandbox_security.seccomp", "Unconfined"),
        "infra.sandbox_security.seccomp",
        "never runs Unconfined",
    ),
    (
        "rwo",
        _set("storage.checkpoint.access_mode", "ReadWriteOnce"),
        "infra.storage.checkpoint.access_mode",
        "ReadWriteMany",
    ),
    (
        "version",
        _set("kubernetes_version", "1.12"),
        "infra.kubernetes_version",
        "no schemas for Kubernetes 1.12",
    ),
    ("scraper", _set("metrics_scraper", {}), "infra.metrics_scraper", "would admit every pod"),
]


@pytest.mark.parametrize(
    ("case", "mutate", "field", "text"), INFRA_CASES, ids=[c[0] for c in INFRA_CASES]
)
def test_broken_infra_names_the_field(tmp_path, case, mutate, field, text) -> None:
    infra = copy.deepcopy(INFRA)
    mutate(infra)
    with pytest.raises((SpecError, SpecErrors)) as info:
        render_files(*_write(tmp_path, RECIPE, infra))
    assert field in _fields(info.value), str(info.value)
    assert text in str(info.value)


def test_cli_reports_the_field_and_exits_2(tmp_path, capsys) -> None:
    recipe = copy.deepcopy(RECIPE)
    recipe["sandbox"]["workerz"] = 3
    r, i = _write(tmp_path, recipe, INFRA)
    assert (
        cli_main(["render", "--recipe", str(r), "--infra", str(i), "-o", str(tmp_path / "out")])
        == 2
    )
    err = capsys.readouterr().err
    assert "error: recipe.sandbox.workerz: unknown key; did you mean 'workers'?" in err
    assert not (tmp_path / "out").exists()


def test_defaults_cycle_is_reported(tmp_path) -> None:
    (tmp_path / "a.yaml").write_text("defaults: b.yaml\n")
    (tmp_path / "b.yaml").write_text("defaults: a.yaml\n")
    recipe = copy.deepcopy(RECIPE) | {"config": str(tmp_path / "a.yaml")}
    with pytest.raises(SpecError, match="cycle in defaults"):
        render_files(*_write(tmp_path, recipe, INFRA))
