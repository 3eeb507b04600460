"""Sandbox infrastructure failures mark samples ``infra_error`` (masked), never score them 0."""

from __future__ import annotations

import asyncio
import json

from dockyard.envs.code import CodeEnvironment, load_humaneval
from dockyard.envs.swe import SweEnvironment, load_shipped_tasks
from dockyard.envs.terminal import TerminalEnvironment, load_terminal_tasks
from dockyard.sandbox.launch import start_service


def _call(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def test_service_killed_mid_run_gives_infra_error():
    svc = start_service(workers=1)
    code_task = load_humaneval()[0]
    swe_task = load_shipped_tasks()[0]
    term_task = load_terminal_tasks()[0]
    kw = {"max_wait_s": 2.0}
    code = CodeEnvironment(svc.url, **kw)
    swe = SweEnvironment(svc.url, **kw)
    term = TerminalEnvironment(svc.url, **kw)

    async def go():
        try:
            alive = await code.score(
                code_task, "```python\n" + code_task["canonical_solution"] + "```"
            )
            state = await term.reset(term_task)  # a live session...
            first = await term.step(state, _call("read_file", path="stats.py"))
            svc.kill()  # ...then the service dies (what a crash looks like to clients)
            after = await term.step(state, _call("run", command="ls"))
            await term.close(state)
            dead_code = await code.score(
                code_task, "```python\n" + code_task["canonical_solution"] + "```"
            )
            dead_swe = await swe.score(
                swe_task, "```diff\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n```"
            )
            fresh = await term.reset(term_task)
            dead_reset = await term.step(fresh, _call("submit"))
            return alive, first, after, dead_code, dead_swe, dead_reset
        finally:
            for env in (code, swe, term):
                await env.aclose()

    try:
        alive, first, after, dead_code, dead_swe, dead_reset = asyncio.run(go())
    finally:
        svc.stop()
    assert alive.rewards["reward/tests"] == 1.0
    assert not alive.infra_error
    assert not first.done
    assert "def mean" in first.observation
    for r in (after, dead_code, dead_swe, dead_reset):
        assert r.infra_error, r
        assert r.rewards == {}  # masked, not a zero reward
        assert r.done
        assert r.metadata["infra_reason"]


def test_unreachable_service_gives_infra_error(arun):
    env = CodeEnvironment("http://127.0.0.1:9", max_wait_s=1.0)  # discard port: refused
    task = load_humaneval()[1]
    r = arun(env, env.score(task, task["canonical_solution"]))
    assert r.infra_error
    assert r.rewards == {}
