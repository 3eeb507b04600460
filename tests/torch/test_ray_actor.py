"""TorchPolicyWorker as a real Ray actor (1 CPU) equals the in-process worker.

Ray runs in a subprocess (tests/torch/_ray_job.py) that starts its own local cluster and shuts
it down, so no Ray state outlives the test or leaks into the pytest process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dockyard.core.rl import PolicyLoss
from dockyard.torch.testing import random_batch

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("_ray_job.py")
CONFIG = {
    "precision": "float32",
    "train_micro_batch_size": 2,
    "logprob_batch_size": 4,
    "reference_policy": True,
    "optimizer": {"lr": 1e-3, "weight_decay": 0.01},
    "scheduler": {"name": "constant", "warmup_steps": 0},
}


def test_worker_in_a_ray_actor_matches_in_process(tmp_path, qwen2_path):
    pytest.importorskip("ray")
    from safetensors.numpy import load_file

    from dockyard.torch.worker import TorchPolicyWorker

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a fresh local cluster
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, str(JOB), str(tmp_path), str(qwen2_path), json.dumps(CONFIG)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["actor_pid"] != res["driver_pid"]  # it ran in the actor's process
    assert res["step"] == 1
    assert res["ref_equals_lp0"]  # the frozen reference equals the policy before training

    worker = TorchPolicyWorker({**CONFIG, "model_name": str(qwen2_path)})
    batch = random_batch(8, 24, seed=1)
    np.testing.assert_allclose(worker.get_logprobs(batch), np.load(tmp_path / "lp0.npy"), atol=1e-5)
    m = worker.train_step(batch, PolicyLoss(options={"eps_low": 0.2}))
    assert res["metrics"]["loss"] == pytest.approx(m["loss"], abs=1e-6)
    assert res["metrics"]["grad_norm"] == pytest.approx(m["grad_norm"], rel=1e-5)
    lp1 = np.load(tmp_path / "lp1.npy")
    np.testing.assert_allclose(worker.get_logprobs(batch), lp1, atol=1e-4)
    assert np.abs(lp1 - np.load(tmp_path / "lp0.npy")).max() > 1e-3  # the step changed the policy
    exported = load_file(str(tmp_path / "hf" / "model.safetensors"))
    mine = {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}
    assert set(exported) == set(mine)
    for name, value in mine.items():
        np.testing.assert_allclose(exported[name], value, rtol=0, atol=1e-5, err_msg=name)
