"""Registries are open (issue 36 item 3): a package nobody in dockyard wrote registers an
advantage estimator, a generation engine, a weight transport, a trainer backend and a
policy-gradient loss through entry points, and `dockyard train` runs two GRPO steps with all five
— the estimator in the driver, the engine and the transport's receiver in the engine's Ray actor,
the backend's worker, the transport's sender and the loss in the trainer's rank. The same package
registers a preference loss (`config check` sends it to `dockyard dpo`) and a `dockyard`
sub-command.

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
"""A third party's dockyard plugins (light: the driver loads them; the worker is a module of
its own, imported in the trainer's rank only)."""
import os
import tempfile

import numpy as np

from dockyard.core.interfaces import TrainerBackend
from dockyard.core.rl import clipped_pg_loss
from dockyard.core.rl.preference import PREFERENCE_LOSSES
from dockyard.serve.engines.hf_engine import TransformersEngine
from dockyard.serve.transports import Transport
from dockyard.serve.transports.shm import ShmReceiver, ShmSender
from dockyard.torch.backend import worker_config as torch_config


def _mark(marker, what):
    with open(marker, "a") as f:
        f.write(f"{what} pid {os.getpid()}\\n")


def median_baseline(rewards, valid=None, *, marker):
    """A_i = r_i - median of the group's valid rewards."""
    r = np.asarray(rewards, dtype=np.float64)
    v = np.ones_like(r, bool) if valid is None else np.asarray(valid, bool)
    med = np.array([np.median(row[m]) if m.any() else 0.0 for row, m in zip(r, v)])
    with open(marker, "a") as f:
        f.write(f"advantages {r.shape}\\n")
    return ((r - med[:, None]) * v).astype(np.float32)


def marked_pg(logprobs, advantages, mask=None, *, marker, **kwargs):
    """The clipped policy gradient, saying where it ran (the trainer's rank)."""
    _mark(marker, "loss")
    return clipped_pg_loss(logprobs, advantages, mask, **kwargs)


marked_dpo = PREFERENCE_LOSSES.get("dpo")  # a preference loss of its own name


class MarkedSender(ShmSender):
    """shm with a marker: built in the trainer's rank."""

    def __init__(self, socket_path, *, marker, **kwargs):
        _mark(marker, "sender")
        super().__init__(socket_path, **kwargs)


class MarkedReceiver(ShmReceiver):
    """shm with a marker: opened in the engine's process."""

    def __init__(self, socket_path, *, marker, **kwargs):
        _mark(marker, "receiver")
        super().__init__(socket_path, **kwargs)


def marked_endpoints(t, sync, index, engine_host):
    """Its own rendezvous: a socket per engine (the marker comes from its options)."""
    path = os.path.join(tempfile.gettempdir(), f"marked-{sync.run_id}-{index}.sock")
    tx = {"socket_path": path, "timeout_s": t.timeout_s, "bucket_bytes": sync.bucket_bytes}
    return tx, {"socket_path": path, "timeout_s": t.timeout_s}


TRANSPORT = Transport(sender=MarkedSender, receiver=MarkedReceiver, endpoints=marked_endpoints)


def marked_config(policy, loss_fn, *, seed, max_steps, teachers=None, options=None):
    """The torch backend's config, and the marker its worker writes to."""
    own = torch_config(policy, loss_fn, seed=seed, max_steps=max_steps, teachers=teachers)
    return {**own, "marker": options["marker"]}


BACKEND = TrainerBackend(worker="example_plugins_worker:MarkedWorker", config=marked_config)


class MarkedEngine(TransformersEngine):
    """The transformers engine, saying that it was the one built (in its actor's process)."""

    def __init__(self, *, marker, seed, **kwargs):  # the context, dtype and seed: always given
        with open(marker, "a") as f:
            f.write(f"engine pid {os.getpid()} seed {seed}\\n")
        super().__init__(**kwargs)
'''

WORKER = '''
"""The third party's trainer worker: torch's, saying that it was the one built."""
import os

from dockyard.torch.worker import TorchPolicyWorker


class MarkedWorker(TorchPolicyWorker):
    def __init__(self, config, rank=None, world_size=None):
        config = dict(config)
        with open(config.pop("marker"), "a") as f:
            f.write(f"trainer pid {os.getpid()}\\n")
        super().__init__(config, rank, world_size)
'''

COMMAND = '''
"""A third party's `dockyard` sub-command."""


def add_arguments(parser):
    parser.add_argument("name")


def run(args):
    print(f"hello {args.name} from a plugin")
    return 0
'''

ENTRY_POINTS = """\
[dockyard.commands]
hello = example_plugins_cli

[dockyard.losses]
marked_pg = example_plugins:marked_pg

[dockyard.preference_losses]
marked_dpo = example_plugins:marked_dpo

[dockyard.advantages]
median_baseline = example_plugins:median_baseline

[dockyard.engines]
marked = example_plugins:MarkedEngine

[dockyard.transports]
marked_shm = example_plugins:TRANSPORT

[dockyard.trainers]
marked = example_plugins:BACKEND
"""

CONFIG = """\
policy:
  model_name: {model}
  max_total_sequence_length: 64
  train_global_batch_size: 8
  train_micro_batch_size: 8
  precision: float32
  trainer_backend: marked
  trainer_options: {{marker: {marker}}}
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
loss_fn: {{type: marked_pg, options: {{marker: {marker}}}}}
env:
  expression: {{type: expression, timeout_s: 10}}
data:
  dataset_name: expression
logger:
  log_dir: {logs}
checkpointing:
  enabled: false
data_plane:
  weight_transport: {{type: marked_shm, timeout_s: 120, options: {{marker: {marker}}}}}
"""


def _package(root: Path) -> Path:
    root.mkdir()
    (root / "example_plugins.py").write_text(textwrap.dedent(PLUGIN))
    (root / "example_plugins_worker.py").write_text(textwrap.dedent(WORKER))
    (root / "example_plugins_cli.py").write_text(textwrap.dedent(COMMAND))
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
    assert "loss_fn.type marked_pg runs with `dockyard train`" in check.stderr
    dpo = tmp_path / "dpo.yaml"
    dpo.write_text(f"policy: {{model_name: {model}}}\nloss_fn: {{type: marked_dpo, beta: 0.2}}\n")
    check_dpo = subprocess.run(
        [sys.executable, "-m", "dockyard.train.cli", "config", "check", str(dpo)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert check_dpo.returncode == 0, check_dpo.stderr
    assert "loss_fn.type marked_dpo runs with `dockyard dpo`" in check_dpo.stderr
    hello = subprocess.run([sys.executable, "-m", "dockyard.train.cli", "hello", "world"],
                           env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert hello.returncode == 0, hello.stderr
    assert hello.stdout == "hello world from a plugin\n"
    usage = subprocess.run([sys.executable, "-m", "dockyard.train.cli", "--help"],
                           env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert "(from example-plugins)" in usage.stdout
    # without the package the same config names what is missing, and where to register it
    bare = subprocess.run(
        [sys.executable, "-m", "dockyard.train.cli", "config", "check", str(config)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bare.returncode != 0
    assert "no engine 'marked'" in bare.stderr
    assert "unknown advantage estimator 'median_baseline'" in bare.stderr
    assert "no weight transport 'marked_shm'" in bare.stderr
    assert "no trainer backend 'marked'" in bare.stderr
    assert "unknown loss 'marked_pg'" in bare.stderr
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
    pids = {w: {int(x.split()[2]) for x in lines if x.startswith(f"{w} pid")}
            for w in ("trainer", "sender", "receiver")}  # fmt: skip
    assert len(pids["trainer"]) == 1, lines
    assert os.getpid() not in pids["trainer"], lines  # built in the trainer's rank
    assert pids["sender"] == pids["trainer"], lines  # the rank sends
    losses = {int(x.split()[2]) for x in lines if x.startswith("loss pid")}
    assert losses == pids["trainer"], lines  # the registered loss, in the rank
    assert pids["receiver"], lines
    assert pids["receiver"] <= engine_pids, lines  # the engine receives
    assert sum(x.startswith("advantages (2, 4)") for x in lines) >= 2, lines  # P x G, each step
    rows = [json.loads(x) for x in (logs / "metrics.jsonl").read_text().splitlines() if x]
    assert [r["step"] for r in rows if r["step"] >= 1] == [1, 2]
