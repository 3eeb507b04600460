"""The shipped SWE task sets — mutations of 11 libraries, and real fixes between two releases
(SWE-bench-format records) — their committed validation reports, and a random sample of each
re-validated through the real sandbox on every run (gold patch resolves, empty patch does not).

The sample changes from run to run (one instance from each of ``SAMPLE_LIBRARIES`` libraries
drawn at random); its seed is printed and in every failure message. Reproduce a failure with
``DOCKYARD_SWE_SAMPLE_SEED=<seed> pytest tests/envs/test_swe_shipped.py``. The whole set is
validated by ``scripts/build_swe_tasks.sh`` (its report is committed beside the data).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections import defaultdict

import pytest

from dockyard.envs.swe import load_shipped_tasks
from dockyard.envs.swe.data import load_swebench_jsonl, shipped_task_files
from dockyard.envs.swe.validate import validate

SAMPLE_LIBRARIES = 8
SAMPLE_RELEASES = 2


def _releases_file():
    (tasks_file,) = [f for f in shipped_task_files() if f.name == "pypi_mutations.jsonl"]
    return tasks_file.parent / "releases" / "pypi_releases.jsonl"


def _seed() -> int:
    return int(os.environ.get("DOCKYARD_SWE_SAMPLE_SEED") or random.SystemRandom().randrange(10**6))


def _report() -> dict:
    (tasks_file,) = [f for f in shipped_task_files() if f.name == "pypi_mutations.jsonl"]
    return json.loads(tasks_file.with_suffix(".validate.json").read_text())


def test_committed_report_covers_every_shipped_instance_and_all_are_valid():
    tasks = load_shipped_tasks()
    rep = _report()
    assert len(tasks) >= 200
    assert len({t["source"]["package"] for t in tasks}) >= 8
    ids = [t["instance_id"] for t in tasks]
    assert len(set(ids)) == len(ids)
    assert sorted(r["instance_id"] for r in rep["rows"]) == sorted(ids), (
        "stale report: rerun scripts/build_swe_tasks.sh"
    )
    assert rep["instances"] == rep["valid"] == len(tasks)
    for r in rep["rows"]:
        assert r["valid"], r
        assert r["gold"]["resolved"], r
        assert not r["empty"]["resolved"], r
    for t in tasks:  # (test_swe_loader checks every library has its environment spec)
        for node in t["FAIL_TO_PASS"]:  # the issue names each failing test
            assert node in t["problem_statement"], (t["instance_id"], node)


def _sample(tasks: list[dict], seed: int) -> list[dict]:
    by_lib: dict[str, list[dict]] = defaultdict(list)
    for t in tasks:
        by_lib[t["repo"]].append(t)
    rng = random.Random(seed)
    libs = rng.sample(sorted(by_lib), min(SAMPLE_LIBRARIES, len(by_lib)))
    return [rng.choice(by_lib[lib]) for lib in libs]


def test_a_random_sample_validates_in_the_real_sandbox(sandbox_service):
    seed = _seed()
    sample = _sample(load_shipped_tasks(), seed)
    ids = [t["instance_id"] for t in sample]
    print(f"DOCKYARD_SWE_SAMPLE_SEED={seed}: {ids}")
    assert len({t["repo"] for t in sample}) == len(sample) >= 6

    async def go():
        async with sandbox_service.async_client() as client:
            return await validate(client, sample, concurrency=4)

    rows = asyncio.run(go())
    bad = [(r["instance_id"], r["reason"]) for r in rows if not r["valid"]]
    assert not bad, f"DOCKYARD_SWE_SAMPLE_SEED={seed}: {bad}"
    for r in rows:  # both patches really ran: the gold one passed, the empty one failed
        assert (r["gold"]["verdict"], r["empty"]["verdict"]) == ("passed", "failed"), r


@pytest.mark.parametrize("seed", [0, 1])
def test_the_sample_is_one_instance_from_each_of_eight_libraries(seed):
    tasks = load_shipped_tasks()
    a, b = _sample(tasks, seed), _sample(tasks, seed)
    assert a == b  # a printed seed reproduces the sample
    assert len({t["repo"] for t in a}) == len(a) == SAMPLE_LIBRARIES


def test_release_pairs_load_as_swebench_records_with_a_complete_report():
    """The second set goes through the SWE-bench loader: real fixes, not mutations."""
    path = _releases_file()
    tasks = load_swebench_jsonl(path)
    rep = json.loads(path.with_suffix(".validate.json").read_text())
    assert len(tasks) >= 10
    assert sorted(r["instance_id"] for r in rep["rows"]) == sorted(t["instance_id"] for t in tasks)
    assert rep["instances"] == rep["valid"] == len(tasks)
    for t in tasks:
        assert t["patch"].startswith("diff --git a/"), t["instance_id"]
        assert t["test_patch"].startswith("diff --git a/"), t["instance_id"]
        assert "mutation" not in t
        assert t["repo_tarball"]
        assert "### What the maintainers wrote" in t["problem_statement"]


def test_a_random_sample_of_release_pairs_validates_in_the_real_sandbox(sandbox_service):
    seed = _seed()
    sample = random.Random(seed).sample(load_swebench_jsonl(_releases_file()), SAMPLE_RELEASES)
    print(f"DOCKYARD_SWE_SAMPLE_SEED={seed}: {[t['instance_id'] for t in sample]}")

    async def go():
        async with sandbox_service.async_client() as client:
            return await validate(client, sample, concurrency=4)

    rows = asyncio.run(go())
    bad = [(r["instance_id"], r["reason"]) for r in rows if not r["valid"]]
    assert not bad, f"DOCKYARD_SWE_SAMPLE_SEED={seed}: {bad}"
