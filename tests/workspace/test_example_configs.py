"""The example configs hold from any working directory, and say so where they do not.

Each CPU example in examples/configs runs the quickstart's model, which `./dev quickstart`
writes to the repository's results/quickstart (grpo_osworld.yaml: the vision-language model
`dockyard osworld warmstart` writes to results/osworld; its deep check runs on a tiny one): their paths are written from ``${config_dir:}``,
so they name the same folders wherever `dockyard train` starts. Two configs are relative on
purpose, and say so in their header: base.yaml (a GPU base naming a Hub model; examples/k8s
inherit its output folders) and grpo_quickstart.yaml (shipped inside dockyard-train, where it
cannot name a folder of the user's; relative like the quickstart's own ``--output``).

After the quickstart, `dockyard config check --deep` passes on each. CI runs the quickstart after
the test suite, so there .ci/run checks that; here the test runs where results/quickstart exists.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dockyard.core.config import load_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "examples" / "configs"
RESULTS = REPO / "results"
QUICKSTART_MODEL = RESULTS / "quickstart" / "sft_model_seed0"
RELATIVE = {
    "base.yaml": "a GPU base: a Hub model, output folders relative to the run (examples/k8s)",
    "grpo_quickstart.yaml": "ships inside dockyard-train: relative like the quickstart's --output",
    "grpo_quickstart_agent.yaml": "ships inside dockyard-train: relative like `quickstart --agent`",
}
ANCHORED = sorted(p.name for p in CONFIGS.glob("*.yaml") if p.name not in RELATIVE)
# anchored configs whose model is not the quickstart's: the command that writes it
OTHER_MODELS = {
    "grpo_osworld.yaml": (RESULTS / "osworld" / "sft_model", "dockyard osworld warmstart"),
}
# every config key that names a file or folder on this machine
PATH_KEYS = (
    "policy.model_name",
    "policy.tokenizer.name",
    "data.train_path",
    "data.val_path",
    "data.prompt_file",
    "data.system_prompt_file",
    "logger.log_dir",
    "checkpointing.checkpoint_dir",
    "checkpointing.export_hf",
    "data_plane.weight_transport.shm_dir",
)


def _paths(cfg: Any) -> dict[str, str]:
    """The path-valued keys ``cfg`` sets (null ones left out)."""
    out = {}
    for key in PATH_KEYS:
        node: Any = cfg
        for part in key.split("."):
            node = getattr(node, part, None)
        if node is not None:
            out[key] = str(node)
    return out


def test_every_example_is_anchored_or_says_why_not() -> None:
    names = {p.name for p in CONFIGS.glob("*.yaml")}
    assert set(RELATIVE) <= names, f"stale entries: {set(RELATIVE) - names}"
    assert len(ANCHORED) >= 4, ANCHORED  # grpo_code, grpo_math, grpo_swe, grpo_terminal
    for name in RELATIVE:  # the header says what its paths are relative to
        assert "relative to the working" in (CONFIGS / name).read_text(), name


@pytest.mark.parametrize("name", ANCHORED)
def test_paths_hold_from_any_working_directory(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(CONFIGS / name)
    paths = _paths(cfg)
    for key, value in paths.items():
        assert Path(value).is_absolute(), f"{name}: {key}={value!r} is relative to the cwd"
    model, command = OTHER_MODELS.get(name, (QUICKSTART_MODEL, "./dev quickstart"))
    assert Path(paths["policy.model_name"]).resolve() == model, paths
    assert name not in OTHER_MODELS or command in (CONFIGS / name).read_text(), name
    for key in ("logger.log_dir", "checkpointing.checkpoint_dir"):
        assert Path(paths[key]).resolve().is_relative_to(RESULTS), f"{name}: {key} {paths[key]}"
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert _paths(load_config(CONFIGS / name)) == paths  # not a function of the cwd


def test_the_quickstart_recipe_points_where_the_quickstart_writes() -> None:
    """Both relative to the same working directory: `dockyard train` on the recipe, from the
    folder `dockyard quickstart` ran in, finds the model that the quickstart warm-started."""
    from dockyard.train.cli.quickstart import quickstart_yaml
    from dockyard.train.cli.quickstart_common import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = parser.parse_args([])
    out = Path(defaults.output)
    assert not out.is_absolute()
    paths = _paths(load_config(quickstart_yaml()))
    assert Path(paths["policy.model_name"]) == out / f"sft_model_seed{defaults.seed}"
    assert Path(paths["logger.log_dir"]).is_relative_to(out)
    assert Path(paths["checkpointing.checkpoint_dir"]).is_relative_to(out)


@pytest.mark.slow
@pytest.mark.skipif(
    not (QUICKSTART_MODEL / "config.json").is_file(),
    reason=f"no {QUICKSTART_MODEL.relative_to(REPO)}: run `./dev quickstart` first "
    "(CI checks this after its quickstart, in .ci/run)",
)
@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_deep_check_passes_after_the_quickstart(name: str, tmp_path: Path) -> None:
    cwd, overrides = tmp_path, []
    if name == "grpo_quickstart.yaml":
        cwd = REPO  # where `./dev quickstart` ran (the config says so)
    elif name in ("base.yaml", "grpo_quickstart_agent.yaml"):  # a Hub model / the agent's
        # warm start (`quickstart --agent`, not run by CI): the rest of it, on the local model
        overrides = [f"policy.model_name={QUICKSTART_MODEL}"]
    elif name in OTHER_MODELS:  # a vision-language model: the tiny one the warm start builds
        pytest.importorskip("torchvision", reason="./dev sync builds it for the CPU torch")
        from dockyard.serve.testing import tiny_vlm_dir

        overrides = [f"policy.model_name={tiny_vlm_dir(tmp_path / 'vlm')}"]
    cmd = [str(Path(sys.executable).parent / "dockyard"), "config", "check", "--deep"]
    out = subprocess.run(
        [*cmd, str(CONFIGS / name), *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-4000:]
