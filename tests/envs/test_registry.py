"""The one registry of environments and datasets: the table of dockyard-envs, packages that add
theirs through entry points (a fake distribution on ``sys.path`` here), clashes, unknown names."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dockyard.envs import registry
from dockyard.envs.registry import (
    DatasetSpec,
    EnvSpec,
    RegistryClashError,
    UnknownNameError,
    dataset_names,
    env_names,
    get_dataset,
    get_env,
    load_dataset,
    make_env,
)

SANDBOXED = {
    "code",
    "swe",
    "swe_agent",
    "terminal",
    "osworld",
    "expression",
    "expression_agent",
    "gdpval",
    "gdpval_agentic",
    "harbor",
    "programbench",
    "programbench_single",
}


def fake_distribution(
    root: Path,
    dist: str,
    environments: dict[str, str],
    datasets: dict[str, str] | None = None,
    modules: dict[str, str] | None = None,
) -> Path:
    """An installed-looking distribution in ``root`` (a ``*.dist-info`` with entry points, and
    the modules it names); put ``root`` on ``sys.path`` to install it."""
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = [f"[{registry.ENV_GROUP}]", *(f"{k} = {v}" for k, v in environments.items())]
    lines += [f"[{registry.DATASET_GROUP}]", *(f"{k} = {v}" for k, v in (datasets or {}).items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for name, source in (modules or {}).items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    return root


def test_the_table_of_dockyard_envs() -> None:
    assert {"code", "expression", "math", "mcq", "swe", "terminal"} <= set(env_names())
    assert {"arithmetic", "expression", "humaneval", "swe", "terminal"} <= set(dataset_names())
    for name, spec in registry.ENVIRONMENTS.items():
        assert spec.needs_sandbox == (name in SANDBOXED), name
        assert spec.description, name
        assert callable(registry.env_factory(name)), name
    for name, spec in registry.DATASETS.items():
        assert callable(registry._load(spec.target)), name
    assert len(load_dataset("arithmetic", "train", n=5)) == 5
    assert load_dataset("arithmetic", "val", n=3) != load_dataset("arithmetic", "train", n=3)
    assert load_dataset("terminal", "train") == load_dataset("terminal", "val")
    assert make_env("math", verify_timeout_s=2).name == "math"


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="unknown environment 'chess'; known: code, ") as e:
        get_env("chess")
    assert isinstance(e.value, KeyError)
    assert str(e.value).startswith("unknown environment")  # not KeyError's quoted repr
    with pytest.raises(KeyError, match="unknown dataset 'gsm9k'; known: arithmetic, "):
        get_dataset("gsm9k")
    with pytest.raises(ValueError, match="'module:attr'"):
        EnvSpec("no_colon")


def test_naming_an_environment_imports_no_other() -> None:
    code = (
        "import sys\n"
        "from dockyard.envs.registry import get_env, make_env, needs_sandbox\n"
        "assert needs_sandbox('code') and not needs_sandbox('math')\n"
        "make_env('math', verify_timeout_s=2)\n"
        "print(sorted(m for m in sys.modules if m.startswith('dockyard.envs.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = out.stdout
    assert "dockyard.envs.math.env" in loaded
    for other in ("code", "swe", "terminal", "expression"):
        assert f"dockyard.envs.{other}" not in loaded, other


def test_a_package_adds_an_environment_and_a_dataset_by_entry_point(tmp_path, monkeypatch):
    fake_distribution(
        tmp_path,
        "fake-envs",
        {"echo_ep": "fake_envs_spec:ENV"},
        {"echo_ep": "fake_envs_spec:DATA"},
        modules={
            "fake_envs_spec": """
                from dockyard.envs.registry import DatasetSpec, EnvSpec
                ENV = EnvSpec("fake_envs_impl:Echo", needs_sandbox=False, description="echo")
                DATA = DatasetSpec("fake_envs_impl:tasks", "three tasks")
            """,
            "fake_envs_impl": """
                class Echo:
                    name = "echo_ep"
                    def __init__(self, word="hi"):
                        self.word = word

                def tasks(split, n=3):
                    return [{"id": f"{split}-{i}"} for i in range(n)]
            """,
        },
    )
    assert "echo_ep" not in env_names()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "echo_ep" in env_names()
    assert "echo_ep" in dataset_names()
    spec = get_env("echo_ep")
    assert spec == EnvSpec("fake_envs_impl:Echo", needs_sandbox=False, description="echo")
    assert "fake_envs_impl" not in sys.modules  # the spec is read; the environment is not built
    assert not registry.needs_sandbox("echo_ep")
    assert make_env("echo_ep", word="yo").word == "yo"
    assert isinstance(get_dataset("echo_ep"), DatasetSpec)
    assert load_dataset("echo_ep", "val", n=2) == [{"id": "val-0"}, {"id": "val-1"}]
    monkeypatch.delitem(sys.modules, "fake_envs_spec")
    monkeypatch.delitem(sys.modules, "fake_envs_impl")


def test_a_name_clash_is_an_error_naming_both(tmp_path, monkeypatch) -> None:
    fake_distribution(tmp_path / "a", "greedy-envs", {"math": "greedy:ENV"})
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    with pytest.raises(RegistryClashError) as e:
        env_names()
    message = str(e.value)
    assert "environment 'math' is registered twice" in message
    assert "dockyard-envs (dockyard.envs.math.env:MathEnvironment)" in message
    assert "greedy-envs 0.1 (entry point dockyard.environments:math = greedy:ENV)" in message


def test_two_packages_with_one_dataset_name_clash(tmp_path, monkeypatch) -> None:
    for dist in ("one-envs", "two-envs"):
        fake_distribution(tmp_path / dist, dist, {}, {"shared": f"{dist[:3]}:DATA"})
        monkeypatch.syspath_prepend(str(tmp_path / dist))
    with pytest.raises(RegistryClashError, match="dataset 'shared' is registered twice") as e:
        get_dataset("arithmetic")
    assert "one-envs 0.1" in str(e.value)
    assert "two-envs 0.1" in str(e.value)


def test_an_entry_point_must_load_to_a_spec(tmp_path, monkeypatch) -> None:
    fake_distribution(
        tmp_path,
        "sloppy-envs",
        {"sloppy": "sloppy_spec:Env"},
        modules={"sloppy_spec": "class Env:\n    pass\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match=r"sloppy-envs 0.1 .* loads to type, not a .*EnvSpec"):
        get_env("sloppy")
    monkeypatch.delitem(sys.modules, "sloppy_spec")
