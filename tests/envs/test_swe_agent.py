"""The repository agent environment (``swe_agent``) against the real sandbox service: scripted
agents fix shipped tasks with the editor, lazy ones fail, budgets end episodes with the diff so
far scored, invalid actions are penalised, and a non-pytest test command is judged by
SWE-bench's log parser."""

from __future__ import annotations

import base64
import json
import re

import pytest

from dockyard.envs.registry import make_env
from dockyard.envs.rewards import INVALID_ACTION, TESTS, RewardConfig
from dockyard.envs.swe import load_shipped_tasks, materialize
from dockyard.envs.swe.agent import SweAgentEnvironment
from dockyard.envs.swe.sdist import tarball


def _call(tool, **args):
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': args})}</tool_call>"


def _fix(task):
    """(file, old_str, new_str): a unique replacement that undoes the task's bug (from its gold
    patch: the removed line, with the line before it when the removed line alone repeats)."""
    inst = materialize(task)
    lines = inst.patch.splitlines()
    minus = next(i for i, ln in enumerate(lines) if ln.startswith("-") and not ln.startswith("---"))
    old, new = lines[minus][1:], lines[minus + 1][1:]
    text = inst.files[inst.source_file].decode()
    if text.count(old) != 1:
        before = lines[minus - 1][1:]
        old, new = before + "\n" + old, before + "\n" + new
    assert text.count(old) == 1
    return inst.source_file, old, new


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


@pytest.fixture(scope="module")
def tasks():
    shipped = load_shipped_tasks()
    # one task of each shipped library
    return [
        next(t for t in shipped if t["repo"] == repo) for repo in ("pypi/inflection", "pypi/parse")
    ]


def test_registry_builds_the_agent_environment(sandbox_url):
    env = make_env("swe_agent", sandbox_urls=sandbox_url)
    assert isinstance(env, SweAgentEnvironment)
    assert env.tools.names == ["bash", "str_replace_editor", "search", "find_file", "submit"]


def test_editor_oracle_resolves_and_lazy_agent_does_not(sandbox_url, tasks, arun):
    env = SweAgentEnvironment(sandbox_url)

    async def go():
        out = []
        for task in tasks:
            path, old, new = _fix(task)
            f2p = task["FAIL_TO_PASS"][0]
            word = max(re.findall(r"[A-Za-z_]\w+", old), key=len)
            turns = [
                _call("find_file", name=path.rsplit("/", 1)[-1]),
                _call("search", pattern=word, include="*.py"),
                _call("str_replace_editor", command="view", path=path, view_range=[1, 5]),
                _call(
                    "str_replace_editor", command="str_replace", path=path, old_str=old, new_str=new
                ),
                _call("bash", command=f"python -m pytest -q -p no:cacheprovider '{f2p}'"),
                _call("submit"),
            ]
            oracle = await _episode(env, task, turns)
            lazy = await _episode(env, task, [_call("submit")])
            out.append((task, turns, oracle, lazy))
        return out

    for task, turns, oracle, lazy in arun(env, go()):
        path = _fix(task)[0]
        final = oracle[-1]
        assert final.done
        assert not final.infra_error, final.metadata
        assert final.rewards[TESTS] == 1.0, final.metadata
        assert final.rewards[INVALID_ACTION] == 0.0
        assert final.metadata["end_reason"] == "submit"
        assert final.metadata["instance_id"] == task["instance_id"]
        assert final.metadata["turns"] == len(turns)
        assert set(final.metadata["tests"]) == {*task["FAIL_TO_PASS"], *task["PASS_TO_PASS"]}
        find, search, view, edit, bash = (r.observation for r in oracle[:5])
        assert _fix(task)[0] in find
        assert f"{path}:" in search or f"./{path}:" in search  # file:line:text
        assert "     1\t" in view
        assert "     6\t" not in view
        assert "has been edited" in edit
        assert "1 passed" in bash
        # tool results travel as role-`tool` messages the chat template renders
        assert oracle[0].metadata["tool_messages"][0]["role"] == "tool"
        assert lazy[-1].done
        assert lazy[-1].rewards[TESTS] == 0.0
        assert lazy[-1].metadata["verdict"] == "failed"


def test_budgets_end_the_episode_and_the_diff_so_far_is_scored(sandbox_url, tasks, arun):
    task = tasks[0]
    path, old, new = _fix(task)
    fix = _call("str_replace_editor", command="str_replace", path=path, old_str=old, new_str=new)
    look = _call("bash", command="ls")
    by_turns = SweAgentEnvironment(sandbox_url, max_turns=2)
    by_tokens = SweAgentEnvironment(sandbox_url, max_total_tokens=10, count_tokens=lambda s: 6)

    async def go():
        a = await _episode(by_turns, task, [fix, look, look, look])
        b = await _episode(by_tokens, task, [look, look, look])
        await by_tokens.aclose()
        return a, b

    turns, tokens = arun(by_turns, go())
    assert len(turns) == 2
    assert turns[-1].done
    assert turns[-1].metadata["end_reason"] == "max_turns"
    assert turns[-1].rewards[TESTS] == 1.0  # the fix made before the budget ran out counts
    assert len(tokens) == 2
    assert tokens[-1].metadata["end_reason"] == "token_budget"
    assert tokens[-1].rewards[TESTS] == 0.0


def test_invalid_actions_are_penalised_editor_errors_answered_output_cut(sandbox_url, tasks, arun):
    env = SweAgentEnvironment(
        sandbox_url, reward=RewardConfig(invalid_action_penalty=0.25), max_output_chars=2000
    )
    task = tasks[1]
    path = _fix(task)[0]
    turns = [
        "Let me think about the bug first.",  # no tool call: invalid
        "<tool_call>{not json</tool_call>",  # invalid
        _call("git_blame", path=path),  # unknown tool: invalid
        _call("str_replace_editor", command="delete", path=path),  # schema: invalid
        _call(
            "str_replace_editor", command="str_replace", path=path, old_str="import ", new_str="x"
        ),
        _call("str_replace_editor", command="view", path="no/such/file.py"),
        _call("str_replace_editor", command="insert", path=path, insert_line=10**6, new_str="x"),
        _call("bash", command="python -c \"print('y' * 50000)\""),
        _call("str_replace_editor", command="view", path="."),
        _call("submit"),
    ]
    res = arun(env, _episode(env, task, turns))
    obs = [r.observation for r in res[:-1]]
    assert "no tool call" in obs[0]
    assert "unknown tool 'git_blame'" in obs[2]
    assert "invalid arguments" in obs[3]
    assert "Multiple occurrences of old_str `import `" in obs[4]
    assert "does not exist" in obs[5]
    assert "Invalid `insert_line`" in obs[6]
    assert "characters cut ...]" in obs[7]
    assert len(obs[7]) < 2300
    assert "Files and directories" in obs[8]
    assert path.split("/")[0] in obs[8]
    final = res[-1]
    assert final.metadata["invalid_actions"] == 4
    assert final.metadata["invalid_kinds"] == {
        "no_call": 1,
        "json": 1,
        "unknown_tool": 1,
        "schema": 1,
    }
    assert final.metadata["tool_errors"] == 3
    assert final.rewards[INVALID_ACTION] == pytest.approx(-1.0)
    assert final.rewards[TESTS] == 0.0


def test_editing_the_held_out_tests_does_not_help(sandbox_url, tasks, arun):
    task = tasks[0]
    inst = materialize(task)
    test_file = task["FAIL_TO_PASS"][0].split("::")[0]
    env = SweAgentEnvironment(sandbox_url)
    wipe = _call("bash", command=f"printf 'def test_nothing():\\n    pass\\n' > {test_file}")
    res = arun(env, _episode(env, task, [wipe, _call("submit")]))
    assert test_file in inst.test_files
    assert res[-1].rewards[TESTS] == 0.0
    assert res[-1].metadata["tests_tampered"] is True


_CALC = "def add(a, b):\n    return a - b\n"
_RUNNER = (
    "import calc\n"
    "for name, ok in [('test_add', lambda: calc.add(2, 3) == 5), ('test_zero', lambda: calc.add(0, 0) == 0)]:\n"
    "    print(('PASSED ' if ok() else 'FAILED ') + name)\n"
)


def test_a_non_pytest_test_command_is_judged_by_swebench_log_parser(sandbox_url, tmp_path, arun):
    """A SWE-bench-format record whose spec runs ``python run_tests.py`` (not pytest): the verdict
    comes from SWE-bench's ``parse_log_pytest`` over the command's output."""
    pytest.importorskip("swebench.harness.log_parsers")
    spec = tmp_path / "specs.yaml"
    spec.write_text(
        'local/calc:\n  "1.0":\n    test_cmd: python run_tests.py\n    log_parser: parse_log_pytest\n'
    )
    repo = {"calc.py": _CALC.encode(), "run_tests.py": _RUNNER.encode()}
    record = {
        "instance_id": "local__calc-1", "repo": "local/calc", "base_commit": "0" * 40,
        "patch": "", "test_patch": "", "problem_statement": "add() subtracts.",
        "FAIL_TO_PASS": '["test_add"]', "PASS_TO_PASS": '["test_zero"]', "version": "1.0",
        "environment_setup_commit": "", "hints_text": "", "created_at": "",
        "repo_tarball": base64.b64encode(tarball(repo)).decode(),
    }  # fmt: skip
    from dockyard.envs.swe.records import from_record

    task = from_record(record).to_task()
    env = SweAgentEnvironment(sandbox_url, spec_files=[str(spec)])
    fix = _call(
        "str_replace_editor",
        command="str_replace",
        path="calc.py",
        old_str="a - b",
        new_str="a + b",
    )

    async def go():
        return await _episode(env, task, [fix, _call("submit")]), await _episode(
            env, task, [_call("submit")]
        )

    fixed, lazy = arun(env, go())
    assert fixed[-1].rewards[TESTS] == 1.0, fixed[-1].metadata
    assert fixed[-1].metadata["verdict_source"] == "log_parser"
    assert fixed[-1].metadata["tests"] == {"test_add": "passed", "test_zero": "passed"}
    assert lazy[-1].rewards[TESTS] == 0.0
    assert lazy[-1].metadata["tests"] == {"test_add": "failed", "test_zero": "passed"}
