"""The transformers fallback engine: the same contract as the vLLM engine, without vLLM."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from dockyard.core.interfaces import SamplingParams

pytest.importorskip("transformers")

PROMPT = [5, 17, 42, 99, 7]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 300))


def http_update(engine, weights: dict[str, np.ndarray], version: int) -> None:
    """Trainer thread -> HTTP (chunked, checksummed) -> engine."""
    from dockyard.serve.transports.http import HttpReceiver, HttpSender

    rx = HttpReceiver("127.0.0.1", 0, timeout_s=30)
    rx.open()
    errs: list[BaseException] = []

    def trainer() -> None:
        try:
            sender = HttpSender(rx.url, timeout_s=30, bucket_bytes=50_000, checksum=True)
            sender.send([weights], version)
            sender.close()
        except BaseException as e:
            errs.append(e)

    t = threading.Thread(target=trainer)
    t.start()
    return rx, t, errs


async def _engine(path: Path, version: int = 0):
    from dockyard.serve.engines.hf_engine import TransformersEngine

    return await TransformersEngine(str(path), initial_version=version).start()


def test_sampling_and_logprobs(tiny_model: Path, torch_lp) -> None:
    async def main():
        eng = await _engine(tiny_model)
        res = await eng.generate(
            PROMPT, SamplingParams(n=3, max_tokens=12, temperature=1.0, seed=1)
        )
        again = await eng.generate(
            PROMPT, SamplingParams(n=3, max_tokens=12, temperature=1.0, seed=1)
        )
        return res, again

    res, again = run(main())
    assert [r.token_ids.tolist() for r in res] == [r.token_ids.tolist() for r in again]
    assert len({tuple(r.token_ids.tolist()) for r in res}) > 1  # different seeds per sample
    for r in res:
        assert r.logprobs.shape == r.token_ids.shape == r.policy_versions.shape
        assert np.all(r.policy_versions == 0)
        ref = torch_lp(tiny_model, PROMPT, r.token_ids.tolist())
        np.testing.assert_allclose(r.logprobs, ref, atol=1e-4)


@pytest.mark.parametrize("mode", ["keep", "abort"])
def test_inflight_update_then_greedy_equals_fresh_engine(
    mode: str, tiny_model: Path, tmp_path: Path
) -> None:
    """Pause mid-generation, load new weights over HTTP, resume: tokens switch version once;
    afterwards greedy outputs equal those of a fresh engine started from the new weights."""
    from dockyard.serve.testing import perturbed_weights, write_weights

    w1 = perturbed_weights(tiny_model, scale=0.08, seed=21)
    d1 = write_weights(tmp_path / "v1", tiny_model, w1)
    greedy = SamplingParams(n=1, max_tokens=16, temperature=0.0)

    async def main():
        eng = await _engine(tiny_model)
        before = (await eng.generate(PROMPT, greedy))[0].token_ids.tolist()
        start = eng.tokens_generated
        task = asyncio.create_task(
            eng.generate(PROMPT, SamplingParams(n=2, max_tokens=40, temperature=1.0, seed=3))
        )
        while eng.tokens_generated - start < 10:
            await asyncio.sleep(0.001)
        await eng.pause(mode)
        rx, t, errs = http_update(eng, w1, 1)
        await eng.update_weights(rx, 1)
        t.join(30)
        rx.close()
        assert not errs, errs
        await eng.resume()
        res = await task
        after = (await eng.generate(PROMPT, greedy))[0]
        fresh = await _engine(d1, version=1)
        want = (await fresh.generate(PROMPT, greedy))[0].token_ids.tolist()
        return before, res, after, want

    before, res, after, want = run(main())
    for r in res:
        v = r.policy_versions
        assert len(r.token_ids) == 40 or r.finish_reason == "stop"
        assert v[0] == 0
        assert v[-1] == 1
        assert np.all(np.diff(v) >= 0)
    assert after.token_ids.tolist() == want
    assert np.all(after.policy_versions == 1)
    assert before != want  # the update changed the policy
