"""GDPval-style deliverables against the real sandbox: every shipped task's reference program,
run in the sandbox (its interpreter has dockyard-sandbox[office]'s libraries), scores ≥ 0.9 on
its rubric and an empty answer 0; hostile files are failed criteria, never infra errors; the
agentic variant grades what an agent left in its session.

Here the judge criteria are *skipped* (``use_judge: false``: a plain function stands in for the
judge only where the masking mechanics are the point) — the thresholds are over the
deterministic criteria. The judge path with a real engine: tests/train/test_eval_judged.py."""

from __future__ import annotations

import asyncio
import io
import json
import zipfile

import pytest

from dockyard.envs.gdpval.agentic import GdpvalAgenticEnvironment
from dockyard.envs.gdpval.env import GdpvalEnvironment
from dockyard.envs.gdpval.parse import ParseLimits, parse_file
from dockyard.envs.gdpval.rubric import grade
from dockyard.envs.gdpval.tasks import gdpval_dataset, load_tasks, reference_program, validate_task
from dockyard.envs.judging import NoJudgeError
from dockyard.envs.registry import get_env

TASKS = load_tasks()


def _fenced(program: str) -> str:
    return f"Here is the program.\n```python\n{program}```\n"


def test_the_shipped_set_covers_every_kind_and_validates() -> None:
    assert len(TASKS) >= 20
    kinds = {d.rsplit(".", 1)[1] for t in TASKS for d in t["deliverables"]}
    assert kinds == {"csv", "xlsx", "docx", "pdf", "png", "md"}
    assert all(any(c["type"] == "judge" for c in t["rubric"]) for t in TASKS)
    train, val = gdpval_dataset("train"), gdpval_dataset("val")
    assert len(train) + len(val) == len(TASKS)
    assert val
    with pytest.raises(ValueError, match="not in deliverables"):
        validate_task({**TASKS[0], "rubric": [{"id": "x", "type": "parses", "file": "o.csv"}]}, "t")
    with pytest.raises(ValueError, match="relative path"):
        validate_task({**TASKS[0], "deliverables": ["../x.csv"]}, "t")
    spec = get_env("gdpval")
    assert spec.needs_sandbox
    assert spec.needs_judge
    with pytest.raises(NoJudgeError):
        GdpvalEnvironment("http://127.0.0.1:9")


def test_every_reference_scores_at_least_0_9_and_an_empty_answer_0(sandbox_url, arun) -> None:
    env = GdpvalEnvironment(sandbox_url, use_judge=False, timeout_s=60)

    async def go():
        sem = asyncio.Semaphore(4)

        async def one(t):
            async with sem:
                return await env.score(t, _fenced(reference_program(t)))

        refs = await asyncio.gather(*(one(t) for t in TASKS))
        empty = await env.score(TASKS[0], "")
        return refs, empty

    refs, empty = arun(env, go())
    for t, r in zip(TASKS, refs, strict=True):
        assert not r.infra_error, (t["id"], r.metadata)
        assert r.metadata["exit_code"] == 0, (t["id"], r.metadata["output_tail"])
        assert r.rewards["reward/tests"] >= 0.9, (t["id"], r.metadata["criteria"])
        assert all(v == "ok" for v in r.metadata["files"].values()), r.metadata["files"]
        assert r.metadata["judge_skipped"] == sum(c["type"] == "judge" for c in t["rubric"])
        assert [c["id"] for c in r.metadata["criteria"]] == [c["id"] for c in t["rubric"]]
    assert empty.rewards["reward/tests"] == 0.0
    assert not empty.infra_error


def test_broken_programs_and_wrong_files_are_verdicts(sandbox_url, arun) -> None:
    env = GdpvalEnvironment(sandbox_url, use_judge=False, timeout_s=3)
    task = next(t for t in TASKS if t["id"] == "payroll_xlsx")
    crash = "import sys\nopen('payroll.xlsx', 'w').write('not a workbook')\nsys.exit(3)\n"
    loop = "open('payroll.xlsx', 'wb').write(b'PK' * 10)\nwhile True: pass\n"

    async def go():
        return [await env.score(task, _fenced(p)) for p in (crash, loop)]

    crashed, looped = arun(env, go())
    for r in (crashed, looped):
        assert not r.infra_error, r.metadata
        assert r.rewards["reward/tests"] == 0.0
        assert r.metadata["files"]["payroll.xlsx"] != "ok"  # malformed: the file's verdict
    assert crashed.metadata["exit_code"] == 3
    assert looped.metadata["timed_out"]


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_hostile_files_are_refused_in_the_reader() -> None:
    async def go():
        bomb = _zip({"xl/workbook.xml": b"\0" * (80 << 20)})  # 80 MiB of zeros: ~80 KiB zipped
        many = _zip({f"f{i}": b"x" for i in range(2100)})
        big = b"a,b\n" * (2 << 20)
        billion = (b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
                   b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><l>&b;</l>')  # fmt: skip
        ent = _zip({"[Content_Types].xml": billion, "xl/workbook.xml": billion})
        return [
            await parse_file("a.xlsx", bomb),
            await parse_file("a.docx", many),
            await parse_file("a.csv", big, ParseLimits(max_file_bytes=1 << 20)),
            await parse_file("a.xlsx", ent),
            await parse_file("a.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 64),
            await parse_file("a.pdf", b"%PDF-1.4 broken"),
        ]

    outs = asyncio.run(go())
    assert [o["ok"] for o in outs] == [False] * 6, outs
    assert "inflates" in outs[0]["error"] or "uncompressed" in outs[0]["error"]
    assert "zip members" in outs[1]["error"]
    assert "at most" in outs[2]["error"]


def test_judge_criteria_are_asked_and_a_failed_judgment_masks_the_sample() -> None:
    task = next(t for t in TASKS if t["id"] == "readme_md")
    files = {"README.md": b"# csvtidy\n\n## Installation\n\npip install csvtidy\n"}
    asked = []

    def judge(score):
        async def fn(prompt: str, response: str):
            asked.append((prompt, response))
            return score

        return fn

    async def go():
        return [await grade(task, files, judge(s)) for s in (1.0, None)]

    good, failed = asyncio.run(go())
    prompt, shown = asked[0]
    assert task["instruction"] in prompt
    assert "[Criterion]" in prompt
    assert "pip install csvtidy" in shown
    assert "=== README.md ===" in shown
    judged = [c for c in good.criteria if c["type"] == "judge"]
    assert judged[0]["score"] == 1.0
    assert not good.judge_failed
    assert failed.judge_failed
    assert all(c["score"] is None for c in failed.criteria if c["type"] == "judge")
    # nothing delivered: the judge is not asked, the criterion scores 0
    n = len(asked)
    nothing = asyncio.run(grade(task, {"README.md": None}, judge(1.0)))
    assert nothing.score == 0.0
    assert len(asked) == n


def test_an_unreachable_sandbox_is_an_infra_error(arun) -> None:
    env = GdpvalEnvironment("http://127.0.0.1:9", use_judge=False, max_wait_s=1.0)
    r = arun(env, env.score(TASKS[0], _fenced(reference_program(TASKS[0]))))
    assert r.infra_error
    assert r.rewards == {}


def _call(name: str, **args) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def test_the_agentic_variant_grades_what_the_agent_left(sandbox_url, arun) -> None:
    env = GdpvalAgenticEnvironment(sandbox_url, use_judge=False, max_turns=4)
    task = next(t for t in TASKS if t["id"] == "loan_schedule_xlsx")

    async def episode(turns):
        state = await env.reset(task)
        try:
            for turn in turns:
                r = await env.step(state, turn)
                if r.done:
                    return r
            raise AssertionError("the episode did not end")
        finally:
            await env.close(state)

    async def go():
        worker = [_call("write_file", path="make.py", content=reference_program(task)),
                  _call("run", command="python make.py && ls"), _call("submit")]  # fmt: skip
        return await episode(worker), await episode([_call("submit")])

    done, idle = arun(env, go())
    assert "python" in env.prompt(task)[0]["content"]
    assert "loan_schedule.xlsx" in env.prompt(task)[1]["content"]
    assert not done.infra_error, done.metadata
    assert done.rewards["reward/tests"] >= 0.9, done.metadata
    assert done.metadata["end_reason"] == "submit"
    assert done.rewards["reward/invalid_action"] == 0
    assert idle.rewards["reward/tests"] == 0.0
    assert idle.metadata["files"] == {"loan_schedule.xlsx": "missing"}
