"""The external-scaffold rollout mode (dockyard.train.endpoint.rollout) through the collector,
with fakes around it: a scripted engine, a fake session environment, and a scaffold that is a
real OpenAI client (``openai``, in the scaffold's thread) running a two-step tool loop. What is
checked: one trajectory per episode with the recorded tokens, the reward from ``finish``, the
scaffold's exit in the metadata, a sandbox failure masked, a crashed scaffold still scored, and
``env.<name>.scaffold`` validation. The real engine, mini-swe-agent and sandbox:
tests/integration/test_external_scaffold.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dockyard.core.interfaces.generation import GenerationResult, SamplingParams
from dockyard.sandbox.models import TaskResult
from dockyard.train.data import TaskLoader
from dockyard.train.endpoint.config import ScaffoldConfig, build_scaffold
from dockyard.train.endpoint.rollout import ExternalScaffold
from dockyard.train.runtime.collector import Collector

pytest.importorskip("transformers")
openai = pytest.importorskip("openai")

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'


@pytest.fixture(scope="module")
def renderer() -> Any:
    from transformers import AutoTokenizer

    from dockyard.torch.testing import build_tokenizer
    from dockyard.train.endpoint.template import HERMES_TOOLS_TEMPLATE
    from dockyard.train.prompts import PromptRenderer

    tok = AutoTokenizer.from_pretrained(str(build_tokenizer()))
    return PromptRenderer(tok, chat_template=HERMES_TOOLS_TEMPLATE)


class ScriptedEngine:
    """Calls the tool first, then says "done" once it sees a tool response (its tokens: the
    encoding + EOS; logprob -0.25). Episodes run concurrently: the reply depends on the prompt."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Any]:
        text = "done" if "<tool_response>" in self.tok.decode(prompt_ids) else CALL
        ids = [*self.tok.encode(text, add_special_tokens=False), self.tok.eos_token_id]
        n = len(ids)
        return [GenerationResult(token_ids=np.asarray(ids), logprobs=np.full(n, -0.25, np.float32),
                                 text=text, finish_reason="stop", policy_versions=np.zeros(n, np.int32))]  # fmt: skip


class FakeSessionEnv:
    """A session environment: ``reset`` opens a session, ``finish_result`` is the verdict."""

    def __init__(self, resolved: bool, fail_reset: bool = False) -> None:
        self.resolved, self.fail_reset, self.closed = resolved, fail_reset, 0
        self.pool = SimpleNamespace(token=None)
        self.reward = SimpleNamespace(mode="binary")

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": task["instruction"]}]

    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        if self.fail_reset:
            return {"task": task, "session_id": None, "infra_error": "create_session: down"}
        return {"task": task, "session_id": "s1", "infra_error": None}

    def _client_for(self, state: dict[str, Any]) -> Any:
        return SimpleNamespace(url="http://sandbox.invalid")

    async def finish_result(self, state: dict[str, Any]) -> TaskResult:
        verdict = "passed" if self.resolved else "failed"
        return TaskResult(verdict=verdict, resolved=self.resolved)  # type: ignore[arg-type]

    async def close(self, state: dict[str, Any]) -> None:
        self.closed += 1


class ToolLoop:
    """A scaffold: asks the model, 'runs' its tool calls, sends the results back, twice."""

    def __init__(self, crash: bool = False) -> None:
        self.crash, self.contexts = crash, []

    def run(self, ctx: Any) -> dict[str, Any]:
        self.contexts.append(ctx)
        if self.crash:
            raise RuntimeError("scaffold bug")
        client = openai.OpenAI(base_url=ctx.base_url, api_key=ctx.api_key, max_retries=0)
        msgs: list[Any] = [{"role": "user", "content": ctx.instruction}]
        for _ in range(2):
            r = client.chat.completions.create(model=ctx.model, messages=msgs, tools=[BASH])
            m = r.choices[0].message
            msgs.append(m.model_dump(exclude_none=True))
            for c in m.tool_calls or []:
                msgs.append({"role": "tool", "tool_call_id": c.id, "content": "ok"})
        client.close()
        return {"exit_status": "Submitted"}


def _collect(env: Any, runner: Any, renderer: Any, n: int = 2) -> Any:
    eng = ScriptedEngine(renderer.tokenizer)
    buffer = SimpleNamespace(groups=[])
    buffer.put = buffer.groups.append  # type: ignore[attr-defined]
    task = {"id": "t", "instruction": "fix it"}

    async def main() -> Any:
        col = Collector([eng], env, renderer, TaskLoader([task], 0, False, 1), buffer,
                        SamplingParams(n=n, max_tokens=32), scaffold=ExternalScaffold(runner))  # fmt: skip
        await col.start()
        col.order(1, 0)
        for _ in range(500):
            if buffer.groups or col.errors:
                break
            await asyncio.sleep(0.02)
        await col.stop()
        assert not col.errors, col.errors
        return buffer.groups[0]

    return asyncio.run(main())


def test_each_episode_is_one_scored_trajectory_of_the_engines_tokens(renderer) -> None:
    runner = ToolLoop()
    group = _collect(FakeSessionEnv(resolved=True), runner, renderer)
    assert len(group.trajectories) == 2
    assert len({c.api_key for c in runner.contexts}) == 2  # a key (base URL) per episode
    for t in group.trajectories:
        assert not t.infra_error
        assert t.rewards == {"reward/tests": 1.0}
        assert t.metadata["scaffold"] == {"exit_status": "Submitted"}
        assert t.metadata["turns"] == 2
        assert t.metadata["segments"] == 1
        assert t.metadata["tokens_reused"] == 1
        done = renderer.tokenizer.encode("done", add_special_tokens=False)
        call = renderer.tokenizer.encode(CALL, add_special_tokens=False)
        eos = renderer.tokenizer.eos_token_id
        assert t.token_ids[t.policy_mask].tolist() == [*call, eos, *done, eos]


def test_a_failed_sandbox_or_a_scaffold_that_never_asked_masks_the_episode(
    renderer,
) -> None:
    env = FakeSessionEnv(resolved=True, fail_reset=True)
    (t,) = _collect(env, ToolLoop(), renderer, n=1).trajectories
    assert t.infra_error
    assert env.closed == 1
    (t,) = _collect(
        FakeSessionEnv(resolved=False), ToolLoop(crash=True), renderer, n=1
    ).trajectories
    # the scaffold made no request: nothing to train on, masked (and its error kept)
    assert t.infra_error
    assert t.metadata["scaffold"]["exit_status"] == "RuntimeError"


def test_scaffold_config_is_checked_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="expected one of"):
        ScaffoldConfig.model_validate({"type": "nope"})
    with pytest.raises(ValueError, match="extra"):
        ScaffoldConfig.model_validate({"type": "mini_swe_agent", "max_turn": 3})
    with pytest.raises(ValueError, match="MiniSweAgentRunner"):
        build_scaffold({"options": {"cfg": "mini"}})
    with pytest.raises(ValueError, match="no sandbox sessions"):
        build_scaffold({}, env=SimpleNamespace())
    assert build_scaffold(None) is None
    assert build_scaffold({"max_turns": 5}, FakeSessionEnv(True)).max_turns == 5  # type: ignore[union-attr]
