"""The SWE environment and every shipped task, against the real sandbox service."""

from __future__ import annotations

import asyncio

import pytest

from dockyard.envs.rewards import FORMAT, TESTS, RewardConfig
from dockyard.envs.swe import SweEnvironment, load_shipped_tasks, materialize
from dockyard.envs.swe.instance import unified_diff
from dockyard.sandbox.models import Task


@pytest.fixture(scope="module")
def tasks():
    return load_shipped_tasks()


@pytest.mark.slow
def test_every_shipped_task_validates(sandbox_service, tasks):
    """The gold patch resolves each task; the empty patch does not (FAIL_TO_PASS fail).

    The tasks of the first two libraries (their runs stay in CI's budget); a random sample of
    all the shipped tasks is validated in test_swe_shipped.py, the whole set by
    scripts/build_swe_tasks.sh (its report is committed beside the data)."""
    tasks = [t for t in tasks if t["repo"] in ("pypi/inflection", "pypi/parse")]

    async def go():
        async with sandbox_service.async_client() as client:
            sem = asyncio.Semaphore(4)

            async def one(rec, patch):
                inst = materialize(rec)
                t = Task(repo={"tarball": inst.tarball_b64()}, patch=patch, test_files=inst.test_files,
                         tests={"fail_to_pass": inst.fail_to_pass, "pass_to_pass": inst.pass_to_pass}, timeout_s=60)  # fmt: skip
                async with sem:
                    return rec["instance_id"], bool(patch), await client.run_task(t)

            jobs = [one(r, materialize(r).patch) for r in tasks] + [one(r, "") for r in tasks]
            return await asyncio.gather(*jobs)

    results = asyncio.run(go())
    bad = []
    for iid, gold, res in results:
        if gold and not (res.resolved and res.verdict == "passed"):
            bad.append((iid, "gold", res.verdict, res.detail[:200], dict(res.tests)))
        if not gold:
            f2p = materialize(next(t for t in tasks if t["instance_id"] == iid)).fail_to_pass
            if (
                res.resolved
                or res.verdict != "failed"
                or any(res.tests[t] == "passed" for t in f2p)
            ):
                bad.append((iid, "empty", res.verdict, res.detail[:200], dict(res.tests)))
            p2p = [k for k, v in res.tests.items() if k not in f2p and v != "passed"]
            if p2p:
                bad.append((iid, "empty-p2p", p2p))
    assert not bad, bad


def test_env_scores_gold_wrong_and_missing_patches(sandbox_url, tasks, arun):
    env = SweEnvironment(sandbox_url, reward=RewardConfig(format_weight=0.05))
    rec = tasks[0]
    inst = materialize(rec)
    msgs = env.prompt(rec)
    assert rec["problem_statement"] in msgs[-1]["content"]
    assert inst.source_file in msgs[-1]["content"]

    async def go():
        gold = await env.score(
            rec, f"The bug is in {inst.source_file}.\n```diff\n{inst.patch}```\nDone."
        )
        none = await env.score(rec, "I could not find the bug.")
        src = inst.files[inst.source_file].decode()
        lines = src.splitlines(keepends=True)
        lines[0] = "# touched\n" + lines[0]
        wrong = await env.score(rec, unified_diff(inst.source_file, src, "".join(lines)))
        return gold, none, wrong

    gold, none, wrong = arun(env, go())
    assert gold.rewards == {TESTS: 1.0, FORMAT: 0.05}
    assert gold.metadata["resolved"]
    assert none.rewards == {TESTS: 0.0, FORMAT: 0.0}
    assert none.metadata["verdict"] == "no_patch"
    assert wrong.rewards[TESTS] == 0.0
    assert wrong.metadata["verdict"] == "failed"


def test_integrity_violations_score_zero_and_are_flagged(sandbox_url, tasks, arun):
    env = SweEnvironment(sandbox_url)
    rec = tasks[0]
    inst = materialize(rec)
    test_path = sorted(inst.test_files)[0]
    original = inst.test_files[test_path]
    # "fix" the task by gutting the held-out tests: restored from the trusted copy, flagged
    tamper = unified_diff(test_path, original, "def test_nothing():\n    pass\n")
    escape = "--- a/../evil.py\n+++ b/../evil.py\n@@ -0,0 +1 @@\n+x = 1\n"

    async def go():
        return await env.score(rec, tamper), await env.score(rec, escape)

    tampered, escaped = arun(env, go())
    assert tampered.rewards[TESTS] == 0.0
    assert tampered.metadata["tests_tampered"]
    assert tampered.metadata["integrity_violation"]
    assert test_path in tampered.metadata["tamper_paths"]
    assert escaped.rewards[TESTS] == 0.0
    assert escaped.metadata["verdict"] == "patch_rejected"
    assert escaped.metadata["integrity_violation"]
