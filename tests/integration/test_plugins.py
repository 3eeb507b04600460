"""Registries are open (issue 36 item 3): a package nobody in dockyard wrote registers an
advantage estimator and a generation engine through entry points, and `dockyard train` runs two
GRPO steps with both — the engine in its own Ray actor process, the estimator in the driver.

The package is made here: a folder on ``PYTHONPATH`` holding its module and a ``.dist-info``
with the ``entry_points.txt`` an installer writes (what ``pip install`` of a package declaring
``[project.entry-points."dockyard.advantages"]`` leaves behind). Each plugin writes a marker
file when it runs, so the test sees that the run used them and not a built-in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PLUGIN = '''
"""A third party's dockyard plugins."""
import os

import numpy as np

from dockyard.serve.engines.hf_engine import TransformersEngine


def median_baseline(rewards, valid=None, *, marker):
    """A_i = r_i - median of the group's valid rewards."""
    r = np.asarray(rewards, dtype=np.float64)
    v = np.ones_like(r, bool) if valid is None else np.asarray(valid, bool)
    med = np.array([np.median(row[m]) if m.any() else 0.0 for row, m in zip(r, v)])
    with open(marker, "a") as f:
        f.write(f"advantages {r.shape}\\n")
    return ((r - med[:, None]) * v).astype(np.float32)


class MarkedEngine(TransformersEngine):
    """The transformers engine, saying that it was the one built (in its actor's process)."""

    def __init__(self, *, marker, seed, **kwargs):  # the context, dtype and seed: always given
        with open(marker, "a") as f:
            f.write(f"engine pid {os.getpid()} seed {seed}\\n")
        super().__init__(**kwargs)
'''

ENTRY_POINTS = """\
[dockyard.advantages]
median_baseline = example_plugins:median_baseline

[dockyard.engines]
marked = example_plugins:MarkedEngine
"""

CONFIG = """\
policy:
  model_name: {model}
  max_total_sequence_length: 64
  train_global_batch_size: 8
  train_micro_batch_size: 8
  precision: float32
  optimizer: {{name: adamw, lr: 1.0e-3, weight_decay: 0.0}}
  generation:
    backend: marked
    max_new_tokens: 16
    engine_options: {{marker: {marker}}}
grpo:
  num_prompts_per_step: 2
  num_generations_per_prompt: 4
  max_num_steps: 2
  max_val_samples: 1
  val_samples_per_prompt: 1
  adv_estimator: {{name: median_baseline, options: {{marker: {marker}}}}}
env:
  expression: {{type: expression, timeout_s: 10}}
data:
  dataset_name: expression
logger:
  log_dir: {logs}
checkpointing:
  enabled: false
data_plane:
  weight_transport: {{type: shm, timeout_s: 120}}
"""


def _package(root: Path) -> Path:
    root.mkdir()
    (root / "example_plugins.py").write_text(textwrap.dedent(PLUGIN))
    info = root / "example_plugins-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: example-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def test_a_third_party_estimator_and_engine_train_two_steps(tmp_path: Path) -> None:
    from dockyard.torch.testing import build_tiny_model

    plugins = _package(tmp_path / "plugins")
    model = build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1)
    marker, logs = tmp_path / "marker.txt", tmp_path / "logs"
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG.format(model=model, marker=marker, logs=logs))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins),
                                                         os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    check = subprocess.run(
        [sys.executable, "-m", "dockyard.train.cli", "config", "check", str(config)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    # without the package the same config names what is missing, and where to register it
    bare = subprocess.run(
        [sys.executable, "-m", "dockyard.train.cli", "config", "check", str(config)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bare.returncode != 0
    assert "no engine 'marked'" in bare.stderr
    assert "unknown advantage estimator 'median_baseline'" in bare.stderr
    run = subprocess.run(
        [sys.executable, "-m", "dockyard.train.cli", "train", "--config", str(config),
         "--no-progress"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    lines = marker.read_text().splitlines()
    engine_pids = {int(x.split()[2]) for x in lines if x.startswith("engine pid")}
    assert engine_pids, lines
    assert os.getpid() not in engine_pids  # built in the engine's actor, not here
    assert sum(x.startswith("advantages (2, 4)") for x in lines) >= 2, lines  # P x G, each step
    rows = [json.loads(x) for x in (logs / "metrics.jsonl").read_text().splitlines() if x]
    assert [r["step"] for r in rows if r["step"] >= 1] == [1, 2]
