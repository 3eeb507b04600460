"""Validate instances: the gold patch must resolve, the empty patch must not.

For each instance two sandbox tasks run (concurrently, at most ``concurrency`` at once): the
gold ``patch`` and the empty patch, each with the held-out tests of
:func:`~dockyard.envs.swe.evaluation.evaluation_fields`. An instance is *valid* when the gold
patch resolves it (every ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` test passes) and the empty patch
does not (some ``FAIL_TO_PASS`` test fails). Otherwise ``reason`` says why, e.g.
``gold: failed (FAIL_TO_PASS failing: ...)``, ``empty patch resolves it``,
``setup: no environment spec ...``, ``infra_error: ...``.

Each instance runs in its (repo, version)'s provisioned environment when its setup has install
steps (:mod:`dockyard.envs.swe.provision`: built once on the sandbox node, cached, mounted
read-only by both runs and by every other instance of it). An environment that cannot be
provisioned is a row with ``status: "provision_failed"``, ``provision_failed`` (the reason: a
refused step, or the failed build step) and ``provision_log`` (the build's log); it is never
scored.

Every row that is not valid carries ``failure`` — the run that went wrong (``gold``, or
``empty`` when the empty patch resolved it), its ``step`` (``provision``, ``setup_command``,
``tests``), the ``command`` that step ran, its ``exit_code`` and the last
:data:`TAIL_BYTES` of its ``stdout`` / ``stderr`` — and so does its entry in ``invalid``.
SWE-bench Pro instances that cannot run here (:func:`~dockyard.envs.swe.pro.check_pro`) are
rows with ``status: "refused"`` and the line, and so are instances whose task the sandbox
service refuses (a 4xx: e.g. a ``repo_git`` server path it does not allow), with its reason.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from typing import Any

from dockyard.envs.swe.commands import StepRefused
from dockyard.envs.swe.env import repo_spec, task_setup_command
from dockyard.envs.swe.evaluation import evaluation_fields
from dockyard.envs.swe.instance import materialize
from dockyard.envs.swe.logverdict import judge_log
from dockyard.envs.swe.pro import check_pro
from dockyard.envs.swe.provision import ProvisionRefused, environment_for, provision_failure
from dockyard.envs.swe.records import from_record
from dockyard.envs.swe.repofiles import repo_files
from dockyard.envs.swe.specs import resolve_setup
from dockyard.sandbox.client import SandboxRequestError
from dockyard.sandbox.models import Limits, RepoSpec, Task, TaskResult

TAIL_BYTES = 4096


def _tail(text: str) -> str:
    data = text.encode("utf-8", "replace")
    return data[-TAIL_BYTES:].decode("utf-8", "replace")


def failure(result: TaskResult, run: str, base: dict[str, Any]) -> dict[str, Any]:
    """Where ``result`` (the ``run`` patch's) went wrong: the step, its command, exit code and
    the tails of its output (module docstring)."""
    detail, stderr = result.detail or "", result.stderr
    step, command, code = "tests", base.get("test_command"), result.exit_code
    if command is None and base.get("tests") is not None:
        t = base["tests"]
        command = f"pytest runner: {len(t.fail_to_pass) + len(t.pass_to_pass)} ids"
    if detail.startswith("provision_failed"):
        step, command, code = "provision", "environment build", None
        m = re.search(r"exit(?:ed)?(?: code)? (-?\d+)", detail)
        code = int(m.group(1)) if m else None
    elif "setup_command failed" in detail:
        m = re.search(r"exit (-?\d+)\): ?(.*)", detail, re.S)
        stderr = result.stderr or (m.group(2) if m else "")
        step, command, code = (
            "setup_command",
            base.get("setup_command"),
            int(m.group(1)) if m else None,
        )
    return {
        "run": run, "step": step, "command": command, "exit_code": code,
        "verdict": str(result.verdict), "detail": detail[:1000],
        "stdout": _tail(result.stdout), "stderr": _tail(stderr),
    }  # fmt: skip


def _failing(result: TaskResult, ids: list[str]) -> list[str]:
    return [t for t in ids if str(result.tests.get(t, "missing")) != "passed"]


async def validate_one(
    client: Any, task: dict[str, Any], spec_files: Sequence[str] = (), timeout_s: float = 120.0,
    limits: Limits | None = None, network: bool = False, builder: str = "prefix",
) -> dict[str, Any]:  # fmt: skip
    """One instance's row of the report (see the module docstring); ``builder``: the
    environment's (:mod:`~dockyard.envs.swe.provision`)."""
    iid = str(task.get("instance_id", "?"))
    row: dict[str, Any] = {"instance_id": iid, "repo": task.get("repo"), "valid": False}
    try:
        rec = from_record({"patch": "", "test_patch": "", **task}, iid)
        if rec.flavor == "swebench_pro":
            check_pro(rec)
        inst = materialize(task) if "source" in task else None
        setup = resolve_setup(rec, spec_files)
    except StepRefused as e:
        return {**row, "status": "refused", "reason": f"refused: {e}"}
    except (ValueError, KeyError, LookupError, RuntimeError) as e:
        row["reason"] = f"setup: {e}"
        return row
    gold = inst.patch if inst is not None else rec.patch
    if not gold.strip():
        row["reason"] = "no gold patch"
        return row
    row["spec"] = setup.source
    try:
        prov = environment_for(setup, network=network, files=repo_files(task), builder=builder)
        setup_cmd = task_setup_command(prov, task)
    except ProvisionRefused as e:  # nothing ran: the refused step is the failure
        refused = {"run": "none", "step": "translation", "command": str(e)[:2000],
                   "exit_code": None, "stdout": "", "stderr": ""}  # fmt: skip
        return {**row, "status": "provision_failed", "provision_failed": str(e),
                "provision_log": "", "reason": f"provision_failed: {e}", "failure": refused}  # fmt: skip
    if prov.notes:
        row["provision_notes"] = prov.notes
    base = {
        "repo": RepoSpec.model_validate(repo_spec(task, inst)),
        "timeout_s": timeout_s,
        "limits": limits or Limits.model_validate({"memory_mb": 1024, "pids": 128}),
        **evaluation_fields(rec, inst, setup, prov.python),
        "environment": prov.spec,
        "setup_command": setup_cmd,
    }

    async def run(patch: str) -> TaskResult:
        result = await client.run_task(Task(patch=patch, metadata={"instance_id": iid}, **base))
        if "test_command" in base:
            result = judge_log(result, setup, rec.to_task())
        return result

    try:
        g, e = await asyncio.gather(run(gold), run(""))
    except SandboxRequestError as err:  # the service refused the task (a 4xx): nothing ran
        return {**row, "status": "refused", "reason": f"refused by the sandbox: {err}"}
    row["gold"] = {"verdict": str(g.verdict), "resolved": g.resolved, "s": g.timings.total_s}
    row["empty"] = {"verdict": str(e.verdict), "resolved": e.resolved, "s": e.timings.total_s}
    pf = provision_failure(g) or provision_failure(e)
    if pf is not None:
        row["status"] = "provision_failed"
        row.update(pf)
        row["reason"] = f"provision_failed: {pf['provision_failed'][:300]}"
    elif "infra_error" in (str(g.verdict), str(e.verdict)):
        row["reason"] = f"infra_error: {(g.detail or e.detail)[:300]}"
    elif not g.resolved:
        f2p, p2p = _failing(g, rec.fail_to_pass), _failing(g, rec.pass_to_pass)
        row["reason"] = (
            f"gold: {g.verdict} (FAIL_TO_PASS failing: {f2p[:5]}, PASS_TO_PASS failing: "
            f"{p2p[:5]}) {g.detail[:200]}"
        ).strip()
    elif e.resolved or not _failing(e, rec.fail_to_pass):
        row["reason"] = "empty patch resolves it: FAIL_TO_PASS tests pass without a fix"
        row["failure"] = failure(e, "empty", base)
    else:
        row["valid"], row["reason"] = True, ""
    if not row["valid"] and "failure" not in row:
        bad = g if (not g.resolved or str(e.verdict) != "infra_error") else e
        row["failure"] = failure(bad, "gold" if bad is g else "empty", base)
    row.setdefault("status", "valid" if row["valid"] else "invalid")
    return row


async def validate(
    client: Any,
    tasks: list[dict[str, Any]],
    spec_files: Sequence[str] = (),
    concurrency: int = 4,
    timeout_s: float = 120.0,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    network: bool = False,
    builder: str = "prefix",
) -> list[dict[str, Any]]:
    """Rows for every instance, in input order; ``on_row`` is called as each finishes.
    ``network``: provisioning steps may download (the sandbox needs ``--allow-network``);
    ``builder``: ``prefix`` or ``layers`` (:mod:`~dockyard.envs.swe.provision`)."""
    sem = asyncio.Semaphore(max(1, concurrency // 2))  # two sandbox tasks per instance

    async def one(task: dict[str, Any]) -> dict[str, Any]:
        async with sem:
            row = await validate_one(
                client, task, spec_files, timeout_s, network=network, builder=builder
            )
        if on_row is not None:
            on_row(row)
        return row

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON report: counts, per-repo counts, the invalid instances with reasons, all rows."""
    repos: dict[str, dict[str, int]] = {}
    for r in rows:
        c = repos.setdefault(str(r.get("repo")), {"instances": 0, "valid": 0})
        c["instances"] += 1
        c["valid"] += int(r["valid"])
    return {
        "instances": len(rows),
        "valid": sum(int(r["valid"]) for r in rows),
        "repos": repos,
        "provision_failed": sum(r.get("status") == "provision_failed" for r in rows),
        "refused": sum(r.get("status") == "refused" for r in rows),
        "invalid": [
            {"instance_id": r["instance_id"], "reason": r["reason"], **_short(r.get("failure"))}
            for r in rows
            if not r["valid"]
        ],
        "rows": rows,
    }


def _short(f: dict[str, Any] | None) -> dict[str, Any]:
    if not f:
        return {}
    keys = ("run", "step", "command", "exit_code", "stdout", "stderr")
    return {k: f[k] for k in keys}


def table(rep: dict[str, Any]) -> str:
    """A plain-text table: one line per repository, then the invalid instances."""
    width = max([len(k) for k in rep["repos"]] + [10])
    lines = [f"{'repository':<{width}}  instances  valid", "-" * (width + 19)]
    for repo, c in sorted(rep["repos"].items()):
        lines.append(f"{repo:<{width}}  {c['instances']:>9}  {c['valid']:>5}")
    lines.append(f"{'total':<{width}}  {rep['instances']:>9}  {rep['valid']:>5}")
    if rep["invalid"]:
        lines.append("\nnot valid:")
        for r in rep["invalid"]:
            lines.append(f"  {r['instance_id']}: {r['reason']}")
            if "step" in r:
                lines.append(f"    {r['run']} {r['step']}: {r['command']} (exit {r['exit_code']})")
                tail = (r["stderr"] or r["stdout"]).strip().splitlines()[-3:]
                lines += [f"      | {x[:160]}" for x in tail]
    return "\n".join(lines)
