"""The vLLM engine on CUDA (when vLLM is installed): a tiny model generates in bf16 with logprobs
close to a torch fp32 forward, and a weight update through shared memory switches the policy.

The CPU version, with in-flight updates and aborts, is tests/serve/test_vllm_engine.py; this
one checks the CUDA build of the same engine: bf16 kernels, device memory, the worker
extension loading buckets into a model on the GPU.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.core.interfaces import SamplingParams

pytest.importorskip("vllm")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.vllm,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

PROMPTS = [[5, 17, 42, 99, 7], [300, 301, 302], [11, 12, 13, 14, 15, 16, 17, 18]]
BF16_LOGPROB_TOL = 0.3  # max |vLLM bf16 − torch fp32| per token on this peaked tiny model


def torch_logprobs(
    folder: Path, prompt: list[int], tokens: list[int], allowed: Any = None
) -> np.ndarray:
    """``[len(tokens)] float32`` log softmax of ``tokens`` after ``prompt``, torch fp32 on CUDA;
    over each token's allowed set where ``allowed`` (the engine's AllowedTokens) says."""
    import torch
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = model.cuda().eval()
    seq = torch.as_tensor([prompt + tokens], device="cuda")
    idx = torch.arange(len(prompt) - 1, seq.shape[1] - 1, device="cuda")
    with torch.no_grad():
        logits = model(seq).logits[0].float()[idx]
    if allowed is not None:
        bits = np.unpackbits(allowed.table.view(np.uint8), axis=1, bitorder="little")
        keep = torch.as_tensor(bits[allowed.rows, : logits.shape[-1]], device="cuda").bool()
        logits = logits.masked_fill(~keep, float("-inf"))
    lp = torch.log_softmax(logits, -1)
    return lp[torch.arange(len(tokens), device="cuda"), seq[0, len(prompt) :]].cpu().numpy()


def worst_mismatch(results_by_prompt, folder: Path) -> float:
    return max(
        float(np.max(np.abs(torch_logprobs(folder, p, r.token_ids.tolist()) - r.logprobs)))
        for p, r in results_by_prompt
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory, device):
    """(event loop, started engine, model folder v0)."""
    if device != "cuda":
        pytest.skip("vLLM on CPU is tests/serve/test_vllm_engine.py")
    import torch

    from dockyard.serve.engines.vllm_engine import VLLMEngine
    from dockyard.serve.testing import tiny_model_dir

    folder = tiny_model_dir(
        tmp_path_factory.mktemp("vllm") / "v0",
        hidden_size=128,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=256,
    )
    torch.cuda.empty_cache()  # the earlier tests' cached blocks: vLLM sizes its KV cache on free memory
    loop = asyncio.new_event_loop()
    engine = VLLMEngine(
        str(folder),
        dtype="bfloat16",
        max_model_len=512,
        enforce_eager=True,
        seed=0,
        gpu_memory_utilization=0.15,
    )
    loop.run_until_complete(asyncio.wait_for(engine.start(), 600))
    yield loop, engine, folder
    loop.run_until_complete(engine.aclose())
    loop.close()


def generate_all(loop, engine, seed: int):
    params = SamplingParams(n=1, max_tokens=24, temperature=1.0, seed=seed)
    return [(p, loop.run_until_complete(engine.generate(p, params))[0]) for p in PROMPTS]


def test_generation_on_gpu_matches_torch(served, gpu_report) -> None:
    loop, engine, folder = served
    results = generate_all(loop, engine, seed=3)
    for _, r in results:
        assert 0 < len(r.token_ids) <= 24
        assert r.logprobs.shape == r.token_ids.shape
        assert np.all(r.logprobs <= 0)
        assert np.all(r.policy_versions == 0)
    worst = worst_mismatch(results, folder)
    gpu_report("vllm_generation", {"max_abs_dlogp_v0": worst})
    assert worst < BF16_LOGPROB_TOL


def test_weight_update_switches_the_policy(served, tmp_path, gpu_report) -> None:
    """Perturbed weights sent through the shm transport become version 1: new samples carry
    version 1 and their logprobs match the new weights, not the old."""
    from dockyard.serve.testing import perturbed_weights, shm_push, write_weights

    loop, engine, folder = served
    weights = perturbed_weights(folder, scale=0.08, seed=1)
    v1 = write_weights(tmp_path / "v1", folder, weights)
    with shm_push(str(tmp_path / "w1.sock"), [weights], 1) as rx:
        loop.run_until_complete(asyncio.wait_for(engine.update_weights(rx, 1), 300))
    assert engine.policy_version == 1
    results = generate_all(loop, engine, seed=5)
    assert all(np.all(r.policy_versions == 1) for _, r in results)
    new, old = worst_mismatch(results, v1), worst_mismatch(results, folder)
    gpu_report(
        "vllm_update",
        {
            "max_abs_dlogp_v1": new,
            "max_abs_dlogp_vs_stale_v0": old,
            "buckets": engine.last_update.get("buckets"),
        },
    )
    assert new < BF16_LOGPROB_TOL
    assert old > 2 * BF16_LOGPROB_TOL


def test_tool_call_grammar_on_gpu(served, gpu_report) -> None:
    """Grammar-constrained tool calls on CUDA (xgrammar's GPU bitmask kernel): the engine's
    allowed sets hold every sampled token and torch's logprobs over them match the engine's
    (the unconstrained ones do not). CPU version: tests/serve/test_vllm_engine.py."""
    import xgrammar as xgr

    loop, engine, folder = served
    tools = [{"type": "function", "function": {"name": "run", "parameters": {
        "type": "object", "properties": {"command": {"type": "string", "maxLength": 24}},
        "required": ["command"]}}}]  # fmt: skip
    tag = xgr.get_model_structural_tag(
        "qwen_3", tools=tools, tool_choice="required", reasoning="disabled",
        parallel_tool_calls=False,
    ).model_dump_json()  # fmt: skip
    params = SamplingParams(n=4, max_tokens=96, temperature=1.0, seed=9, structural_tag=tag)
    results = loop.run_until_complete(engine.generate(PROMPTS[0], params))
    worst = gap = 0.0
    for r in results:
        assert r.allowed is not None
        assert r.allowed.allows(r.token_ids).all()
        tokens = r.token_ids.tolist()
        masked = torch_logprobs(folder, PROMPTS[0], tokens, r.allowed)
        worst = max(worst, float(np.max(np.abs(masked - r.logprobs))))
        gap = max(
            gap, float(np.max(np.abs(torch_logprobs(folder, PROMPTS[0], tokens) - r.logprobs)))
        )
    gpu_report("vllm_tool_call_grammar", {"max_abs_dlogp": worst, "max_abs_dlogp_unmasked": gap})
    assert worst < BF16_LOGPROB_TOL
    assert gap > BF16_LOGPROB_TOL
