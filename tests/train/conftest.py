"""Fixtures of the judge tests (test_judge.py, test_online_dpo.py, test_rlaif.py): a tiny LLM
judge trained here, once per session, on pairwise judgments of the quickstart's task labelled
by its verifier (measured: 150 SFT steps of 32, ~65 s on one core; on held-out specs it names
the correct expression in both orders for 27 of 32 pairs, the other 5 tie, none wrong), and
the tiny starting policy the judged drivers train. Both are SFT'd on ``SFT_THREADS`` torch
threads whatever the machine or the tests before them: training is not bit-equal across thread
counts, and these tiny models' greedy answers move a lot with their weights (SFT'd on two
threads the start policy answers 0.53 of the held-out specs correctly instead of 0.13-0.16, and
the drivers' tests, written against the latter, failed when an earlier test had left the
process on two)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TEMPLATE = "{prompt}\nA: {response_a}\nB: {response_b}\n{question}"
QUESTION = "Which is correct?"
SFT_THREADS = 1  # the figures in the docstrings were measured on one (and one is any machine's)


@contextlib.contextmanager
def _sft_threads() -> Iterator[None]:
    """torch's intra-op pool at :data:`SFT_THREADS` for the block (restored after)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(SFT_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def judge_template() -> tuple[str, dict[str, str]]:
    """The trained judge's template and its own field (``{question}``)."""
    return TEMPLATE, {"question": QUESTION}


@pytest.fixture(scope="session")
def sft_worker() -> Any:
    """``(model, lr) -> TorchPolicyWorker`` in this process, for the fixtures' SFT."""
    return _worker


@pytest.fixture(scope="session")
def sft_threads() -> Any:
    """The context manager the fixtures' SFT runs in (torch on :data:`SFT_THREADS` threads)."""
    return _sft_threads


def _worker(model: Path, lr: float) -> Any:
    from dockyard.torch.worker import TorchPolicyWorker

    return TorchPolicyWorker({"model_name": str(model), "precision": "float32", "train_micro_batch_size": 64,
                              "logprob_batch_size": 64, "reference_policy": False,
                              "optimizer": {"lr": lr, "weight_decay": 0.0}})  # fmt: skip


def judgments(tasks: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """SFT examples of the judge: a correct expression against a slip, in a random order, and
    the verdict naming the correct one (the task's verifier agrees: asserted)."""
    from dockyard.envs.expression import BUGGY, GOOD, is_correct_locally, prompt_text

    rng, out = random.Random(seed), []
    for _ in range(n):
        t = rng.choice(tasks)
        good = rng.choice(GOOD[t["kind"]]).format(n=t["size"])
        bad = rng.choice(BUGGY[t["kind"]]).format(n=t["size"])
        assert is_correct_locally(t, good)
        assert not is_correct_locally(t, bad)
        a, b, v = (good, bad, "A") if rng.random() < 0.5 else (bad, good, "B")
        text = TEMPLATE.format(prompt=prompt_text(t), response_a=a, response_b=b, question=QUESTION)
        out.append({"messages": [{"role": "user", "content": text},
                                 {"role": "assistant", "content": f"VERDICT: {v}"}]})  # fmt: skip
    return out


@pytest.fixture(scope="session")
def trained_judge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny judge (hidden 64, 2 layers) SFT'd on 150 × 32 verifier-labelled judgments."""
    pytest.importorskip("torch")
    from transformers import AutoTokenizer

    from dockyard.envs.expression import load_tasks
    from dockyard.torch.testing import build_tiny_model
    from dockyard.train.algorithms.sft import sft

    root = tmp_path_factory.mktemp("judge")
    model = build_tiny_model(
        root / "init", hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, seed=1
    )
    examples = judgments(load_tasks("train"), 4000, seed=0)
    with _sft_threads():
        sft(_worker(model, 3e-3), AutoTokenizer.from_pretrained(str(model)), examples,
            steps=150, batch_size=32, seed=0, output_dir=root / "judge")  # fmt: skip
    return root / "judge"


@pytest.fixture(scope="session")
def start_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The starting policy of the judged drivers' learning tests (online DPO, RLAIF): a tiny
    policy SFT'd 250 steps on the quickstart's demonstrations (60% slips): 16% of its greedy
    answers to the held-out specs are correct (60 steps: none, and its malformed
    answers are nothing the judge was trained on, whose verdicts are then noise)."""
    pytest.importorskip("torch")
    from transformers import AutoTokenizer

    from dockyard.envs.expression import demonstrations, load_tasks
    from dockyard.torch.testing import build_tiny_model
    from dockyard.train.algorithms.sft import sft

    root = tmp_path_factory.mktemp("policy")
    model = build_tiny_model(
        root / "init", hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1
    )
    demos = demonstrations(load_tasks("train"), 1024, buggy_fraction=0.6, seed=0)
    with _sft_threads():
        sft(_worker(model, 3e-3), AutoTokenizer.from_pretrained(str(model)), demos,
            steps=250, batch_size=32, seed=0, output_dir=root / "sft")  # fmt: skip
    return root / "sft"
