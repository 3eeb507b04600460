"""Math environments: extraction, math-verify under a timeout, multiple choice, data."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from dockyard.envs.math import (
    ArithmeticGenerator,
    MathEnvironment,
    MathVerifier,
    MultipleChoiceEnvironment,
    extract_answer,
    extract_choice,
    load_math_jsonl,
)
from dockyard.envs.math.verify import _check
from dockyard.envs.rewards import CORRECT, FORMAT, OVERLONG, RewardConfig


@pytest.mark.parametrize(
    ("text", "answer", "source"),
    [
        ("so \\boxed{\\frac{1}{2}} and done", "\\frac{1}{2}", "boxed"),
        ("first \\boxed{1} then \\boxed{{2}+1}", "{2}+1", "boxed"),
        ("unbalanced \\boxed{3", "3", "last_number"),
        ("work...\nAnswer: 42.\n", "42", "answer_line"),
        ("**Final answer:** $x^2$", "x^2", "answer_line"),
        ("it is 3, no wait, -1,000 or 7/8", "7/8", "last_number"),
        ("no numbers at all", None, None),
    ],
)
def test_extract_answer(text, answer, source):
    assert extract_answer(text) == (answer, source)


def test_extract_choice():
    assert extract_choice("I think... Answer: (c)") == "C"
    assert extract_choice("Answer: B\nActually the answer is D") == "D"
    assert extract_choice("\\boxed{A}") == "A"
    assert extract_choice("Answer: Z", letters="ABCD") is None
    assert extract_choice("no idea") is None


def _score(env, task, response):
    return asyncio.run(env.score(task, response))


def test_math_env_rewards_and_format():
    env = MathEnvironment(reward=RewardConfig(format_weight=0.1))
    task = {"id": "t", "problem": "1/2?", "answer": "\\frac{1}{2}"}
    r = _score(env, task, "Thus \\boxed{0.5}")
    assert r.rewards == {CORRECT: 1.0, FORMAT: 0.1}
    assert r.done
    assert not r.infra_error
    r = _score(env, task, "I get 0.5")  # right, but not in the requested form
    assert r.rewards == {CORRECT: 1.0, FORMAT: 0.0}
    r = _score(env, task, "\\boxed{0.4}")
    assert r.rewards[CORRECT] == 0.0
    assert r.metadata["extracted"] == "0.4"
    assert env.prompt(task)[-1] == {"role": "user", "content": "1/2?"}


def test_math_env_overlong_shaping():
    env = MathEnvironment(reward=RewardConfig(max_response_tokens=100, overlong_cache_tokens=50),
                          count_tokens=lambda s: len(s.split()))  # fmt: skip
    task = {"problem": "?", "answer": "7"}
    assert _score(env, task, "\\boxed{7}").rewards[OVERLONG] == 0.0
    assert _score(env, task, "w " * 75 + "\\boxed{7}").rewards[OVERLONG] == pytest.approx(-26 / 50)
    assert _score(env, task, "w " * 200 + "\\boxed{7}").rewards[OVERLONG] == -1.0


def _hang(gold: str, pred: str) -> bool:
    """A checker that never finishes when gold == pred."""
    while gold == pred:
        time.sleep(0.05)
    return True


def test_verifier_timeout_main_thread_and_worker_thread():
    v = MathVerifier(timeout_s=1)
    assert v.check("2", "2").correct
    assert not v.check("2", "3").correct
    # a pathological power tower: sympy would run far past the budget
    huge = "9^{9^{9^{9^{9}}}}"
    t0 = time.monotonic()
    verdict = v.check(huge, "9^{9^{9^{9^{9}}}} + 1")
    assert time.monotonic() - t0 < 15
    assert not verdict.correct

    out = {}
    slow = MathVerifier(timeout_s=1, check_fn=_hang)

    def worker():  # off the main thread SIGALRM is unavailable: the process-pool path runs
        out["ok"] = v.check("\\frac{1}{2}", "0.5")
        out["bad"] = v.check("1", "2")
        t0 = time.monotonic()
        out["huge"] = v.check(huge, "9^{9^{9^{9^{9}}}} + 1")
        out["huge_s"] = time.monotonic() - t0
        t0 = time.monotonic()
        out["hang"] = slow.check("1", "1")  # a checker that never returns: its process is killed
        out["hang_s"] = time.monotonic() - t0
        out["after"] = slow.check("1", "2")  # ...and a fresh pool replaced it

    th = threading.Thread(target=worker)
    th.start()
    th.join(180)
    assert out["ok"].correct
    assert not out["bad"].correct
    assert not out["huge"].correct
    assert out["huge_s"] < 15
    assert out["hang"].timed_out
    assert out["hang_s"] < 10
    assert out["after"].correct  # _hang returns True at once for a mismatched pair
    main_thread = slow.check("1", "1")  # main thread: SIGALRM path for custom checkers
    assert main_thread.timed_out
    v.close()
    slow.close()


def test_arithmetic_generator_is_seeded_and_correct():
    gen = ArithmeticGenerator(seed=3, levels=(1, 2, 3, 4, 5))
    a, b = gen.tasks(25), ArithmeticGenerator(seed=3, levels=(1, 2, 3, 4, 5)).tasks(25)
    assert a == b
    assert a != ArithmeticGenerator(seed=4, levels=(1, 2, 3, 4, 5)).tasks(25)
    for t in a:
        expr = (
            t["problem"]
            .removeprefix("Compute ")
            .removesuffix(".")
            .replace("×", "*")
            .replace("÷", "/")
        )
        assert eval(expr) == int(t["answer"])
    assert {t["difficulty"] for t in a} == {1, 2, 3, 4, 5}
    with pytest.raises(ValueError, match=r"1\.\.5"):
        ArithmeticGenerator(levels=(0,))


def test_arithmetic_tasks_score_through_the_env():
    env = MathEnvironment()
    for t in ArithmeticGenerator(seed=1, levels=(3, 4)).tasks(6):
        assert _score(env, t, f"... \\boxed{{{t['answer']}}}").rewards[CORRECT] == 1.0
        assert _score(env, t, f"\\boxed{{{int(t['answer']) + 1}}}").rewards[CORRECT] == 0.0


def test_jsonl_loader(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(
        json.dumps({"problem": "2+2", "answer": 4})
        + "\n\n"
        + json.dumps({"problem": "x", "answer": "y", "id": "k"})
        + "\n"
    )
    recs = load_math_jsonl(p)
    assert recs[0] == {"problem": "2+2", "answer": "4", "id": "m-1"}
    assert recs[1]["id"] == "k"
    p.write_text(json.dumps({"question": "2+2", "answer": 4}) + "\n")
    with pytest.raises(ValueError, match=r"m.jsonl:1: missing key 'problem'"):
        load_math_jsonl(p)


def test_multiple_choice_env():
    env = MultipleChoiceEnvironment(reward=RewardConfig(format_weight=0.2))
    task = {
        "id": "q",
        "question": "Capital of France?",
        "choices": ["Rome", "Paris", "Oslo"],
        "answer": "B",
    }
    assert "B. Paris" in env.prompt(task)[-1]["content"]
    assert _score(env, task, "Answer: B").rewards == {CORRECT: 1.0, FORMAT: 0.2}
    assert _score(env, task, "Answer: A").rewards == {CORRECT: 0.0, FORMAT: 0.2}
    assert _score(env, task, "Paris!").rewards == {CORRECT: 0.0, FORMAT: 0.0}
    with pytest.raises(ValueError, match="not one of ABC"):
        _score(env, {**task, "answer": "D"}, "Answer: D")


def test_plain_numbers_are_compared_without_sympy(monkeypatch):
    """Two plain decimals get math-verify's verdict without it (it costs 20-30 ms a check);
    anything else still goes through it."""
    import math_verify

    calls = []
    real = math_verify.verify
    monkeypatch.setattr(math_verify, "verify", lambda *a, **k: calls.append(a) or real(*a, **k))
    v = MathVerifier()
    assert v.check("355", " 355.0").correct
    assert not v.check("355", "356").correct
    assert v.check("-0.5", "-0.50").correct
    assert not v.check("0.5", "-0.5").correct
    assert calls == []
    assert v.check("1/2", "0.5").correct
    assert calls
    for gold, pred in [("355", "355.0"), ("-0.5", "-0.50"), ("355", "356"), ("0.5", "-0.5")]:
        assert v.check(gold, pred).correct == _check(gold, pred, 5)  # the same verdict
