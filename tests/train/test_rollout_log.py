"""The rollout log's writer: one Parquet file per step that pandas reads back as written, the
turns and tool calls recovered from the token layout, outliers logged beside a sampled
fraction, resume/rewind keeping one log, every text bounded. (The log of a real run is
checked by tests/integration/test_viewer_browser.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dockyard.core.config import RolloutLogConfig
from dockyard.core.experience import Group, Trajectory
from dockyard.train.rollouts import RolloutLog
from dockyard.train.rollouts.record import bounded, spans


@pytest.fixture(scope="module")
def tokenizer() -> Path:
    from dockyard.torch.testing import build_tokenizer

    return build_tokenizer()


def _encode(tokenizer: Path, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer / "tokenizer.json")).encode(text).ids


def _traj(tok: Path, uid: str, parts: list[tuple[str, str]], reward: float, **kw) -> Trajectory:
    """A trajectory of ``(role, text)`` parts (``assistant`` ones are the policy's tokens)."""
    ids, mask = [], []
    for role, text in parts:
        piece = _encode(tok, text)
        ids += piece
        mask += [role == "assistant"] * len(piece)
    m = np.array(mask)
    return Trajectory(
        prompt_id=uid,
        token_ids=np.array(ids, dtype=np.int64),
        policy_mask=m,
        gen_logprobs=np.where(m, -0.5, 0.0).astype(np.float32),
        policy_versions=np.where(m, 3, -1).astype(np.int32),
        rewards={"reward/tests": reward},
        **kw,
    )


def _log(tmp: Path, tok: Path, start: int = 0, **cfg) -> RolloutLog:
    return RolloutLog(
        RolloutLogConfig(**cfg), tmp, str(tok), seed=0, env="demo", initial_step=start
    )


def _groups(tok: Path, n: int = 4, g: int = 2) -> list[Group]:
    return [
        Group(
            f"u{i}",
            [
                _traj(tok, f"u{i}", [("prompt", "Q"), ("assistant", "A")], float(i + j))
                for j in range(g)
            ],
            metadata={"gen_s": 0.5},
        )
        for i in range(n)
    ]


def test_a_step_round_trips_through_pandas_with_turns_and_tool_calls(tmp_path, tokenizer) -> None:
    call = '<tool_call>{"name": "check", "arguments": {"expression": "n*2"}}</tool_call>'
    t = _traj(
        tokenizer,
        "u0",
        [("prompt", "write n times two"), ("assistant", "try " + call),
         ("observation", "ok"), ("assistant", "<tool_call>{bad json</tool_call>")],
        1.0,
        finish_reason="stop",
        metadata={"task_id": "expr-7", "verdict": "passed", "stdout": "x" * 100, "turns": 2,
                  "tests_tampered": True, "patch": "--- a/f\n+++ b/f\n", "files": {"out.txt": "hi"}},
    )  # fmt: skip
    log = _log(tmp_path, tokenizer, max_text_chars=40)
    adv = np.zeros((1, len(t)), np.float32)
    adv[0, t.policy_mask] = 0.25
    path = log.write_step(5, [Group("u0", [t], metadata={"gen_s": 1.5})], adv)
    assert path == tmp_path / "rollouts" / "step_000005.parquet"
    df = pd.read_parquet(tmp_path / "rollouts")  # the folder is one table
    assert len(df) == 1
    row = df.iloc[0]
    assert (row.step, row.task_id, row.env, row.verdict) == (5, "expr-7", "demo", "passed")
    assert row.staleness == 5 - 1 - 3
    assert row.advantage == pytest.approx(0.25)
    assert list(row["flags"]) == ["tests_tampered"]
    assert "flag" in row.logged_because
    assert [x["role"] for x in row.turns] == ["prompt", "assistant", "observation", "assistant"]
    for x in row.turns:  # each turn's text is its tokens', bounded
        assert x["text"] == bounded("".join(row.token_texts[x["start"] : x["end"]]), 40)
    assert "chars cut" in row.turns[1]["text"]
    calls = list(row.tool_calls)
    assert (calls[0]["name"], calls[0]["valid"]) == ("check", True)
    assert json.loads(calls[0]["arguments"]) == {"expression": "n*2"}
    assert (calls[1]["turn"], calls[1]["valid"]) == (1, False)
    assert calls[1]["error"].startswith("json: tool call is not valid JSON")
    assert "chars cut" in row.verifier_stdout
    assert len(row.verifier_stdout) < 80
    assert row["diff"].startswith("--- a/f")
    assert dict(row.files) == {"out.txt": "hi"}
    assert list(row.policy_mask) == t.policy_mask.tolist()
    assert row.trainer_logprobs is None


def test_spans_follow_the_policy_mask() -> None:
    m = np.array([0, 0, 1, 1, 0, 1], dtype=bool)
    assert spans(m) == [("prompt", 0, 2), ("assistant", 2, 4), ("observation", 4, 5),
                        ("assistant", 5, 6)]  # fmt: skip
    assert bounded("abcdefghij", 4).startswith("ab\n[... 6 chars cut ...]\nij")


def test_a_fraction_is_sampled_and_every_outlier_kept(tmp_path, tokenizer) -> None:
    groups = _groups(tokenizer, n=8)
    groups[5].trajectories[0].infra_error = True
    groups[6].trajectories[1].finish_reason = "length"
    log = _log(tmp_path, tokenizer, sample_fraction=0.0)
    df = pd.read_parquet(log.write_step(1, groups))
    got = {(r.group, r.sample): sorted(r.logged_because) for r in df.itertuples()}
    # rewards are i + j: the lowest is group 0 sample 0, the highest group 7 sample 1
    assert got == {(0, 0): ["reward_min"], (7, 1): ["reward_max"], (5, 0): ["infra_error"],
                   (6, 1): ["truncated"]}  # fmt: skip
    half = _log(tmp_path, tokenizer, sample_fraction=0.5).select(2, groups)
    sampled = {k[0] for k, why in half.items() if "sampled" in why}
    assert 0 < len(sampled) < 8  # whole groups: both samples of each sampled group
    assert all((g, s) in half for g in sampled for s in (0, 1))


def test_resume_and_rewind_keep_one_log(tmp_path, tokenizer) -> None:
    log = _log(tmp_path, tokenizer)
    for step in (1, 2, 3):
        log.write_step(step, _groups(tokenizer))
    files = lambda: sorted(p.name for p in (tmp_path / "rollouts").iterdir())  # noqa: E731
    log.rewind(2)  # a rewound run redoes step 3
    assert files() == ["step_000001.parquet", "step_000002.parquet"]
    log.write_step(3, _groups(tokenizer))
    (tmp_path / "rollouts" / "step_000004.parquet.tmp").write_text("half a file")
    _log(tmp_path, tokenizer, start=3)  # resumed from step 3: the crash's half file goes
    assert files() == ["step_000001.parquet", "step_000002.parquet", "step_000003.parquet"]
    assert sorted(pd.read_parquet(tmp_path / "rollouts").step.unique()) == [1, 2, 3]
    _log(tmp_path, tokenizer)  # a fresh run in the same folder starts a new log
    assert files() == []
