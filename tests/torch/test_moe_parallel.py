"""Expert parallelism for Qwen3-MoE over 2 gloo ranks equals one rank.

One torchrun job (tests/torch/_moe_ep_job.py) trains 2 steps with ``moe.expert_parallel_size=2``
(each rank holds 4 of the 8 experts of every layer; tokens go to their experts by all-to-all;
the attention and router weights are FSDP2-sharded); a single process replays the steps with all
experts and must agree on the loss, the gradient norm, the router metrics, the aux-loss-free
bias, the weights and the logprobs. The checkpoint the two ranks saved resumes on one.
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

JOB = Path(__file__).with_name("_moe_ep_job.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ep_run(tmp_path_factory, moe_config):
    out = tmp_path_factory.mktemp("moe-ep")
    config = {k: v for k, v in moe_config.items() if k != "model_name"}
    config["moe"] = {"expert_parallel_size": 2}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
        f"--master_port={_free_port()}", str(JOB), str(out), moe_config["model_name"],
        json.dumps(config),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out, json.loads((out / "results.json").read_text())


def _weights(worker) -> dict[str, np.ndarray]:
    return {k: v for b in worker.export_weights(1 << 30) for k, v in b.items()}


def test_expert_parallel_two_ranks_equal_one_rank(ep_run, moe_config):
    from dockyard.torch.worker import TorchPolicyWorker

    out, results = ep_run
    assert results["local_experts"] == 4  # the experts really were split
    worker = TorchPolicyWorker(moe_config)
    loss = PolicyLoss(options={"eps_low": 0.2})
    w0 = _weights(worker)
    for step in ("m1", "m2"):
        seed = 1 if step == "m1" else 2
        m = worker.train_step(random_batch(8, 24, seed=seed), loss)
        theirs = results[step]
        assert m["loss"] == pytest.approx(theirs["loss"], abs=1e-6)
        assert m["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-5)
        loads = {k: v for k, v in m.items() if k.startswith("moe/")}
        assert loads == pytest.approx({k: theirs[k] for k in loads}, abs=1e-9)
    w2 = dict(np.load(out / "weights.npz"))
    assert set(w2) == set(w0)  # per-expert names, gathered from both ranks
    assert "model.layers.0.mlp.experts.7.down_proj.weight" in w2
    mine = _weights(worker)
    assert max(np.abs(mine[k] - w0[k]).max() for k in w0) > 1e-4  # training moved them
    for name, value in w2.items():
        np.testing.assert_allclose(mine[name], value, rtol=0, atol=1e-5, err_msg=name)
    lp = worker.get_logprobs(random_batch(8, 24, seed=1))
    np.testing.assert_allclose(lp, np.load(out / "lp.npy"), atol=1e-5)


def test_expert_parallel_checkpoint_resumes_on_one_rank(ep_run, moe_config):
    from dockyard.torch.worker import TorchPolicyWorker

    out, results = ep_run
    worker = TorchPolicyWorker(moe_config)
    worker.load_checkpoint(str(out / "ckpt"))
    bias = [layer.mlp.expert_bias for layer in worker.model.model.layers]
    absmean = float(sum(b.abs().sum() for b in bias) / sum(b.numel() for b in bias))
    assert absmean > 0  # the router bias came back with the weights
    assert absmean == pytest.approx(results["m1"]["moe/expert_bias_absmean"], abs=1e-9)
    m2 = worker.train_step(random_batch(8, 24, seed=2), PolicyLoss(options={"eps_low": 0.2}))
    assert m2["loss"] == pytest.approx(results["m2"]["loss"], abs=1e-6)
    assert m2["grad_norm"] == pytest.approx(results["m2"]["grad_norm"], rel=1e-5)


def test_expert_parallel_size_must_fit_the_mesh(moe_config):
    from dockyard.torch.worker import TorchPolicyWorker

    with pytest.raises(ValueError, match="expert_parallel_size=2: it must equal the data-paral"):
        TorchPolicyWorker({**moe_config, "moe": {"expert_parallel_size": 2}})
