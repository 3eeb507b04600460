"""Grammar-constrained tool calls on the terminal environment: a tiny random policy served by
vLLM, real sandbox sessions. Unconstrained, its turns are invalid actions (no call, bad JSON);
decoded under the tools' structural tag (``policy.generation.tool_call_grammar``, its strings
bounded so that every call ends inside the token budget), every turn is a valid call of a known
tool with schema-valid arguments: the invalid-action count falls to 0. Each trajectory carries
the allowed-token set of every token the policy produced."""

from __future__ import annotations

import collections
from dataclasses import replace

import numpy as np
import pytest

from dockyard.core.config.policy import ToolCallGrammarConfig
from dockyard.core.interfaces import SamplingParams
from dockyard.envs.terminal import TerminalEnvironment, load_terminal_tasks

pytest.importorskip("vllm")
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

EPISODES, TURNS = 6, 3


def test_the_grammar_takes_invalid_actions_to_zero(sandbox_url, arun) -> None:
    from transformers import AutoTokenizer

    from dockyard.serve.engines.vllm_engine import VLLMEngine
    from dockyard.torch.testing import build_tiny_model
    from dockyard.train.grammar import tool_call_structural_tag
    from dockyard.train.rollout import rollout_group

    model = build_tiny_model(family="qwen2", max_position_embeddings=4096)  # a 1.1k-token prompt
    tok = AutoTokenizer.from_pretrained(str(model))
    env = TerminalEnvironment(sandbox_url, max_turns=TURNS, max_total_tokens=1 << 20)
    task = next(t for t in load_terminal_tasks() if t["id"] == "term/csv-total")
    free = SamplingParams(n=EPISODES, max_tokens=192, temperature=1.0, seed=5)
    # strings bounded in the grammar: a random policy's never close on their own, and a call
    # the token budget cuts is an invalid action of its own kind (truncated)
    grammar = ToolCallGrammarConfig(enabled=True, max_string_length=48)
    tag = tool_call_structural_tag(grammar, env.tool_specs())
    constrained = replace(free, structural_tag=tag)

    async def go():
        engine = VLLMEngine(str(model), dtype="float32", max_model_len=4096, enforce_eager=True)
        await engine.start()
        try:
            plain = await rollout_group(engine, env, tok, task, "free", free, TURNS)
            under = await rollout_group(engine, env, tok, task, "grammar", constrained, TURNS)
        finally:
            engine.shutdown()
        return plain, under

    plain, under = arun(env, go())
    assert not any(t.infra_error for t in plain.trajectories + under.trajectories)

    def kinds(group) -> collections.Counter:
        c: collections.Counter = collections.Counter()
        for t in group.trajectories:
            c.update(t.metadata["invalid_kinds"])
        return c

    free_kinds, grammar_kinds = kinds(plain), kinds(under)
    turns = sum(t.metadata["turns"] for t in under.trajectories)
    print(f"\nmetric invalid_actions free={dict(free_kinds)} grammar={dict(grammar_kinds)} "
          f"over {turns} constrained turns")  # fmt: skip
    assert sum(free_kinds.values()) >= EPISODES  # the random policy cannot call a tool
    assert sum(grammar_kinds.values()) == 0  # no bad JSON, unknown tool, schema error, no call
    assert turns >= EPISODES

    for t in under.trajectories:
        assert t.allowed is not None
        assert t.allowed.rows.shape == t.token_ids.shape
        policy = t.policy_mask
        assert (t.allowed.rows[policy] >= 0).all()  # every policy token was constrained
        assert (t.allowed.rows[~policy] == -1).all()  # prompts and observations were not
        assert t.allowed.allows(t.token_ids).all()
    assert all(t.allowed is None for t in plain.trajectories)
    assert np.isfinite(np.concatenate([t.gen_logprobs for t in under.trajectories])).all()
