"""The config's environment and dataset names meet the registry of dockyard-envs before anything
starts: ``dockyard config check`` and ``dockyard train`` refuse unknown ones, listing the known."""

from __future__ import annotations

from pathlib import Path

import pytest

from dockyard.core.config import config_from_dict
from dockyard.train.cli import main
from dockyard.train.environments import build_environment, check_names, needs_sandbox

ROOT = Path(__file__).resolve().parents[2]
MATH = ROOT / "examples" / "configs" / "grpo_math.yaml"


def test_config_check_rejects_an_unknown_environment_type(capsys) -> None:
    assert main(["config", "check", str(MATH)]) == 0
    capsys.readouterr()
    assert main(["config", "check", str(MATH), "env.math.type=chess"]) == 2
    err = capsys.readouterr().err
    assert "env.math.type: unknown environment 'chess'; known: code, expression, " in err


def test_config_check_rejects_an_unknown_entry_name_without_a_type(capsys) -> None:
    assert main(["config", "check", str(MATH), "~env.math", "env.chess.timeout_s=5"]) == 2
    err = capsys.readouterr().err
    assert "env.chess.type: unknown environment 'chess' (type is null" in err


def test_config_check_rejects_an_unknown_dataset(capsys) -> None:
    assert main(["config", "check", str(MATH), "data.dataset_name=gsm9k"]) == 2
    err = capsys.readouterr().err
    assert "data.dataset_name: unknown dataset 'gsm9k'; known: arithmetic, " in err
    assert "data.train_path" in err


def test_a_jsonl_file_needs_no_dataset_name(tmp_path, capsys) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "1+1", "answer": "2"}\n')
    args = ["config", "check", str(MATH), "data.dataset_name=null", f"data.train_path={tasks}"]
    assert main(args) == 0
    assert "is valid" in capsys.readouterr().err


def test_train_refuses_unknown_names_before_starting_anything(monkeypatch, capsys) -> None:
    import dockyard.train.algorithms.grpo as grpo

    monkeypatch.setattr(grpo, "train", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", str(MATH), "env.math.type=chess"])
    assert exit_.value.code == 2
    assert "env.math.type: unknown environment 'chess'" in capsys.readouterr().err


def test_check_and_build_from_the_registry() -> None:
    cfg = config_from_dict(
        {"env": {"m": {"type": "math", "options": {"verify_timeout_s": 2}}, "code": {}}}
    )
    check_names(cfg.env, cfg.data.dataset_name)
    assert not needs_sandbox("m", cfg.env["m"])
    assert needs_sandbox("code", cfg.env["code"])
    assert build_environment("m", cfg.env["m"]).name == "math"
    with pytest.raises(ValueError, match=r"env\.code needs a sandbox"):
        build_environment("code", cfg.env["code"])
