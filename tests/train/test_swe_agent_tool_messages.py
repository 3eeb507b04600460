"""Tool results go back in the role and format the chat template defines (issue 22): an
environment's role-``tool`` messages (``metadata["tool_messages"]``) are rendered by the
template — Hermes ``<tool_response>`` inside a user turn for a Qwen2-style template, its own
``tool`` turn for plain ChatML — and the token layout still round-trips."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from dockyard.core.interfaces.environment import Environment, StepResult
from dockyard.core.interfaces.generation import GenerationResult, SamplingParams
from dockyard.train.prompts import PromptRenderer
from dockyard.train.rollout import rollout_group

pytest.importorskip("transformers")

# Qwen2's way with tool results (written for this test): consecutive `tool` messages share one
# user turn, each wrapped in <tool_response> tags.
QWEN_STYLE = (
    "{%- for m in messages %}"
    "{%- if m['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n<tool_response>\\n' }}{{ m['content'] }}{{ '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{%- endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MESSAGES = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Fix it"}]
TOOLS = [
    {"role": "tool", "name": "bash", "content": "exit code: 0\nok"},
    {"role": "tool", "name": "search", "content": "a.py:3:x = 1"},
]


@pytest.fixture(scope="module")
def tok() -> Any:
    from transformers import AutoTokenizer

    from dockyard.torch.testing import build_tokenizer

    return AutoTokenizer.from_pretrained(str(build_tokenizer()))


def _roundtrip(r: PromptRenderer, reply: str) -> tuple[list[int], str]:
    tok = r.tokenizer
    obs_ids = r.observation_ids(MESSAGES, reply, "ignored", eos_seen=True, tool_messages=TOOLS)
    reply_ids = [*tok.encode(reply, add_special_tokens=False), tok.eos_token_id]
    full = r.text([*MESSAGES, {"role": "assistant", "content": reply}, *TOOLS])
    assert r.prompt_ids(MESSAGES) + reply_ids + obs_ids == tok.encode(
        full, add_special_tokens=False
    )
    return obs_ids, tok.decode(obs_ids)


def test_qwen_style_template_wraps_tool_results_in_tool_response(tok: Any) -> None:
    r = PromptRenderer(tok, chat_template=QWEN_STYLE)
    _, text = _roundtrip(r, '<tool_call>{"name": "bash"}</tool_call>')
    assert text.startswith(
        "\n<|im_start|>user\n<tool_response>\nexit code: 0\nok\n</tool_response>"
    )
    assert "</tool_response>\n<tool_response>\na.py:3:x = 1\n</tool_response><|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_chatml_template_gives_tool_results_their_own_role(tok: Any) -> None:
    r = PromptRenderer(tok)  # the test tokenizer's own ChatML template
    _, text = _roundtrip(r, "calling")
    assert "<|im_start|>tool\nexit code: 0\nok<|im_end|>" in text
    assert "<tool_response>" not in text  # not hand-written: the template decides


class _OneToolEnv(Environment):
    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return MESSAGES

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        raise NotImplementedError

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        state["turn"] += 1
        if state["turn"] == 1:
            return StepResult(
                done=False,
                observation="<tool_response>\nexit code: 0\nok\n</tool_response>",
                metadata={"tool_messages": TOOLS[:1]},
            )
        return StepResult(rewards={"reward/tests": 1.0})


class _Engine:
    def __init__(self, tok: Any) -> None:
        self.tok, self.prompts = tok, []

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams
    ) -> list[GenerationResult]:
        self.prompts.append(list(prompt_ids))
        ids = np.array([*self.tok.encode("call", add_special_tokens=False), self.tok.eos_token_id])
        lps = np.full(len(ids), -0.1, dtype=np.float32)
        return [GenerationResult(token_ids=ids, logprobs=lps, text="call", finish_reason="stop",
                                 policy_versions=np.zeros(len(ids), dtype=np.int32))]  # fmt: skip


def test_rollout_renders_the_environments_tool_messages(tok: Any) -> None:
    r = PromptRenderer(tok, chat_template=QWEN_STYLE)
    engine = _Engine(tok)
    params = SamplingParams(n=1, max_tokens=8)
    group = asyncio.run(
        rollout_group(engine, _OneToolEnv(), r, {"id": 0}, "u0", params, max_turns=3)
    )
    second_prompt = tok.decode(engine.prompts[1])
    assert second_prompt.endswith(
        "call<|im_end|>\n<|im_start|>user\n<tool_response>\nexit code: 0\nok\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    ), json.dumps(second_prompt)
    traj = group.trajectories[0]
    assert traj.rewards == {"reward/tests": 1.0}
    reply = len(tok.encode("call", add_special_tokens=False)) + 1  # with its EOS
    assert len(engine.prompts[1]) - len(engine.prompts[0]) > reply  # an observation came back
    assert int(traj.policy_mask.sum()) == 2 * reply  # only the two replies are the policy's
