"""The OpenAI-compatible rollout endpoint (dockyard.train.endpoint) with a scripted engine: the
recorded tokens, token-in-token-out prompts, the extension-property split, tool calls parsed
from Hermes output, and the HTTP surface (the real uvicorn server, the real ``openai`` client).

The engine here is a fake that replies with scripted text (its tokens: the tokenizer's encoding
+ EOS, logprob -0.25 each, policy version 7): the code around it is under test. The real engine,
scaffold and sandbox are in tests/integration/test_external_scaffold.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from dockyard.core.interfaces.environment import StepResult
from dockyard.core.interfaces.generation import GenerationResult, SamplingParams
from dockyard.train.endpoint.recorder import EpisodeRecord, Turn, assemble, segments
from dockyard.train.endpoint.server import Endpoint, EndpointServer, RequestError
from dockyard.train.endpoint.template import HERMES_TOOLS_TEMPLATE
from dockyard.train.prompts import PromptRenderer

pytest.importorskip("transformers")

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'


@pytest.fixture(scope="module")
def renderer() -> PromptRenderer:
    from transformers import AutoTokenizer

    from dockyard.torch.testing import build_tokenizer

    tok = AutoTokenizer.from_pretrained(str(build_tokenizer()))
    return PromptRenderer(tok, chat_template=HERMES_TOOLS_TEMPLATE)


class ScriptedEngine:
    """Replies with the next scripted text; records the prompts it was given."""

    def __init__(self, tok: Any, replies: list[str]) -> None:
        self.tok, self.replies, self.prompts = tok, list(replies), []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Any]:
        self.prompts.append(list(prompt_ids))
        text = self.replies.pop(0)
        ids = [*self.tok.encode(text, add_special_tokens=False), self.tok.eos_token_id]
        n = len(ids)
        return [
            GenerationResult(
                token_ids=np.asarray(ids), logprobs=np.full(n, -0.25, np.float32), text=text,
                finish_reason="stop", policy_versions=np.full(n, 7, np.int32),
            )
        ]  # fmt: skip


def _turn(prompt: list[int], completion: list[int]) -> Turn:
    n = len(completion)
    return Turn(prompt, completion, [-1.0] * n, [3] * n)


def test_turns_that_extend_each_other_make_one_sample_with_observations_masked() -> None:
    rec = EpisodeRecord("k", [_turn([1, 2], [3, 4]), _turn([1, 2, 3, 4, 9, 9], [5])])
    (traj,) = assemble("u", rec, StepResult(rewards={"reward/tests": 1.0}))
    assert traj.token_ids.tolist() == [1, 2, 3, 4, 9, 9, 5]
    assert traj.policy_mask.tolist() == [False, False, True, True, False, False, True]
    assert traj.gen_logprobs.tolist() == [0, 0, -1, -1, 0, 0, -1]
    assert traj.policy_versions.tolist() == [-1, -1, 3, 3, -1, -1, 3]
    assert traj.rewards == {"reward/tests": 1.0}
    assert traj.metadata["segments"] == 1


def test_a_broken_prefix_starts_a_new_sample_never_patches_the_tokens() -> None:
    # turn 2 re-renders turn 1's reply differently (4 -> 8): not an extension
    turns = [_turn([1, 2], [3, 4]), _turn([1, 2, 3, 8, 9], [5]), _turn([1, 2, 3, 8, 9, 5, 6], [7])]
    assert [len(s) for s in segments(turns)] == [1, 2]
    a, b = assemble("u", EpisodeRecord("k", turns), StepResult(rewards={"r": 0.5}))
    assert a.token_ids.tolist() == [1, 2, 3, 4]
    assert a.metadata["segments"] == 2
    assert b.token_ids.tolist() == [1, 2, 3, 8, 9, 5, 6, 7]
    assert b.policy_mask.tolist() == [False] * 5 + [True, False, True]
    assert a.rewards == b.rewards == {"r": 0.5}


def test_an_episode_without_requests_is_masked_not_scored() -> None:
    (t,) = assemble("u", EpisodeRecord("k"), StepResult(rewards={"r": 0.0}))
    assert t.infra_error
    assert len(t) == 0
    assert "no request" in t.metadata["error"]


def test_chat_turns_reuse_the_engines_tokens_and_return_tool_calls(renderer) -> None:
    tok = renderer.tokenizer
    eng = ScriptedEngine(tok, [f"Let me look.\n{CALL}", "done"])
    ep = Endpoint(eng, renderer, SamplingParams(max_tokens=64))
    key = ep.open()
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix the add function."},
    ]
    r1 = asyncio.run(ep.chat(key, {"messages": msgs, "tools": [BASH]}))
    choice = r1["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls"}
    assert choice["message"]["content"] == "Let me look."
    # the client sends its history back (with extra null fields, as litellm's model_dump does)
    back = {**choice["message"], "function_call": None, "provider_specific_fields": {}}
    tool = {"role": "tool", "tool_call_id": call["id"], "content": "a.py\nb.py"}
    msgs2 = [*msgs, back, tool]
    r2 = asyncio.run(ep.chat(key, {"messages": msgs2, "tools": [BASH]}))
    assert r2["choices"][0]["message"] == {"role": "assistant", "content": "done"}
    rec = ep.close(key)
    t1, t2 = rec.turns
    assert t2.tokens_reused
    assert t2.prompt_ids[: len(rec.turns[0].prompt_ids)] == t1.prompt_ids
    assert t2.prompt_ids[: len(t1.prompt_ids) + len(t1.completion_ids)] == [
        *t1.prompt_ids, *t1.completion_ids,
    ]  # fmt: skip
    # the tokens after the engine's reply are the tool result and the generation prompt
    obs = tok.decode(t2.prompt_ids[len(t1.prompt_ids) + len(t1.completion_ids) :])
    assert (
        obs
        == "\n<|im_start|>user\n<tool_response>\na.py\nb.py\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    (traj,) = assemble("u", rec, StepResult(rewards={"r": 1.0}))
    assert int(traj.policy_mask.sum()) == len(t1.completion_ids) + len(t2.completion_ids)
    assert set(traj.policy_versions[traj.policy_mask].tolist()) == {7}


def test_a_client_that_drops_the_reply_from_its_history_gets_a_new_sample(renderer) -> None:
    """mini-swe-agent on a format error: the reply is not kept, an error message follows."""
    eng = ScriptedEngine(renderer.tokenizer, ["no tool call here", "still none"])
    ep = Endpoint(eng, renderer, SamplingParams(max_tokens=64))
    key = ep.open()
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix it."}]
    r1 = asyncio.run(ep.chat(key, {"messages": msgs, "tools": [BASH]}))
    assert r1["choices"][0]["message"] == {"role": "assistant", "content": "no tool call here"}
    assert r1["choices"][0]["finish_reason"] == "stop"
    asyncio.run(ep.chat(key, {"messages": [*msgs, {"role": "user", "content": "Use a tool."}]}))
    rec = ep.close(key)
    assert not rec.turns[1].tokens_reused
    assert len(assemble("u", rec, StepResult())) == 2


def test_refusals(renderer) -> None:
    ep = Endpoint(ScriptedEngine(renderer.tokenizer, []), renderer, SamplingParams())
    key = ep.open()
    body = {"messages": [{"role": "user", "content": "x"}]}
    for bad, status in [({**body, "n": 2}, 400), ({**body, "stream": True}, 400), ({}, 400)]:
        with pytest.raises(RequestError) as e:
            asyncio.run(ep.chat(key, bad))
        assert e.value.status == status
    with pytest.raises(RequestError) as e:
        asyncio.run(ep.chat("nope", body))
    assert e.value.status == 404


def test_max_tokens_lowers_the_runs_budget_never_raises_it(renderer) -> None:
    ep = Endpoint(None, renderer, SamplingParams(max_tokens=50, temperature=1.0))
    assert ep._params({"max_tokens": 10}).max_tokens == 10
    assert ep._params({"max_completion_tokens": 500}).max_tokens == 50
    assert ep._params({"temperature": 0.0}).temperature == 1.0  # the trainer's temperature


def test_the_openai_client_over_http_per_episode_url_and_bearer_key(renderer) -> None:
    openai = pytest.importorskip("openai")
    tok = renderer.tokenizer

    async def main() -> tuple[Any, Any, EpisodeRecord, str]:
        eng = ScriptedEngine(tok, [CALL, "hello", "1 2 3"])
        srv = await EndpointServer(Endpoint(eng, renderer, SamplingParams(max_tokens=32))).start()
        try:
            key = srv.endpoint.open()
            client = openai.AsyncOpenAI(base_url=srv.base_url(key), api_key=key, max_retries=0)
            msgs = [{"role": "user", "content": "list files"}]
            r = await client.chat.completions.create(model="m", messages=msgs, tools=[BASH])  # type: ignore[arg-type]
            by_key = openai.AsyncOpenAI(base_url=f"{srv.url}/v1", api_key=key, max_retries=0)
            r2 = await by_key.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
            c = await by_key.completions.create(model="m", prompt="count:")
            wrong = openai.AsyncOpenAI(base_url=f"{srv.url}/v1", api_key="wrong", max_retries=0)
            with pytest.raises(openai.NotFoundError):
                await wrong.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
            for cl in (client, by_key, wrong):
                await cl.close()
            return r, r2, srv.endpoint.close(key), c.choices[0].text
        finally:
            await srv.stop()

    r, r2, rec, text = asyncio.run(main())
    assert r.choices[0].message.tool_calls[0].function.name == "bash"
    assert r2.choices[0].message.content == "hello"
    assert text == "1 2 3"
    assert len(rec.turns) == 3
    assert rec.turns[2].prompt_ids == tok.encode("count:", add_special_tokens=False)
