"""`dockyard swe validate`'s core against the real sandbox: the gold patch must resolve, the
empty patch must not; instances that fail either are listed with the reason."""

from __future__ import annotations

import asyncio
import base64

from dockyard.envs.swe import load_shipped_tasks
from dockyard.envs.swe.instance import unified_diff
from dockyard.envs.swe.sdist import tarball
from dockyard.envs.swe.validate import report, table, validate

CALC = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n\ndef test_zero():\n    assert add(0, 0) == 0\n"


def _record(iid: str, repo: str, patch: str) -> dict:
    return {
        "instance_id": iid, "repo": repo, "base_commit": "0" * 40, "version": "1.0",
        "patch": patch, "problem_statement": "add() subtracts",
        "test_patch": unified_diff("test_calc.py", "", TEST),
        "FAIL_TO_PASS": '["test_calc.py::test_add"]', "PASS_TO_PASS": '["test_calc.py::test_zero"]',
        "environment_setup_commit": "", "hints_text": "", "created_at": "",
        "repo_tarball": base64.b64encode(tarball({"calc.py": CALC.encode()})).decode(),
    }  # fmt: skip


def test_validate_accepts_good_instances_and_says_why_others_fail(sandbox_service, tmp_path):
    spec = tmp_path / "specs.yaml"
    spec.write_text('local/calc:\n  "*":\n    test_cmd: pytest\n')
    fix = unified_diff("calc.py", CALC, CALC.replace("a - b", "a + b"))
    noop = unified_diff("calc.py", CALC, CALC + "# nothing\n")
    shipped = load_shipped_tasks()[0]
    already_passing = {
        **shipped,
        "instance_id": shipped["instance_id"] + "-p2p",
        "FAIL_TO_PASS": shipped["PASS_TO_PASS"][:1],
    }
    tasks = [
        shipped,
        _record("calc-ok", "local/calc", fix),
        _record("calc-noop", "local/calc", noop),
        already_passing,
        _record("calc-nospec", "nobody/knows", fix),
    ]

    async def go():
        async with sandbox_service.async_client() as client:
            return await validate(client, tasks, [str(spec)], concurrency=4)

    rows = asyncio.run(go())
    by_id = {r["instance_id"]: r for r in rows}
    assert [r["instance_id"] for r in rows] == [t["instance_id"] for t in tasks]
    assert by_id[shipped["instance_id"]]["valid"], by_id[shipped["instance_id"]]
    assert by_id["calc-ok"]["valid"], by_id["calc-ok"]
    assert by_id["calc-ok"]["gold"]["resolved"] is True
    assert by_id["calc-ok"]["empty"]["resolved"] is False
    assert by_id["calc-noop"]["reason"].startswith(
        "gold: failed (FAIL_TO_PASS failing: ['test_calc.py::test_add']"
    )
    assert by_id[already_passing["instance_id"]]["reason"].startswith("empty patch resolves it")
    assert by_id["calc-nospec"]["reason"].startswith("setup: ")
    assert "no environment spec for nobody/knows" in by_id["calc-nospec"]["reason"]
    rep = report(rows)
    assert (rep["instances"], rep["valid"]) == (5, 2)
    assert rep["repos"]["local/calc"] == {"instances": 2, "valid": 1}
    text = table(rep)
    assert "calc-noop: gold: failed" in text
    assert "total" in text
