"""Validate Harbor tasks: the oracle must reach reward 1, an empty agent must not.

For each task, two episodes run through :class:`HarborEnvironment` against a real sandbox
service, all tasks in parallel (``concurrency`` at a time):

* **oracle** — ``solution/`` is written into the workspace under ``.oracle/``, ``solve.sh`` runs
  there (cwd: the workdir, up to the task's agent timeout), ``.oracle/`` is removed, and the
  episode is scored like any agent's (fresh verifier sandbox, the reward file);
* **empty** — no action at all, then the same scoring.

A task is ``ok`` iff oracle reward == 1 and empty reward < 1. A task whose environment could not be
provisioned is ``provision_failed`` (with the failing step, its exit code and the build log's
tail), never scored. Every episode that did not reach reward 1 carries the verifier's stdout and
stderr (bounded: ``env.VERIFIER_OUTPUT_CAP`` characters each, the middle elided). :func:`report_table`
prints the table; the JSON report is :func:`validate`'s return value.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from dockyard.envs.harbor.env import HarborEnvironment

ORACLE_DIR = ".oracle"


async def _episode(env: HarborEnvironment, task: dict[str, Any], oracle: bool) -> dict[str, Any]:
    t0 = time.monotonic()
    state = await env.reset(task)
    try:
        if state.get("provision_failed"):
            d = state["provision_failed"]
            return {"status": "provision_failed", "detail": str(d.get("provision_failed")),
                    "step": d.get("step"), "exit_code": d.get("exit_code"),
                    "log": str(d.get("log", ""))[-4000:], "seconds": time.monotonic() - t0}  # fmt: skip
        if state["infra_error"]:
            return {"status": "infra_error", "detail": state["infra_error"]}
        client = env._client_for(state)
        sid = state["session_id"]
        solve = None
        if oracle:
            if not task.get("solution"):
                return {"status": "no_solution", "detail": "the task has no solution/solve.sh"}
            for rel, text in task["solution"].items():
                await client.put_file(sid, f"{ORACLE_DIR}/{rel}", text)
            solve = await client.exec(
                sid, f"bash {ORACLE_DIR}/solve.sh; rc=$?; rm -rf {ORACLE_DIR}; exit $rc",
                timeout_s=min(float(task.get("agent_timeout_s", 600.0)), 3600.0),
            )  # fmt: skip
        state["submitted"] = state["done"] = True
        step = await env._finish(state)
        out: dict[str, Any] = {
            "status": "infra_error" if step.infra_error else "scored",
            "reward": step.rewards.get("reward/tests"),
            "verdict": step.metadata.get("verdict"),
            "reward_file_error": step.metadata.get("reward_file_error", ""),
            "detail": str(step.metadata.get("detail", step.metadata.get("infra_reason", "")))[:500],
            "seconds": round(time.monotonic() - t0, 2),
        }
        if solve is not None:
            out["solve_exit"] = solve.exit_code
            if solve.exit_code != 0:
                out["solve_output"] = (solve.stdout + solve.stderr)[-2000:]
        if out["reward"] != 1.0 or out["status"] != "scored":  # every case that did not pass
            out["verifier_stdout"] = step.metadata.get("verifier_stdout", "")
            out["verifier_stderr"] = step.metadata.get("verifier_stderr", "")
        return out
    finally:
        await env.close(state)


async def validate_async(
    tasks: list[dict[str, Any]],
    env: HarborEnvironment,
    concurrency: int = 4,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The report: ``{"tasks": [per-task rows], "ok": n, "total": n, "seconds": s}``."""
    sem = asyncio.Semaphore(max(1, concurrency))
    t0 = time.monotonic()

    async def one(task: dict[str, Any]) -> dict[str, Any]:
        async with sem:
            oracle = await _episode(env, task, oracle=True)
            empty = (
                await _episode(env, task, oracle=False)
                if oracle["status"] != "provision_failed"
                else {"status": "provision_failed"}
            )
        ok = (
            oracle.get("status") == "scored" and oracle.get("reward") == 1.0
            and empty.get("status") == "scored" and float(empty.get("reward") or 0.0) < 1.0
        )  # fmt: skip
        row = {"id": task["id"], "ok": ok, "oracle": oracle, "empty": empty,
               "notes": list(task.get("notes", []))}  # approximations, ignored lines  # fmt: skip
        if progress is not None:
            progress(row)
        return row

    rows = await asyncio.gather(*(one(t) for t in tasks))
    return {
        "tasks": list(rows),
        "ok": sum(r["ok"] for r in rows),
        "total": len(rows),
        "seconds": round(time.monotonic() - t0, 2),
    }


def report_table(report: dict[str, Any]) -> str:
    """A fixed-width table: task, oracle reward, empty reward, verdict."""
    w = max([len(r["id"]) for r in report["tasks"]] + [4])
    lines = [f"{'task':<{w}}  {'oracle':>7}  {'empty':>7}  result"]

    def cell(e: dict[str, Any]) -> str:
        return f"{e['reward']:.2f}" if e.get("status") == "scored" else str(e.get("status"))[:7]

    for r in report["tasks"]:
        why = "ok" if r["ok"] else (
            r["oracle"].get("detail") or r["oracle"].get("reward_file_error") or "FAIL"
        )  # fmt: skip
        lines.append(
            f"{r['id']:<{w}}  {cell(r['oracle']):>7}  {cell(r['empty']):>7}  {str(why)[:80]}"
        )
    for r in report.get("refused", ()):
        lines.append(f"{r['id']:<{w}}  {'refused':>7}  {'':>7}  {r['refused'][-80:]}")
    lines.append(f"{report['ok']}/{report['total']} tasks ok in {report['seconds']:.1f} s"
                 + (f"; {len(report['refused'])} refused at load" if report.get("refused") else ""))  # fmt: skip
    return "\n".join(lines)
