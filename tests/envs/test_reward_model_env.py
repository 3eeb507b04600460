"""The reward_model environment without a model: registered, light to import (no torch until it
scores), and refusing what is not a one-label sequence classifier before loading anything.
Scoring with a trained reward model: tests/train/test_rm.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dockyard.envs.registry import env_factory, get_env
from dockyard.envs.reward_model import RewardModelEnvironment, check_reward_model_folder


def folder(tmp_path: Path, **config: object) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_registered_without_a_sandbox() -> None:
    assert env_factory("reward_model") is RewardModelEnvironment
    assert not get_env("reward_model").needs_sandbox


def test_importing_it_imports_no_torch() -> None:
    code = "import sys, dockyard.envs.reward_model; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"architectures": ["Qwen2ForCausalLM"]}, "is not a sequence-classification model"),
        ({"architectures": ["Qwen2ForSequenceClassification"], "id2label": {"0": "a", "1": "b"}},
         "has 2 labels: a reward model has one"),
    ],
)  # fmt: skip
def test_a_folder_that_is_not_a_reward_model_is_refused(tmp_path, config, message) -> None:
    with pytest.raises(ValueError, match=message):
        RewardModelEnvironment(str(folder(tmp_path, **config)))
    with pytest.raises(ValueError, match="no Hugging Face model folder there"):
        check_reward_model_folder(tmp_path / "missing")


def test_options_and_tasks_are_checked(tmp_path) -> None:
    good = folder(tmp_path, architectures=["LlamaForSequenceClassification"], id2label={"0": "s"})
    env = RewardModelEnvironment(str(good))
    assert env.prompt({"prompt": "hi"}) == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="a reward_model task needs a 'prompt'"):
        env.prompt({"question": "hi"})
    with pytest.raises(ValueError, match="device 'tpu'"):
        RewardModelEnvironment(str(good), device="tpu")
