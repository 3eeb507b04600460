"""The terminal environment: oracle agents solve every shipped task through real sessions."""

from __future__ import annotations

import json

import pytest

from dockyard.envs.rewards import INVALID_ACTION, TESTS, RewardConfig
from dockyard.envs.terminal import TerminalEnvironment, load_terminal_tasks


def _call(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


async def _episode(env, task, turns):
    state = await env.reset(task)
    results = []
    try:
        for turn in turns:
            r = await env.step(state, turn)
            results.append(r)
            if r.done:
                break
    finally:
        await env.close(state)
    return results


@pytest.mark.parametrize("task", load_terminal_tasks(), ids=lambda t: t["id"])
def test_oracle_solves_and_lazy_agent_fails(sandbox_url, task, arun):
    env = TerminalEnvironment(sandbox_url)

    async def go():
        return await _episode(env, task, task["oracle"]), await _episode(
            env, task, [_call("submit")]
        )

    oracle, lazy = arun(env, go())
    final = oracle[-1]
    assert final.done
    assert not final.infra_error
    assert final.rewards == {TESTS: 1.0, INVALID_ACTION: 0.0}, final.metadata
    assert final.metadata["end_reason"] == "submit"
    assert final.metadata["turns"] == len(task["oracle"])
    assert all(not r.done and r.observation.startswith("<tool_response>") for r in oracle[:-1])
    assert lazy[-1].rewards[TESTS] == 0.0
    assert lazy[-1].done


def test_invalid_actions_are_penalised_counted_and_never_raise(sandbox_url, arun):
    env = TerminalEnvironment(
        sandbox_url, reward=RewardConfig(invalid_action_penalty=0.25), max_turns=6
    )
    task = next(t for t in load_terminal_tasks() if t["id"] == "term/csv-total")
    turns = [
        "I will just think about it.",  # no tool call
        "<tool_call>{not json</tool_call>",  # malformed
        _call("rm_rf", path="/"),  # unknown tool
        _call("run", cmd="ls"),  # schema violation
        _call("read_file", path="missing.txt"),  # a legitimate error, not an invalid action
        *task["oracle"],
    ]

    async def go():
        return await _episode(env, task, turns)

    res = arun(env, go())
    assert [r.done for r in res] == [False] * 5 + [True]  # max_turns=6 ends it
    final = res[-1]
    assert final.metadata["end_reason"] == "max_turns"
    assert final.metadata["invalid_actions"] == 4
    assert final.metadata["invalid_kinds"] == {
        "no_call": 1,
        "json": 1,
        "unknown_tool": 1,
        "schema": 1,
    }
    assert final.rewards[INVALID_ACTION] == pytest.approx(-1.0)
    assert "unknown tool 'rm_rf'" in res[2].observation
    assert "command" in res[3].observation
    assert "cannot read 'missing.txt'" in res[4].observation
    assert res[0].metadata["tool_messages"][0]["role"] == "tool"


def test_editing_held_out_files_does_not_help(sandbox_url, arun):
    env = TerminalEnvironment(sandbox_url)
    task = next(t for t in load_terminal_tasks() if t["id"] == "term/fix-config")
    cheat = _call("write_file", path="app.py", content="print('listening on 8080')\n") + _call(
        "submit"
    )

    async def go():
        return await _episode(env, task, [cheat])

    (final,) = arun(env, go())
    assert final.rewards[TESTS] == 0.0  # app.py is held out: restored before the tests run


def test_token_budget_ends_the_episode(sandbox_url, arun):
    env = TerminalEnvironment(
        sandbox_url, max_total_tokens=50, count_tokens=lambda s: len(s.split())
    )
    task = load_terminal_tasks()[0]

    async def go():
        return await _episode(env, task, [_call("run", command="echo " + "x " * 60)] * 3)

    res = arun(env, go())
    assert len(res) == 1
    assert res[0].done
    assert res[0].metadata["end_reason"] == "token_budget"


def test_finish_scores_an_episode_the_rollout_cut(sandbox_url, arun):
    """The rollout's turn limit (``grpo.max_rollout_turns``) comes before ``submit``: ``finish``
    runs the held-out tests on what the policy did (the oracle's work passes), never a 0."""
    env = TerminalEnvironment(sandbox_url)
    task = next(t for t in load_terminal_tasks() if t["id"] == "term/csv-total")
    work = [turn for turn in task["oracle"] if '"submit"' not in turn]
    assert work
    assert len(work) < len(task["oracle"])

    async def go():
        state = await env.reset(task)
        try:
            for turn in work:
                assert not (await env.step(state, turn)).done
            return await env.finish(state, work[-1])
        finally:
            await env.close(state)

    final = arun(env, go())
    assert final.done
    assert not final.infra_error
    assert final.rewards == {TESTS: 1.0, INVALID_ACTION: 0.0}, final.metadata
    assert final.metadata["end_reason"] == "rollout_turns"
