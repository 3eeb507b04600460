"""The HLE environment and benchmark: HLE's public field layout read from local files, exact
match / multiple choice graded here, free-form answers through the judge seam (a failed judgment
masked, never a 0 or 1). The judge itself (a real engine) is exercised in
tests/train/test_eval_judged.py; here a plain async function stands in for it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from dockyard.envs.benchmarks import LayoutError, load_benchmark
from dockyard.envs.hle import HleEnvironment, hle_dataset
from dockyard.envs.hle.data import fixture_path, hle_tasks, match_kind
from dockyard.envs.hle.env import final_answer, normalise
from dockyard.envs.judging import NoJudgeError
from dockyard.envs.registry import get_env, needs_judge


def _records() -> list[dict]:
    return [json.loads(x) for x in fixture_path().read_text().splitlines() if x.strip()]


def test_the_fixture_set_has_hles_fields_and_every_kind() -> None:
    rows = _records()
    fields = {"id", "question", "image", "image_preview", "answer", "answer_type",
              "author_name", "rationale", "rationale_image", "raw_subject", "category", "canary"}  # fmt: skip
    assert all(set(r) == fields for r in rows)
    tasks, skipped = hle_tasks(rows)
    assert skipped == 1
    assert len(tasks) == len(rows) - 1
    kinds = [t["match"] for t in tasks]
    assert kinds.count("choice") == 4
    assert kinds.count("judge") == 3
    assert kinds.count("exact") == 5


def test_the_dataset_splits_by_id_and_covers_every_task() -> None:
    train, val = hle_dataset("train"), hle_dataset("val")
    assert {t["id"] for t in train}.isdisjoint({t["id"] for t in val})
    assert len(train) + len(val) == 12


def test_the_benchmark_reads_jsonl_and_parquet(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = _records()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "test-00000-of-00001.parquet")
    from_parquet = load_benchmark("hle", tmp_path)
    assert from_parquet == load_benchmark("hle", fixture_path())
    assert len(from_parquet) == 12
    assert from_parquet[5]["answer"] == "B"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "question": "q"}) + "\n")
    with pytest.raises(LayoutError, match="answer_type"):
        load_benchmark("hle", bad)


def test_match_kind_and_answer_extraction() -> None:
    assert match_kind("multipleChoice", "C") == "choice"
    assert match_kind("exactMatch", "42") == "exact"
    assert match_kind("exactMatch", "x" * 41) == "judge"
    with pytest.raises(ValueError, match="answer_type"):
        match_kind("freeForm", "x")
    text = "Explanation: because.\nAnswer: $1024$.\nConfidence: 80%"
    assert final_answer(text) == ("$1024$.", "answer_line")
    assert normalise("$1024$.") == "1024"
    assert final_answer("so \\boxed{7}") == ("7", "boxed")
    assert final_answer("no idea") == (None, None)


class Judge:
    """Stands in for the runtime's JudgeFn: records what it was asked, answers a fixed score."""

    def __init__(self, score: float | None) -> None:
        self.score, self.asked = score, []

    async def __call__(self, prompt: str, response: str) -> float | None:
        self.asked.append((prompt, response))
        return self.score


def _task(i: int) -> dict:
    return hle_tasks(_records())[0][i]


def _score(env: HleEnvironment, task: dict, response: str):
    return asyncio.run(env.score(task, response))


def test_exact_and_choice_answers_are_graded_without_the_judge() -> None:
    judge = Judge(1.0)
    env = HleEnvironment(judge=judge)
    two_ten = _task(4)  # answer 1024
    assert (
        _score(env, two_ten, "Explanation: x\nAnswer: 1024\nConfidence: 90%").rewards[
            "reward/correct"
        ]
        == 1.0
    )
    assert _score(env, two_ten, "Answer: 2^{10}").rewards["reward/correct"] == 1.0  # math-verify
    assert _score(env, two_ten, "Answer: 1000").rewards["reward/correct"] == 0.0
    assert _score(env, _task(3), "Answer: br").rewards["reward/correct"] == 1.0  # case folded
    heapsort = _task(5)
    assert _score(env, heapsort, "Answer: (B) Heapsort").rewards["reward/correct"] == 1.0
    r = _score(env, heapsort, "Answer: A. Quicksort")
    assert r.rewards["reward/correct"] == 0.0
    assert r.metadata["extracted"] == "A"
    assert judge.asked == []


def test_free_form_answers_go_to_the_judge_and_a_failure_is_masked() -> None:
    task = _task(9)
    assert task["match"] == "judge"
    yes, no, broken = Judge(0.9), Judge(0.1), Judge(None)
    r = _score(HleEnvironment(judge=yes), task, "Answer: A must be invertible")
    assert r.rewards["reward/correct"] == 1.0
    assert r.metadata["judge_score"] == 0.9
    prompt, response = yes.asked[0]
    assert task["answer"] in prompt
    assert task["question"] in prompt
    assert response == "A must be invertible"
    assert _score(HleEnvironment(judge=no), task, "Answer: A is 2x2").rewards == {
        "reward/correct": 0.0, "reward/format": 0.0}  # fmt: skip
    r = _score(HleEnvironment(judge=broken), task, "Answer: A must be invertible")
    assert r.infra_error
    assert r.rewards == {}
    assert r.metadata["judge_failed"] is True
    # no final answer at all: a verdict (0), nobody asked
    r = _score(HleEnvironment(judge=broken), task, "I am not sure.")
    assert not r.infra_error
    assert r.rewards["reward/correct"] == 0.0
    assert len(broken.asked) == 1  # only the earlier answer was judged


def test_a_judge_is_required_unless_turned_off() -> None:
    assert needs_judge("hle")
    assert get_env("hle").needs_judge
    with pytest.raises(NoJudgeError, match=r"judge\.mode: rubric"):
        HleEnvironment()
    env = HleEnvironment(use_judge=False)
    task = _task(9)
    r = _score(env, task, f"Answer: {task['answer']}")
    assert r.rewards["reward/correct"] == 1.0
    assert r.metadata["judge_fallback"] is True
