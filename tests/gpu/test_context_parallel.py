"""Context parallelism on CUDA: the gloo job of ``tests/torch/test_tensor_parallel.py``
(``tests/torch/_tp_job.py`` with ``context_parallel_size=2``) on two GPUs over ``nccl``; one
process on one GPU replays it unsplit. Needs 2 GPUs (skipped with fewer: two ranks on one
device is not what a user runs). Not run in any session so far (no GPU was lent)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

JOB = Path(__file__).parents[1] / "torch" / "_tp_job.py"
CONFIG = {
    "precision": "float32",
    "train_micro_batch_size": 2,
    "logprob_batch_size": 4,
    "reference_policy": False,
    "optimizer": {"lr": 1e-3, "weight_decay": 0.01},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cp2_on_two_gpus_equals_one(tmp_path, device, gpu_report) -> None:
    import torch

    from dockyard.core.rl import PolicyLoss
    from dockyard.torch.testing import build_tiny_model, random_batch
    from dockyard.torch.worker import TorchPolicyWorker

    if device != "cuda" or torch.cuda.device_count() < 2:
        pytest.skip("context parallelism over nccl needs 2 GPUs")
    model = str(build_tiny_model(family="qwen3", hidden_size=128, num_heads=4, num_kv_heads=2))
    config = {**CONFIG, "context_parallel_size": 2, "activation_checkpointing": True}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           f"--master_port={_free_port()}", str(JOB), str(tmp_path), model, json.dumps(config)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert (res["cp_size"], res["fsdp"]) == (2, True)
    worker = TorchPolicyWorker({**CONFIG, "model_name": model})
    b1 = random_batch(8, 24, seed=1)
    lp = worker.get_logprobs(b1)
    m1 = worker.train_step(b1, PolicyLoss(options={"eps_low": 0.2}))
    dlp = float(np.abs(lp - np.load(tmp_path / "lp0.npy")).max())
    gpu_report("context_parallel", {"max_abs_dlogprob": dlp, "loss_cp": res["m1"]["loss"],
                                    "loss_plain": m1["loss"]})  # fmt: skip
    assert dlp < 1e-4  # TF32-free float32 on both; the all-gathered keys sum in another order
    assert m1["loss"] == pytest.approx(res["m1"]["loss"], abs=1e-5)
    assert m1["grad_norm"] == pytest.approx(res["m1"]["grad_norm"], rel=1e-4)
