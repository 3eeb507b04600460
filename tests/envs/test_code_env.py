"""The code environment against the real sandbox service, on real HumanEval problems."""

from __future__ import annotations

import asyncio
import json

import pytest

from dockyard.envs.code import (
    CodeEnvironment,
    extract_code,
    humaneval_split,
    load_humaneval,
    load_mbpp_jsonl,
)
from dockyard.envs.code.env import build_solution
from dockyard.envs.rewards import FORMAT, TESTS, RewardConfig


def test_humaneval_loads_164_and_splits_deterministically():
    tasks = load_humaneval()
    assert len(tasks) == 164
    train, val = humaneval_split("train"), humaneval_split("validation")
    ids_t, ids_v = {t["id"] for t in train}, {t["id"] for t in val}
    assert not ids_t & ids_v
    assert len(ids_t | ids_v) == 164
    assert 20 <= len(val) <= 45  # ~20 %
    assert [t["id"] for t in humaneval_split("validation")] == [t["id"] for t in val]
    assert {t["id"] for t in humaneval_split("validation", seed=1)} != ids_v
    # most checks are plain asserts, split one test per assert
    assert sum(len(t["tests"]) > 1 for t in tasks) > 100
    with pytest.raises(ValueError, match="split must be"):
        humaneval_split("test")


def test_extract_and_build_solution():
    task = load_humaneval()[0]
    code, fenced = extract_code(
        "Sure!\n```python\nx = 1\n```\nand\n```python\ndef has_close_elements(a, b):\n    pass\n```",
        "has_close_elements",
    )
    assert fenced
    assert code.startswith("def has_close_elements")
    sol, fenced = build_solution(task, "    return False\n")  # a continuation of the prompt
    assert sol.startswith(task["prompt"])
    assert not fenced
    sol, _ = build_solution(
        task, "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"
    )
    assert sol.startswith("from typing import List")
    assert "def has_close_elements" in sol


def _run(env, coro):
    async def main():
        try:
            return await coro
        finally:
            await env.aclose()

    return asyncio.run(main())


def _broken(t):
    """The canonical solution with its result wrapped in a tuple: wrong on every test."""
    e = t["entry_point"]
    return (
        t["canonical_solution"]
        + f"\n_orig = {e}\ndef {e}(*a, **k):\n    return ('broken', _orig(*a, **k))\n"
    )


def test_canonical_solutions_pass_and_broken_ones_fail(sandbox_url):
    env = CodeEnvironment(sandbox_url, reward=RewardConfig(format_weight=0.1))
    tasks = load_humaneval()[::14]  # 12 problems across the set

    async def go():
        good = [env.score(t, "```python\n" + t["canonical_solution"] + "```") for t in tasks]
        bad = [env.score(t, "```python\n" + _broken(t) + "```") for t in tasks]
        return await asyncio.gather(*good), await asyncio.gather(*bad)

    good, bad = _run(env, go())
    assert [r.rewards[TESTS] for r in good] == [1.0] * len(tasks), [
        r.metadata for r in good if r.rewards[TESTS] != 1
    ]
    assert all(r.rewards[FORMAT] == 0.1 and r.metadata["verdict"] == "passed" for r in good)
    assert sum(r.rewards[TESTS] for r in bad) == 0.0
    assert not any(r.infra_error for r in good + bad)


def test_fraction_mode_gives_partial_credit(sandbox_url):
    env = CodeEnvironment(sandbox_url, reward=RewardConfig(mode="fraction"))
    task = load_humaneval()[0]  # 7 asserts; "always True" passes the 4 True cases
    r = _run(
        env,
        env.score(
            task, "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
        ),
    )
    assert r.rewards[TESTS] == pytest.approx(4 / 7)
    assert r.metadata["verdict"] == "failed"
    assert not r.metadata["resolved"]


def test_cheating_solutions_score_zero(sandbox_url):
    env = CodeEnvironment(sandbox_url)
    task = load_humaneval()[0]
    exits = "```python\nimport sys\nsys.exit(0)\n```"
    plant = "```python\nimport os\nopen('test_solution.py', 'w').write('def test_0():\\n    pass\\n')\ndef has_close_elements(n, t):\n    return True\n```"
    for resp in (exits, plant):
        r = _run(env, env.score(task, resp))
        assert r.rewards[TESTS] == 0.0
        assert not r.infra_error


def test_mbpp_jsonl(tmp_path, sandbox_url):
    p = tmp_path / "mbpp.jsonl"
    recs = [
        {"task_id": 1, "text": "Write a function to add two numbers.", "code": "def add(a, b):\n    return a + b\n",
         "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"], "test_setup_code": ""},
        {"task_id": 2, "text": "Write a function to reverse a string.", "code": "def rev(s):\n    return s[::-1]\n",
         "test_list": ["assert rev('ab') == 'ba'"], "test_imports": ["import math"]},
    ]  # fmt: skip
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    tasks = load_mbpp_jsonl(p)
    assert [t["entry_point"] for t in tasks] == ["add", "rev"]
    assert tasks[0]["id"] == "mbpp/1"
    env = CodeEnvironment(sandbox_url)
    ok = _run(env, env.score(tasks[0], "```python\n" + recs[0]["code"] + "```"))
    wrong = _run(env, env.score(tasks[1], "```python\ndef rev(s):\n    return s\n```"))
    assert ok.rewards[TESTS] == 1.0
    assert wrong.rewards[TESTS] == 0.0
    p.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(ValueError, match="missing key 'test_list'"):
        load_mbpp_jsonl(p)
