"""The LLM judge: strict parsing (every failure path), templates (a missing field fails at
construction), retries, masking and counting — on scripted replies, on a real vLLM engine (a
random tiny model: its replies never parse, the real masked path) and through a real
OpenAI-compatible server (vLLM's own, serving the judge trained in ``conftest.py``: its
pairwise verdicts parse; asked for a rubric score they do not)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dockyard.core.config import config_from_dict
from dockyard.train.judge import (
    Judge,
    OpenAIBackend,
    ParseError,
    check_template,
    parse_score,
    parse_verdict,
)


# --------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("text", "verdict"),
    [("VERDICT: A", "A"), ("B is shorter.\n\nVERDICT: B\n", "B"), ("  VERDICT: A  ", "A")],
)
def test_a_final_verdict_line_parses(text: str, verdict: str) -> None:
    assert parse_verdict(text) == verdict


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("   \n \n", "empty"),
        ("VERDICT: C", "not exactly"),
        ("verdict: A", "not exactly"),
        ("VERDICT:A", "not exactly"),
        ("VERDICT: A.", "not exactly"),
        ("**VERDICT: A**", "not exactly"),
        ("VERDICT: A or B", "not exactly"),
        ("The answer is A", "not exactly"),
        ("VERDICT: A\nbecause it is shorter", "before the last line"),
        ("VERDICT: A\nVERDICT: B", "before the last line"),
        ("SCORE: 3\nVERDICT: B", "before the last line"),
    ],
)
def test_anything_else_is_a_parse_failure(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_verdict(text)


def test_scores_parse_strictly_within_the_scale() -> None:
    assert parse_score("Clear and correct.\nSCORE: 7", 1, 10) == 7
    assert parse_score("SCORE: 1", 1, 10) == 1
    assert parse_score("SCORE: -2", -5, 5) == -2
    for bad in ("SCORE: 7/10", "SCORE: 7.5", "score: 7", "SCORE:7", "SCORE: seven", "7"):
        with pytest.raises(ParseError, match="not exactly"):
            parse_score(bad, 1, 10)
    for out in ("SCORE: 0", "SCORE: 11"):
        with pytest.raises(ParseError, match=r"outside \[1, 10\]"):
            parse_score(out, 1, 10)


# --------------------------------------------------------------------------- templates
class Scripted:
    """Replies from a list, in order, or a function of the request's text (an Exception in the list is raised: a transport error);
    records each request's temperature."""

    def __init__(self, replies: Any) -> None:
        self.replies = replies if callable(replies) else list(replies)
        self.temperatures: list[float] = []
        self.prompts: list[str] = []

    async def complete(
        self, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> str:
        self.temperatures.append(temperature)
        self.prompts.append(messages[0]["content"])
        reply = (
            self.replies(messages[0]["content"]) if callable(self.replies) else self.replies.pop(0)
        )
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, float):
            await asyncio.sleep(reply)
            return "VERDICT: A"
        return str(reply)


def test_asking_the_other_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match="rubric judge"):
        Judge(Scripted([])).scores([("p", "r")])
    with pytest.raises(ValueError, match="pairwise judge"):
        Judge(Scripted([]), mode="rubric").compare([("p", "a", "b")])


def test_a_template_field_nothing_fills_fails_at_construction() -> None:
    with pytest.raises(
        ValueError, match=r"field\(s\) criteria have no value.*judge\.template_fields"
    ):
        Judge(Scripted([]), template="{prompt} {response_a} {response_b} {criteria}")
    with pytest.raises(ValueError, match=r"must contain \{response_b\}"):
        Judge(Scripted([]), template="{prompt} {response_a}")
    with pytest.raises(ValueError, match=r"must contain \{response\}"):
        Judge(Scripted([]), mode="rubric", template="{prompt} {response_a}")
    with pytest.raises(ValueError, match="fills those itself"):
        Judge(Scripted([]), fields={"prompt": "x"})
    with pytest.raises(ValueError, match="names its fields"):
        check_template("{} {response_a} {response_b}", "pairwise", {}, "t")
    backend = Scripted(["VERDICT: A", "VERDICT: B"])
    judge = Judge(backend, template="{criteria}|{prompt}|{response_a}|{response_b}",
                  fields={"criteria": "shorter wins"})  # fmt: skip
    assert judge.compare([("p", "x", "y")])[0].preference == 1.0
    assert backend.prompts == ["shorter wins|p|x|y", "shorter wins|p|y|x"]  # both orders
    judge.close()


def test_the_config_section_builds_the_judge(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text(
        "Rate {response} for {prompt} ({score_min}-{score_max}), {tone}"
    )
    cfg = config_from_dict({"judge": {"mode": "rubric", "template_file": str(tmp_path / "t.txt"),
                                      "template_fields": {"tone": "strictly"}, "score_min": 0,
                                      "score_max": 5, "max_retries": 0}})  # fmt: skip
    backend = Scripted(["SCORE: 5", "SCORE: 6"])
    judge = Judge.from_config(cfg.judge, backend)
    assert judge.scores([("p", "r"), ("p", "s")]) == [5, None]
    assert backend.prompts[0] == "Rate r for p (0-5), strictly"
    assert judge.metrics()["judge/failed"] == 1
    judge.close()
    with pytest.raises(ValueError, match="score_min"):
        config_from_dict({"judge": {"score_min": 3, "score_max": 3}})
    missing = config_from_dict({"judge": {"template_file": str(tmp_path / "none.txt")}})
    with pytest.raises(FileNotFoundError, match=r"judge\.template_file"):
        Judge.from_config(missing.judge, backend)


# --------------------------------------------------------------------------- retries, masking
def test_retries_draw_fresh_samples_and_are_counted() -> None:
    backend = Scripted(["I think A", RuntimeError("connection reset"), "VERDICT: B"])
    judge = Judge(backend, both_orders=False, max_retries=2, temperature=0.0)
    assert judge.compare([("p", "x", "y")])[0].preference == 0.0
    assert backend.temperatures == [0.0, 1.0, 1.0]  # a retry is a fresh sample
    m = judge.metrics()
    assert (m["judge/requests"], m["judge/retries"]) == (3, 2)
    assert (m["judge/parse_failures"], m["judge/errors"], m["judge/failed"]) == (1, 1, 0)
    assert judge.metrics()["judge/requests"] == 0  # reset


def test_a_judgment_that_never_parses_is_masked_not_a_zero() -> None:
    # the (x, y) order always parses, the swapped one never
    judge = Judge(Scripted(lambda t: "VERDICT: A" if "[Response A]\nx" in t else "A, surely"),
                  max_retries=1)  # fmt: skip
    j = judge.compare([("p", "x", "y")])[0]
    assert j.preference is None  # the second order never parsed: the pair is masked
    assert j.verdicts == ("A", None)
    m = judge.metrics()
    assert (m["judge/failed"], m["judge/parse_failures"], m["judge/retries"]) == (1, 2, 1)


def test_orders_that_disagree_are_a_tie_and_counted() -> None:
    judge = Judge(Scripted(["VERDICT: A", "VERDICT: A"]))  # always the first position
    assert judge.compare([("p", "x", "y")])[0].preference == 0.5
    assert judge.metrics()["judge/position_disagreements"] == 1


def test_a_request_past_the_timeout_is_an_error() -> None:
    judge = Judge(Scripted([5.0, "VERDICT: B"]), both_orders=False, max_retries=1, timeout_s=0.2)
    assert judge.compare([("p", "x", "y")])[0].preference == 0.0
    m = judge.metrics()
    assert (m["judge/errors"], m["judge/retries"]) == (1, 1)
    judge.close()


def test_an_api_key_comes_from_the_named_variable(monkeypatch) -> None:
    monkeypatch.delenv("DOCKYARD_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match=r"DOCKYARD_TEST_KEY.*not set"):
        OpenAIBackend("http://127.0.0.1:1/v1", "m", api_key_env="DOCKYARD_TEST_KEY")
    monkeypatch.setenv("DOCKYARD_TEST_KEY", "s3cret")
    assert (
        OpenAIBackend("http://127.0.0.1:1/v1", "m", api_key_env="DOCKYARD_TEST_KEY").key == "s3cret"
    )


def test_an_unreachable_url_is_counted_as_errors_and_masked() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    judge = Judge(OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", timeout_s=5), max_retries=1)
    assert judge.compare([("p", "x", "y")])[0].preference is None
    m = judge.metrics()
    assert (m["judge/errors"], m["judge/failed"], m["judge/parse_failures"]) == (4, 2, 0)
    judge.close()


# --------------------------------------------------------------------------- a real engine
vllm_marks = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@pytest.fixture(scope="module")
def engine_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    """A judge on a random tiny model in a vLLM engine in this process (its loop: the judge's)."""
    pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    from dockyard.serve.engines.vllm_engine import VLLMEngine
    from dockyard.serve.testing import tiny_model_dir
    from dockyard.train.judge import EngineBackend

    model = tiny_model_dir(tmp_path_factory.mktemp("tiny") / "m")
    engine = VLLMEngine(str(model), dtype="float32", max_model_len=512, enforce_eager=True, seed=0)
    judge = Judge(EngineBackend([engine], AutoTokenizer.from_pretrained(str(model))),
                  max_retries=2, temperature=1.0, max_tokens=12)  # fmt: skip
    judge.run(engine.start())
    yield judge
    judge.run(engine.aclose())
    judge.close()


def with_vllm(test: Any) -> Any:
    for mark in vllm_marks:
        test = mark(test)
    return test


@with_vllm
def test_a_real_engine_that_cannot_judge_is_retried_masked_and_counted(engine_judge: Judge) -> None:
    out = engine_judge.compare([("list of size 3", "[0]*3", "[3]"), ("int of size 2", "2", "'2'")])
    m = engine_judge.metrics()
    assert [o.preference for o in out] == [None, None]
    # 2 pairs × 2 orders, each asked 1 + 2 times, none parsed
    assert m["judge/requests"] == 4 * 3
    assert m["judge/parse_failures"] == 12
    assert (m["judge/retries"], m["judge/failed"], m["judge/errors"]) == (8, 4, 0)


# --------------------------------------------------------------------------- an OpenAI URL
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def judge_server(trained_judge: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``) on
    the trained judge, with an API key; its base URL (``.../v1``)."""
    pytest.importorskip("vllm")
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(trained_judge),
           "--served-model-name", "judge", "--port", str(port), "--host", "127.0.0.1",
           "--dtype", "float32", "--max-model-len", "512", "--enforce-eager", "--max-num-seqs", "16",
           "--gpu-memory-utilization", "0.05", "--kv-cache-memory-bytes", str(64 << 20),
           "--api-key", "test-key-123"]  # fmt: skip
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM's server exited ({proc.returncode}): {log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM's server did not start in 300 s: {log.read_text()[-3000:]}")
                time.sleep(1)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@with_vllm
def test_an_openai_compatible_server_judges(
    judge_server: str, judge_template: Any, monkeypatch
) -> None:
    """The trained judge behind vLLM's server: pairwise verdicts parse and pick the correct
    expression; the key comes from the named variable (a wrong one: transport errors)."""
    template, fields = judge_template
    monkeypatch.setenv("DOCKYARD_JUDGE_KEY", "test-key-123")
    cfg = config_from_dict({"judge": {"backend": "openai", "base_url": judge_server, "model_name": "judge",
                                      "api_key_env": "DOCKYARD_JUDGE_KEY", "max_tokens": 16}})  # fmt: skip
    from dockyard.train.judge import backend_from_config

    judge = Judge(backend_from_config(cfg.judge), template=template, fields=fields, max_retries=1)
    items = [("list of size 7", "[0]*7", "[7]"), ("str of size 5", "str(5)", "'a'*5"),
             ("int of size 9", "9", "9+1"), ("tuple of size 4", "(0,)*4", "(0)*4")]  # fmt: skip
    prefs = [j.preference for j in judge.compare(items)]
    m = judge.metrics()
    assert m["judge/errors"] == 0
    assert m["judge/failed"] == 0, m
    assert sum(p is not None and (p > 0.5) == (i != 1) for i, p in enumerate(prefs)) >= 3, prefs
    judge.close()
    # a rubric asked of a pairwise judge: it answers "VERDICT: ...", never "SCORE: n"
    rubric = Judge(backend_from_config(cfg.judge), mode="rubric", max_retries=1)
    assert rubric.scores([("list of size 7", "[0]*7")]) == [None]
    m = rubric.metrics()
    assert (m["judge/parse_failures"], m["judge/failed"], m["judge/errors"]) == (2, 1, 0)
    rubric.close()
    monkeypatch.setenv("DOCKYARD_JUDGE_KEY", "wrong-key")
    wrong = Judge(backend_from_config(cfg.judge), template=template, fields=fields, max_retries=0,
                  both_orders=False)  # fmt: skip
    assert wrong.compare(items[:1])[0].preference is None
    assert wrong.metrics()["judge/errors"] == 1  # 401: a transport error, not a verdict
    wrong.close()
