"""`dockyard eval`: pass@k (the unbiased estimator) and maj@k against hand-computed values, the
summaries and breakdowns, both modes' plans, the pre-flight's errors, and the command end to
end on a tiny model with a real vLLM engine: a dockyard checkpoint and the Hugging Face folder
it came from, in one table, give the same samples."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dockyard.core.config import load_config
from dockyard.envs.benchmarks import load_benchmark
from dockyard.train.cli import main
from dockyard.train.eval.metrics import (
    maj_at_k,
    majority,
    normalize_answer,
    pass_at_k,
    summarize,
    task_metrics,
)
from dockyard.train.eval.plan import BENCH_ENV, model_label, plan

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "examples" / "configs"


# --------------------------------------------------------------------------- metrics
@pytest.mark.parametrize(
    ("n", "c", "k", "want"),
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3)
        (5, 2, 4, 1.0),  # n - c < k: some draw must hold a pass
        (5, 0, 3, 0.0),
        (5, 5, 1, 1.0),
        (10, 1, 10, 1.0),
        (200, 13, 100, 1 - math.comb(187, 100) / math.comb(200, 100)),
    ],
)
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int, want: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_pass_at_k_refuses_impossible_counts() -> None:
    for n, c, k in ((3, 4, 1), (3, 1, 4), (3, 1, 0)):
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(n, c, k)


def test_majority_vote_and_its_ties() -> None:
    answers = ["12", "7", "7", "12", "9"]
    correct = [True, False, False, True, False]
    assert [maj_at_k(answers, correct, k) for k in (1, 2, 3, 4, 5)] == [1.0, 1.0, 0.0, 0.0, 0.0]
    # k=2: 12 and 7 tie at one vote: 12 reached it first; k=4: tie at two, 7 got there first
    assert majority(["b", "a", "a", "b"]) == 1
    assert majority(["b", "a"]) == 0
    assert majority([None, None, "3"]) == 2  # no answer: no vote
    assert majority([None, ""]) is None
    assert maj_at_k([None, None], [False, False], 2) == 0.0
    assert normalize_answer(" 3 / 4 .") == normalize_answer("$3/4$") == "3/4"
    assert majority(["1/2", "2", " 1/2", "2 "]) == 0  # normalised before counting


def test_summary_overall_and_by_subject() -> None:
    def rec(subject: str, correct: list[bool], answers: list[Any], infra: int = 0) -> dict:
        samples = [
            {"correct": c, "answer": a, "infra_error": False}
            for c, a in zip(correct, answers, strict=True)
        ] + [{"correct": False, "answer": None, "infra_error": True}] * infra
        return {"group": {"subject": subject}, "samples": samples}

    records = [
        rec("alg", [True, False, False, False], ["1", "2", "2", "3"]),  # pass@1 .25, maj@4 0
        rec("alg", [True, True, False, False], ["5", "5", "6", "7"]),  # pass@1 .5, maj@4 1
        rec("geo", [False, False, False], ["9", "8", "8"], infra=1),  # 3 scored: no pass@4 / maj@4
    ]
    s = summarize(records, [1, 4], [4], ["subject"])
    o = s["overall"]
    assert o["pass@1"] == pytest.approx((0.25 + 0.5 + 0.0) / 3)
    assert o["pass@4"] == pytest.approx(1.0)  # the two tasks with four scored samples
    assert o["maj@4"] == pytest.approx(0.5)
    assert (o["tasks"], o["infra_errors"], o["tasks_short"]) == (3.0, 1.0, 1.0)
    assert s["by"]["subject"]["alg"]["pass@1"] == pytest.approx(0.375)
    assert s["by"]["subject"]["geo"]["pass@1"] == 0.0
    assert math.isnan(s["by"]["subject"]["geo"]["maj@4"])
    assert task_metrics([True], ["x"], [1, 2], [1]) == {"pass@1": 1.0, "maj@1": 1.0}


# --------------------------------------------------------------------------- the two modes
def test_benchmark_mode_brings_its_verifier_and_keeps_the_configs() -> None:
    mmlu = plan(load_config(CONFIGS / "mmlu.yaml"))
    assert (mmlu.name, len(mmlu.tasks), mmlu.group_by) == ("mmlu", 4, ["subject"])
    assert list(mmlu.cfg.env) == [BENCH_ENV]
    assert (mmlu.cfg.env[BENCH_ENV].type, mmlu.cfg.env[BENCH_ENV].options) == (
        "mcq",
        {"strict": True},
    )
    assert mmlu.cfg.env_for_data() == BENCH_ENV
    assert mmlu.tasks[1]["answer"] == "C"  # the ground truth, on the task
    gpqa = plan(
        load_config(
            CONFIGS / "gpqa.yaml",
            [
                "env.mcq.timeout_s=7",
                "eval.group_by=[domain]",
                "+env.m={type: math}",
                "data.env_name=m",
            ],
        )
    )
    assert list(gpqa.cfg.env) == ["mcq"]  # the config's own entry of that kind
    assert gpqa.cfg.env["mcq"].timeout_s == 7
    assert gpqa.group_by == ["domain"]
    he = plan(load_config(CONFIGS / "eval.yaml"))
    assert (he.cfg.env[BENCH_ENV].type, len(he.tasks)) == ("code", 16)  # eval.max_tasks


def test_data_mode_is_grpos_validation_set() -> None:
    from dockyard.envs.expression import load_tasks

    p = plan(load_config(CONFIGS / "eval.yaml", ["eval.benchmark=null", "eval.max_tasks=null"]))
    assert p.tasks == load_tasks("val")
    assert p.cfg.env_for_data() == "expression"
    with pytest.raises(ValueError, match=r"eval\.group_by: no task has the key"):
        plan(load_config(CONFIGS / "eval.yaml", ["eval.benchmark=null", "eval.group_by=[subject]"]))


def test_bad_settings_are_one_line_errors_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(CONFIGS / "mmlu.yaml")

    def refused(*args: str) -> str:
        with pytest.raises(SystemExit) as e:
            main(["eval", "--config", cfg, *args])
        assert e.value.code == 2
        return capsys.readouterr().err

    assert "exceeds eval.num_samples (1): raise eval.num_samples" in refused("eval.pass_k=[1,4]")
    assert "the samples would all be the same" in refused("eval.num_samples=4")
    missing = refused(f"eval.path={tmp_path}/nope.jsonl")
    assert "nope.jsonl: no such file or folder (eval.path)" in missing
    (tmp_path / "wrong.jsonl").write_text('{"Question": "q"}\n')
    wrong = refused(f"eval.path={tmp_path}/wrong.jsonl")
    assert "lack question, choices, answer (it expects question, choices, answer" in wrong
    (tmp_path / "empty").mkdir()
    assert "neither a Hugging Face folder" in refused("--models", str(tmp_path / "empty"))
    assert f"eval.models ({tmp_path}/nope): no folder" in refused("--models", f"{tmp_path}/nope")
    assert "unknown benchmark 'mmlu3'" in refused("eval.benchmark=mmlu3")


# --------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def ray_session():
    from dockyard.train.runtime.cluster import init_ray, shutdown_ray

    init_ray(None)
    yield
    shutdown_ray()


@pytest.mark.slow
@pytest.mark.vllm
def test_dockyard_eval_a_checkpoint_and_its_model_in_one_table(
    tmp_path: Path, ray_session, capsys: pytest.CaptureFixture[str]
) -> None:
    from dockyard.torch.testing import build_tiny_model
    from dockyard.torch.worker import TorchPolicyWorker

    hf = build_tiny_model(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2)
    ckpt = tmp_path / "ckpt" / "step_3"  # a dockyard checkpoint of the same weights
    TorchPolicyWorker({"model_name": str(hf), "reference_policy": False}).save_checkpoint(
        str(ckpt / "policy")
    )
    (ckpt / "done").touch()
    out = tmp_path / "out"
    cfg = str(CONFIGS / "mmlu.yaml")
    args = [
        "eval",
        "--config",
        cfg,
        "--models",
        str(tmp_path / "ckpt"),
        str(hf),
        "--output",
        str(out),
    ]
    assert main([*args, "policy.generation.max_new_tokens=8"]) == 0
    printed = capsys.readouterr().out
    assert "mmlu: 4 tasks, 1 samples each at temperature 0.0" in printed
    assert "pass@1 by subject:" in printed
    results = json.loads((out / "results.json").read_text())
    labels = [model_label(str(tmp_path / "ckpt")), model_label(str(hf))]
    assert [m["label"] for m in results["models"]] == labels
    assert labels[0] != labels[1]
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 4
    a, b = samples[:4], samples[4:]
    # greedy, the same weights: the exported checkpoint answers as its model does, word for word
    assert [s["response"] for s in a] == [s["response"] for s in b]
    assert all(s["tokens"] > 0 for s in samples)
    tasks = plan(load_config(cfg)).tasks
    assert [s["gold"] for s in a] == [t["answer"] for t in tasks]  # the ground truth threaded
    assert [s["subject"] for s in a] == [t["subject"] for t in tasks]
    for m, part in zip(results["models"], (a, b), strict=True):
        s = m["summary"]
        assert s["overall"]["pass@1"] == sum(x["correct"] for x in part) / 4
        assert set(s["by"]["subject"]) == {t["subject"] for t in tasks}
    assert (out / "table.md").read_text().count("|") > 20
    assert (out / "plot.png").stat().st_size > 10_000
    assert (out / "models").is_dir()  # where the checkpoint was exported
    # every sample also in the rollout log's format, one file per model (dockyard view OUT)
    import pandas as pd

    logged = pd.read_parquet(out / "rollouts")
    assert sorted(logged.run_label.unique()) == sorted(labels)
    assert (logged.kind == "eval").all()
    for m, part in zip(results["models"], (a, b), strict=True):
        rows = logged[logged.run_label == m["label"]]
        assert len(rows) == 4
        for row, s in zip(rows.itertuples(), part, strict=True):
            assert s["response"] in row.turns[-1]["text"]  # the log keeps special tokens


@pytest.mark.slow
@pytest.mark.vllm
def test_dockyard_eval_the_harbor_benchmark(tmp_path: Path, ray_session, capsys) -> None:
    """The shipped Harbor tasks as a benchmark: agentic episodes in the real sandbox (provisioned
    environments, the held-out tests/test.sh), none masked, broken down by category."""
    from dockyard.torch.testing import build_tiny_model

    hf = build_tiny_model(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                          max_position_embeddings=4096)  # fmt: skip
    out = tmp_path / "out"
    args = ["eval", "--config", str(CONFIGS / "eval.yaml"), "--models", str(hf), "--output",
            str(out), "eval.benchmark=harbor", "eval.max_tasks=2", "eval.num_samples=1",
            "eval.pass_k=[1]", "policy.generation.max_new_tokens=16",
            "policy.max_total_sequence_length=4096", "policy.generation.vllm_cfg.max_model_len=4096"]  # fmt: skip
    assert main(args) == 0
    assert "harbor: 2 tasks, 1 samples each" in capsys.readouterr().out
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2
    assert not any(s["infra_error"] for s in samples), samples
    summary = json.loads((out / "results.json").read_text())["models"][0]["summary"]
    tasks = load_benchmark("harbor", None)[:2]
    assert set(summary["by"]["category"]) == {t["category"] for t in tasks}


def test_models_get_distinct_labels() -> None:
    from dockyard.train.eval import _labels

    assert _labels(["/runs/a/ckpt", "/runs/b/ckpt", "/runs/a/ckpt", "Qwen/Qwen2.5-0.5B"]) == [
        "a_ckpt",
        "b_ckpt",
        "a_ckpt-2",
        "Qwen_Qwen2.5-0.5B",
    ]
