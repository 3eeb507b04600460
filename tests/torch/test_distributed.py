"""Real 2-process FSDP2 on gloo: same update as one process; checkpoints reshard 2 → 1.

One torchrun job (tests/torch/_dist_job.py) trains 2 steps on 2 ranks, checkpointing after the
first; the tests below replay it on a single process and compare.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dockyard.core.rl import PolicyLoss
from dockyard.torch.testing import random_batch

pytestmark = pytest.mark.slow

JOB = Path(__file__).with_name("_dist_job.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory, base_config):
    out = tmp_path_factory.mktemp("fsdp2")
    config = {k: v for k, v in base_config.items() if k != "model_name"}
    config["reference_policy"] = False  # not needed here; saves loading a second copy
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={_free_port()}",
        str(JOB),
        str(out),
        base_config["model_name"],
        json.dumps(config),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out, json.loads((out / "results.json").read_text())


def _assert_weights_close(worker, expected: dict[str, np.ndarray], atol=1e-5):
    """atol: 1% of one Adam step (lr 1e-3); elements whose gradient is near Adam's ε may
    differ by more than float32 rounding between two summation orders."""
    got = {}
    for bucket in worker.export_weights(bucket_bytes=1 << 30):
        got.update(bucket)
    assert set(got) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=0, atol=atol, err_msg=name)


def test_two_ranks_equal_one_rank(two_rank_run, base_config):
    from dockyard.torch.worker import TorchPolicyWorker

    out, results = two_rank_run
    assert results["world_size"] == 2
    # a different micro-batch size on one rank: the update must not depend on it either
    worker = TorchPolicyWorker({**base_config, "train_micro_batch_size": 3})
    assert not worker.fsdp
    loss = PolicyLoss(options={"eps_low": 0.2})
    w0 = {k: v.copy() for b in worker.export_weights(1 << 30) for k, v in b.items()}
    m1 = worker.train_step(random_batch(8, 24, seed=1), loss)
    assert m1["loss"] == pytest.approx(results["m1"]["loss"], abs=1e-6)
    assert m1["grad_norm"] == pytest.approx(results["m1"]["grad_norm"], rel=1e-5)
    w1 = dict(np.load(out / "w1.npz"))
    assert max(np.abs(w1[k] - w0[k]).max() for k in w0) > 1e-4  # the step moved the weights
    _assert_weights_close(worker, w1)
    m2 = worker.train_step(random_batch(8, 24, seed=2), loss)
    assert m2["loss"] == pytest.approx(results["m2"]["loss"], abs=1e-6)
    _assert_weights_close(worker, dict(np.load(out / "w2.npz")))
    lp = worker.get_logprobs(random_batch(8, 24, seed=1))
    np.testing.assert_allclose(lp, np.load(out / "lp.npy"), atol=1e-5)


def test_checkpoint_saved_by_two_ranks_resumes_on_one(two_rank_run, base_config):
    from dockyard.torch.worker import TorchPolicyWorker

    out, results = two_rank_run
    worker = TorchPolicyWorker(base_config)
    extra = worker.load_checkpoint(str(out / "ckpt"))
    assert extra == {"note": "after step 1"}
    assert worker.step == 1
    _assert_weights_close(worker, dict(np.load(out / "w1.npz")), atol=0)
    # optimizer moments and the warm-up schedule came back too: step 2 matches the 2-rank run
    m2 = worker.train_step(random_batch(8, 24, seed=2), PolicyLoss(options={"eps_low": 0.2}))
    assert m2["lr"] == pytest.approx(results["m2"]["lr"])
    _assert_weights_close(worker, dict(np.load(out / "w2.npz")))


def test_bucketed_export_and_hf_folder_from_two_ranks(two_rank_run):
    from transformers import AutoModelForCausalLM

    out, results = two_rank_run
    sizes = results["bucket_sizes"]
    assert len(sizes) > 3
    # buckets respect the limit unless a single tensor is larger than it
    assert all(
        s <= 64 * 1024 or c == 1 for s, c in zip(sizes, results["bucket_counts"], strict=True)
    )
    w2 = dict(np.load(out / "w2.npz"))
    model = AutoModelForCausalLM.from_pretrained(out / "hf")
    state = model.state_dict()
    for name, value in w2.items():
        np.testing.assert_array_equal(state[name].numpy(), value, err_msg=name)
