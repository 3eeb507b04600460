"""The quickstart's expression task: spec checks run by the real sandbox service."""

from __future__ import annotations

import asyncio
import random

import pytest

from dockyard.envs.expression import (
    BUGGY,
    GOOD,
    KINDS,
    ExpressionEnvironment,
    check_expression,
    demonstrations,
    is_correct_locally,
    load_tasks,
)


def test_templates_are_what_they_claim() -> None:
    for kind in KINDS:
        for n in (2, 7, 13):
            task = {"kind": kind, "size": n}
            for t in GOOD[kind]:
                assert is_correct_locally(task, t.format(n=n)), (kind, t)
            for t in BUGGY[kind]:
                assert not is_correct_locally(task, t.format(n=n)), (kind, t)


def test_split_is_fixed_and_disjoint() -> None:
    train, val = load_tasks("train"), load_tasks("val")
    assert load_tasks("val") == val
    assert not {t["id"] for t in train} & {t["id"] for t in val}
    assert len(val) == 32
    assert len(train) + len(val) == 6 * 28


def test_demonstrations_are_imperfect_in_the_stated_proportion() -> None:
    train = load_tasks("train")
    demos = demonstrations(train, 2000, buggy_fraction=0.6, seed=3)
    by_id = {f"{t['kind']} of size {t['size']}": t for t in train}
    ok = [
        is_correct_locally(by_id[d["messages"][0]["content"]], d["messages"][1]["content"])
        for d in demos
    ]
    assert 0.35 < sum(ok) / len(ok) < 0.45


@pytest.mark.parametrize(
    "expr",
    ["__import__('os')", "().__class__", "(lambda: 1)()", "open('x')", "9**9**9", "x:=1", ""],
)
def test_unsafe_or_malformed_expressions_are_rejected(expr: str) -> None:
    assert check_expression(expr) is not None


def test_scores_through_the_real_sandbox() -> None:
    from dockyard.sandbox.launch import start_service

    tasks = load_tasks("val")[:4]
    rng = random.Random(0)
    with start_service(workers=2) as svc:
        env = ExpressionEnvironment([svc.url])

        async def run():
            out = []
            for t in tasks:
                good = rng.choice(GOOD[t["kind"]]).format(n=t["size"])
                bad = rng.choice(BUGGY[t["kind"]]).format(n=t["size"])
                out.append((await env.score(t, good), await env.score(t, bad)))
            tamper = await env.score(tasks[0], "__import__('os')._exit(0)")
            await env.aclose()
            return out, tamper

        results, tamper = asyncio.run(run())
        svc.kill()

        async def score_down():
            env = ExpressionEnvironment([svc.url], max_wait_s=1)
            try:
                return await env.score(tasks[0], "1")
            finally:
                await env.aclose()

        down = asyncio.run(score_down())
    for good, bad in results:
        assert good.rewards["reward/tests"] == 1.0, good.metadata
        assert bad.rewards["reward/tests"] == 0.0, bad.metadata
        assert not good.infra_error
        assert not bad.infra_error
    assert tamper.rewards["reward/tests"] == 0.0
    assert down.infra_error
    assert not down.rewards
