"""Where `dockyard osworld warmstart` takes its demonstrations from (the desktop episodes and
the SFT run themselves: tests/integration/test_vlm_grpo.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dockyard.train.cli import osworld_warmstart


def test_demonstrations_come_from_the_demo_split_and_a_dataset_without_one_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    toy = osworld_warmstart.demo_tasks("osworld_toy", 3)
    train = osworld_warmstart.load_dataset("osworld_toy", "train")[:3]
    assert len(toy) == 3
    assert toy != train  # tasks of seeds of its own

    def plugin(name: str, split: str) -> list[dict[str, Any]]:  # a dataset knowing two splits
        if split not in ("train", "val"):
            raise ValueError(f"unknown split {split!r}")
        return [{"id": f"{split}-{i}"} for i in range(5)]

    monkeypatch.setattr(osworld_warmstart, "load_dataset", plugin)
    assert osworld_warmstart.demo_tasks("mine", 2) == [{"id": "train-0"}, {"id": "train-1"}]
    assert "mine has no demo split (unknown split 'demo')" in capsys.readouterr().out
