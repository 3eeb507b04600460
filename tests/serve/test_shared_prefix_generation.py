"""Shared-prefix generation: a group's prompt is encoded once, and the engines say how many
prompt tokens each sample reused (``GenerationResult.cached_prompt_tokens``, which the
collector turns into ``collector/prefix_cache_hit_rate``).

* transformers engine: a request of n samples runs one prefill row for its prompt (observed on
  the model's forward), then n cache copies;
* vLLM (marked ``vllm``): prefix caching is on, and a prompt seen before comes from the cache.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from dockyard.core.interfaces import SamplingParams

pytest.importorskip("transformers")

PROMPT = list(range(5, 5 + 40))
LONG = [5 + i % 200 for i in range(300)]  # vLLM-CPU caches whole 128-token blocks: 2 of 300


def test_transformers_engine_prefills_a_group_once(tiny_model: Path) -> None:
    from dockyard.serve.engines.hf_engine import TransformersEngine

    async def main():
        eng = await TransformersEngine(str(tiny_model)).start()
        shapes: list[tuple[int, int]] = []
        eng.model.register_forward_pre_hook(
            lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True
        )
        params = SamplingParams(n=4, max_tokens=3, temperature=1.0, seed=0)
        res = await eng.generate(PROMPT, params)
        eng.shutdown()
        return shapes, res

    shapes, res = asyncio.run(asyncio.wait_for(main(), 300))
    assert shapes[0] == (1, len(PROMPT))  # the prefill: one row for the group's 4 samples
    assert all(s == (4, 1) for s in shapes[1:])  # then decode steps of the 4 samples
    assert [r.cached_prompt_tokens for r in res] == [0, *[len(PROMPT)] * 3]


@pytest.mark.vllm
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")  # vLLM's zmq context, collected below
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_vllm_prefix_cache_hits_are_reported(tiny_model: Path) -> None:
    pytest.importorskip("vllm")
    from dockyard.serve.engines.vllm_engine import VLLMEngine

    loop = asyncio.new_event_loop()  # vLLM's client lives on one loop (as tests/serve do)
    eng = VLLMEngine(str(tiny_model), dtype="float32", max_model_len=512, enforce_eager=True)
    try:
        loop.run_until_complete(eng.start())
        params = SamplingParams(n=1, max_tokens=2, temperature=1.0, seed=0)
        first = loop.run_until_complete(asyncio.wait_for(eng.generate(LONG, params), 600))
        params = SamplingParams(n=3, max_tokens=2, temperature=1.0, seed=1)
        again = loop.run_until_complete(asyncio.wait_for(eng.generate(LONG, params), 600))
    finally:
        loop.run_until_complete(eng.aclose())
        loop.close()
        gc.collect()  # vLLM's client objects die here, under this test's warning filters
    assert first[0].cached_prompt_tokens == 0  # a cold cache
    # the second time the prompt's full blocks come from the cache
    assert [r.cached_prompt_tokens for r in again] == [256] * 3
