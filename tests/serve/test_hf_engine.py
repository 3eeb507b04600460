"""The transformers fallback engine: the same contract as the vLLM engine, without vLLM."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.core.interfaces import SamplingParams

pytest.importorskip("transformers")

PROMPT = [5, 17, 42, 99, 7]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 300))


def http_update(
    engine, weights: dict[str, np.ndarray], version: int
) -> tuple[Any, threading.Thread, list[BaseException]]:
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


async def _engine(path: Path, version: int = 0, **kw):
    from dockyard.serve.engines.hf_engine import TransformersEngine

    return await TransformersEngine(str(path), initial_version=version, **kw).start()


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


# Requests of different lengths and settings, batched together (left-padded) or run alone.
PROMPTS = [PROMPT, [3, 8], list(range(20, 43)), [300, 12, 77, 9, 150, 4, 61, 2, 88]]
PARAMS = [
    SamplingParams(n=1, max_tokens=12, temperature=0.0),
    SamplingParams(n=3, max_tokens=12, temperature=1.0, seed=5),
    SamplingParams(n=2, max_tokens=7, temperature=0.7, top_p=0.8, seed=9),
    SamplingParams(n=2, max_tokens=12, temperature=1.3, top_k=20, seed=11),
]


def _tokens(groups) -> list[list[list[int]]]:
    return [[r.token_ids.tolist() for r in g] for g in groups]


def test_batched_equals_alone(tiny_model: Path, torch_lp) -> None:
    """Greedy and seeded samples do not depend on what they are batched with: concurrent
    requests (joining at once or mid-generation) give the tokens each gives alone, with the
    logprobs of an unpadded forward; joining at once is one forward per token."""
    calls: list[int] = []

    async def main():
        eng = await _engine(tiny_model)
        alone = [await eng.generate(p, sp) for p, sp in zip(PROMPTS, PARAMS, strict=True)]
        eng.model.register_forward_hook(lambda *_: calls.append(1))
        together = await asyncio.gather(*map(eng.generate, PROMPTS, PARAMS))
        forwards = len(calls)
        first = [asyncio.create_task(eng.generate(PROMPTS[i], PARAMS[i])) for i in (0, 1)]
        start = eng.tokens_generated
        while eng.tokens_generated - start < 12:  # a few steps in
            await asyncio.sleep(0.001)
        rest = await asyncio.gather(*map(eng.generate, PROMPTS[2:], PARAMS[2:]))
        return alone, together, forwards, [await t for t in first] + rest

    alone, together, forwards, staggered = run(main())
    assert _tokens(together) == _tokens(alone)
    assert _tokens(staggered) == _tokens(alone)
    assert forwards == max(sp.max_tokens for sp in PARAMS)  # one prefill, then decodes
    for prompt, sp, group, ref in zip(PROMPTS, PARAMS, together, alone, strict=True):
        for r, a in zip(group, ref, strict=True):
            assert r.finish_reason == a.finish_reason
            np.testing.assert_allclose(r.logprobs, a.logprobs, atol=1e-5)
            t = sp.temperature or 1.0
            ref_lp = torch_lp(tiny_model, prompt, r.token_ids.tolist(), temperature=t)
            np.testing.assert_allclose(r.logprobs, ref_lp, atol=1e-4)
    assert len({tuple(r.token_ids.tolist()) for r in together[1]}) == 3  # seed + i per sample


@pytest.mark.parametrize("mode", ["keep", "abort"])
def test_inflight_update_with_concurrent_requests(
    mode: str, tiny_model: Path, tmp_path: Path
) -> None:
    """Several requests in one batch, paused mid-generation, new weights, resumed: every sample
    switches version once, between two tokens. Greedy: before the switch the tokens are the
    old policy's; after an abort, the new policy's continuation of prompt + tokens so far."""
    from dockyard.serve.testing import perturbed_weights, write_weights

    w1 = perturbed_weights(tiny_model, scale=0.08, seed=21)
    d1 = write_weights(tmp_path / "v1", tiny_model, w1)
    greedy = SamplingParams(n=2, max_tokens=24, temperature=0.0)
    sampled = SamplingParams(n=3, max_tokens=24, temperature=1.0, seed=4)
    reqs = [(PROMPTS[0], greedy), (PROMPTS[2], sampled), (PROMPTS[3], greedy)]

    async def main():
        eng = await _engine(tiny_model)
        old = [(await eng.generate(p, sp))[0].token_ids.tolist() for p, sp in reqs]
        start = eng.tokens_generated
        tasks = [asyncio.create_task(eng.generate(p, sp)) for p, sp in reqs]
        while eng.tokens_generated - start < 7 * 5:  # 7 tokens into each of the 7 samples
            await asyncio.sleep(0.001)
        await eng.pause(mode)
        rx, t, errs = http_update(eng, w1, 1)
        await eng.update_weights(rx, 1)
        t.join(30)
        rx.close()
        assert not errs, errs
        await eng.resume()
        res = [await x for x in tasks]
        fresh = await _engine(d1, version=1)
        cont = {}
        for (p, sp), group in zip(reqs, res, strict=True):
            for r in group if sp is greedy else []:
                k = int(np.argmax(r.policy_versions == 1))
                want = await fresh.generate(p + r.token_ids[:k].tolist(), greedy)
                cont[id(r)] = want[0].token_ids.tolist()[: len(r.token_ids) - k]
        return old, res, cont

    old, res, cont = run(main())
    for (_, sp), group, before in zip(reqs, res, old, strict=True):
        for r in group:
            v = r.policy_versions
            assert len(r.token_ids) == 24 or r.finish_reason == "stop"
            assert v[0] == 0
            assert v[-1] == 1
            assert np.all(np.diff(v) >= 0)
            k = int(np.argmax(v == 1))
            if sp is greedy:
                assert r.token_ids[:k].tolist() == before[:k]
            if sp is greedy and mode == "abort":
                assert r.token_ids[k:].tolist() == cont[id(r)]


def test_cancelled_request_leaves_the_batch(tiny_model: Path) -> None:
    """A cancelled request drops out; the others finish as if alone."""
    sp = PARAMS[1]

    async def main():
        eng = await _engine(tiny_model)
        alone = await eng.generate(PROMPTS[2], sp)
        doomed = asyncio.create_task(eng.generate(PROMPTS[0], PARAMS[0]))
        kept = asyncio.create_task(eng.generate(PROMPTS[2], sp))
        while eng.tokens_generated < len(sp_tokens(alone)) + 8:
            await asyncio.sleep(0.001)
        doomed.cancel()
        got = await kept
        return alone, got, eng._rows, eng._requests

    def sp_tokens(group):
        return [t for r in group for t in r.token_ids]

    alone, got, rows, pending = run(main())
    assert _tokens([got]) == _tokens([alone])
    assert not rows
    assert not pending


def test_context_length(tiny_model: Path) -> None:
    """Samples stop at max_model_len ("length"); a prompt that fills it is refused."""

    async def main():
        eng = await _engine(tiny_model, max_model_len=len(PROMPT) + 4)
        (r,) = await eng.generate(PROMPT, SamplingParams(n=1, max_tokens=50, temperature=0.0))
        with pytest.raises(ValueError, match="max_model_len"):
            await eng.generate([*PROMPT, 1, 2, 3, 4], SamplingParams(n=1, max_tokens=5))
        empty = await eng.generate(PROMPT, SamplingParams(n=2, max_tokens=0))
        return r, empty

    r, empty = run(main())
    assert len(r.token_ids) == 4 or r.finish_reason == "stop"
    assert [len(e.token_ids) for e in empty] == [0, 0]


def test_constrained_requests_are_refused(tiny_model: Path) -> None:
    """A regex or a structural tag (grammar-constrained tool calls) names the vLLM engine: the
    transformers engine does not constrain, and must not sample as if it had."""

    async def main():
        eng = await _engine(tiny_model)
        for field in ("regex", "structural_tag"):
            with pytest.raises(ValueError, match=f"{field}.*vLLM"):
                await eng.generate(PROMPT, SamplingParams(n=1, max_tokens=4, **{field: "x"}))

    run(main())
