"""The GRPO driver: synchronous and asynchronous GRPO through one loop.

Policy versions: the trainer at step ``s`` holds version ``s``; after its optimizer step it
pushes version ``s + 1`` to the engines. With ``A = grpo.async_grpo.max_trajectory_age_steps``
(0 when asynchrony is off) the collector may generate the groups for step ``t`` once the engines
serve version ``t − A``, and the buffer hands step ``s`` only groups whose oldest token has
version ≥ ``s − A``. A = 0 is exactly on-policy GRPO; A ≥ 1 overlaps generation with training.

    for step in range(start, max_num_steps):
        groups  = buffer.wait_sample(P, step)              # P complete groups, age ≤ A
                  (+ dynamic sampling: drop all-equal groups, draw more)
        batch   = build_batch(groups)                      # shaping, masks, advantages
        batch.prev_logprobs = trainer.get_logprobs(batch)  # (+ reference logprobs if β > 0)
        metrics = trainer.train_step(batch, loss_fn)       # version step -> step + 1
        collector.order(P, min_version=step + 1)           # work for step t = step + 1 + A
        checkpoint(step + 1)                               # every save_period steps
        push_weights(version=step + 1)                     # in-flight update, then the
        collector.set_version(step + 1)                    #   engines serve step + 1
        log(step + 1, metrics)

Faults: every step the driver replaces engines found dead — reported by the collector, or
found by the weight push, which skips a dead engine instead of waiting on it — with a restarted
actor holding the current weights (the dead engine's groups are regenerated under the same
uid), and restarts sandbox services that stopped answering (their samples came back
``infra_error``: masked). A trainer rank that dies (any trainer call, or the weight push,
raises ``TrainerLost`` as soon as Ray reports it) costs the whole fleet — its process group
cannot lose a member — so every rank is restarted, engines caught mid-sync are replaced, and the
run rewinds to its latest checkpoint (or its start) with a new collector and an empty buffer:
the abandoned steps are redone, their log lines rewritten, nothing of them is trained on
(``cluster.max_trainer_restarts`` times, then the run stops with the rank's error).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dockyard.train import checkpoint as ckpt
from dockyard.train.batching import (
    BatchOptions,
    build_batch,
    informative_groups,
    trainer_view,
)
from dockyard.train.logging import MetricsLogger, plot_rewards
from dockyard.train.metrics import (
    infra_report,
    mismatch_metrics,
    rollout_metrics,
    train_metrics,
)


@dataclass
class GRPOResult:
    """What a run leaves behind."""

    steps: int
    history: list[dict[str, float]] = field(default_factory=list)
    log_dir: str = ""
    plot: str | None = None
    val_start: float | None = None
    val_end: float | None = None


class _Timer:
    def __init__(self) -> None:
        self.t: dict[str, float] = {}

    def __call__(self, name: str) -> _Timer:
        self._name = name
        return self

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.t[f"time/{self._name}_s"] = (
            self.t.get(f"time/{self._name}_s", 0.0) + time.perf_counter() - self._t0
        )


def load_tasks(cfg: Any, split: str) -> list[dict[str, Any]]:
    """Training (``train``) or validation (``val``) tasks from ``data``."""
    from dockyard.train.data import read_jsonl
    from dockyard.train.environments import load_dataset

    path = cfg.data.train_path if split == "train" else cfg.data.val_path
    if path:
        return read_jsonl(path)
    if cfg.data.dataset_name:
        return load_dataset(cfg.data.dataset_name, split)
    if split == "val":
        return []
    raise ValueError("no training data: set data.dataset_name or data.train_path")


def train(
    cfg: Any,
    *,
    resume: bool = False,
    progress: bool = True,
    stack: Any = None,
    on_step: Any = None,
    val_samples: int = 4,
) -> GRPOResult:
    """Run GRPO per ``cfg`` (a ``MasterConfig``); see the module docstring.

    Args:
        resume: continue from the latest checkpoint in ``checkpointing.checkpoint_dir``.
        progress: show the progress bar.
        stack: a running :class:`~dockyard.train.runtime.stack.Stack` to reuse (else built).
        on_step: ``callable(step, stack)`` called after each step (tests inject faults here).
        val_samples: samples per validation task (the pass rate is their mean).
    """
    import ray

    from dockyard.core.rl import PolicyLoss
    from dockyard.train.runtime.stack import Stack, TrainerLost, needs_reference

    g = cfg.grpo
    P, A = g.num_prompts_per_step, g.async_grpo.age_bound()
    own_stack = stack is None
    stack = stack or Stack(cfg, cfg.logger.log_dir)
    tasks, val_tasks = load_tasks(cfg, "train"), load_tasks(cfg, "val")[: g.max_val_samples]
    collector = _new_collector(stack, cfg, tasks)
    loss_fn = PolicyLoss.from_config(cfg.loss_fn, norm_length=cfg.policy.generation.max_new_tokens)
    opts = BatchOptions.from_config(cfg)
    pad_id = 0
    need_ref = needs_reference(cfg)
    ckpt_root = Path(cfg.checkpointing.checkpoint_dir)
    history: list[dict[str, float]] = []
    start = 0

    # where a restarted trainer fleet rewinds to: this run's latest checkpoint, else its start
    restore: _RestorePoint
    if resume and (last := ckpt.latest_checkpoint(ckpt_root)) is not None:
        restore = _RestorePoint(last)
        history, start = _restore(stack, collector, restore)
    else:
        random.seed(g.seed)
        np.random.seed(g.seed % (2**32))
        ray.get(collector.order.remote(P * (A + 1), 0))  # fill the pipeline: steps 0..A
        restore = _RestorePoint(None, _driver_state(stack, collector, 0, []))

    ray.get(collector.start.remote())
    val_start = None
    if val_tasks and g.val_at_start and start == 0:
        val_start = _validate(collector, val_tasks, val_samples, cfg)["val/pass_rate"]
    log = MetricsLogger(cfg.logger, g.max_num_steps, start, cfg.model_dump(mode="json"), progress)
    if val_start is not None:
        log.write(f"validation before training: pass rate {100 * val_start:.1f}%")
    restarts, lost_trainer, step = 0, None, start
    try:
        while step < g.max_num_steps:
            try:
                if lost_trainer is not None:  # a rank died: restart the fleet, rewind to `restore`
                    log.write(
                        f"dockyard: {lost_trainer} at step {step + 1}: restarting every trainer "
                        f"rank (restart {restarts} of {cfg.cluster.max_trainer_restarts}, "
                        "cluster.max_trainer_restarts) and rewinding to "
                        + (f"step {restore.step}" if restore.folder else "the start")
                    )
                    collector, history, step = _recover(
                        stack, collector, cfg, tasks, restore, lost_trainer
                    )
                    log.rewind(step)
                    lost_trainer = None
                    continue
                timer, t_step = _Timer(), time.perf_counter()
                _heal(stack, collector, step)

                # 1. P complete groups no older than the bound (dynamic sampling draws more)
                with timer("wait_generation"):
                    groups, drawn = _sample(stack, collector, cfg, step)

                # 2. the batch, then logprobs under the weights being trained
                batch = build_batch(groups, opts, pad_id)
                with timer("logprobs"):
                    batch.prev_logprobs = stack.trainer_call("get_logprobs", trainer_view(batch))
                    if need_ref:
                        batch.ref_logprobs = stack.trainer_call(
                            "get_reference_logprobs", trainer_view(batch)
                        )

                # 3. one optimizer step: version step -> step + 1
                with timer("train"):
                    tm = stack.trainer_call("train_step", trainer_view(batch), loss_fn)

                # 4. order the work for step + 1 + A, then checkpoint (before the weights move on)
                ray.get(collector.order.remote(P, step + 1))  # for step + 1 + A: version ≥ step + 1
                metrics = {
                    **rollout_metrics(groups, step, A),
                    **mismatch_metrics(batch),
                    **train_metrics(tm),
                    "dynamic_sampling/groups_drawn": float(drawn),
                    "version": float(step + 1),
                }
                if cfg.checkpointing.enabled and (
                    (step + 1) % cfg.checkpointing.save_period == 0 or step + 1 == g.max_num_steps
                ):
                    with timer("checkpoint"):
                        restore = _save(
                            stack, collector, ckpt_root, step + 1, [*history, metrics], cfg
                        )

                # 5. in-flight weight update: engines pause (keeping requests), load, resume
                with timer("weight_sync"):
                    if not g.async_grpo.in_flight_weight_updates and A > 0:
                        ray.get(collector.drain.remote())
                    _, lost = stack.push_weights(step + 1)
                    _heal(stack, collector, step + 1, lost)  # engines that died: current weights
                    ray.get(collector.set_version.remote(step + 1))

                # 6. log
                rep: dict[str, float] = ray.get(collector.report.remote())
                metrics.update(rep)
                gen_s = rep.get("collector/gen_s", 0.0)
                metrics["tokens_per_s/gen"] = (
                    rep.get("collector/gen_tokens", 0.0) / gen_s if gen_s else 0.0
                )
                metrics["tokens_per_s/train"] = float(tm.get("tokens_per_s", 0.0))
                metrics["buffer/evicted_stale"] = float(_stats(stack).get("evicted_stale", 0))
                if val_tasks and g.val_period and (step + 1) % g.val_period == 0:
                    with timer("validation"):
                        metrics.update(_validate(collector, val_tasks, val_samples, cfg))
                metrics.update(timer.t)
                metrics["time/step_s"] = time.perf_counter() - t_step
                metrics["trainer/restarts"] = float(restarts)
                history.append(metrics)
                if (masked := infra_report(groups, step + 1)) is not None:
                    log.write(masked)
                log.log(step + 1, metrics)
                step += 1
                if on_step is not None:
                    on_step(step, stack)
            except TrainerLost as e:
                restarts += 1
                if restarts > cfg.cluster.max_trainer_restarts:
                    raise RuntimeError(
                        f"{e} (step {step + 1}), and the trainer fleet was already restarted "
                        f"{restarts - 1} times (cluster.max_trainer_restarts): see that rank's log "
                        "(`ray logs`, or the actor's stderr above) for the cause; the run can go on "
                        "from its last checkpoint with --resume"
                    ) from e
                lost_trainer = e
        val_end = None
        if val_tasks:
            ray.get(collector.stop.remote())
            val_end = _validate(collector, val_tasks, val_samples, cfg)["val/pass_rate"]
        plot = None
        if cfg.logger.jsonl_enabled:
            plot = str(plot_rewards(log.jsonl_path, Path(cfg.logger.log_dir) / "reward_curve.png"))
        return GRPOResult(g.max_num_steps, history, cfg.logger.log_dir, plot, val_start, val_end)
    finally:
        log.close()
        try:
            ray.get(collector.stop.remote(), timeout=30)
            ray.kill(collector)
        except Exception:
            pass
        if own_stack:
            stack.shutdown()


@dataclass
class _RestorePoint:
    """Where a restarted trainer fleet rewinds to: a checkpoint folder this run wrote or
    resumed from, or (``folder`` None) the run's start, whose driver state is kept here (the
    restarted ranks then hold the initial weights already)."""

    folder: Path | None
    state: dict[str, Any] | None = None

    @property
    def step(self) -> int:
        return int(self.folder.name.removeprefix("step_")) if self.folder is not None else 0

    def driver_state(self) -> dict[str, Any]:
        if self.folder is not None:
            return ckpt.load_driver_state(self.folder)
        assert self.state is not None
        return self.state


def _new_collector(stack: Any, cfg: Any, tasks: list[dict[str, Any]]) -> Any:
    import ray

    from dockyard.train.runtime.collector import CollectorHost

    return (
        ray.remote(CollectorHost)
        .options(num_cpus=0, max_concurrency=1000)
        .remote(
            cfg.model_dump(mode="json", exclude_unset=True),
            stack.engines.actors,
            stack.buffer,
            stack.sandbox_urls,
            tasks,
        )
    )


def _driver_state(
    stack: Any, collector: Any, step: int, history: list[dict[str, float]]
) -> dict[str, Any]:
    import ray

    coll = ray.get(collector.state.remote())  # before the buffer: see checkpoint.py
    buf = ray.get(stack.buffer.get_state.remote())
    return {
        "step": step,
        "collector": coll,
        "buffer": buf,
        "rng": ckpt.rng_state(),
        "history": history,
    }


def _restore(
    stack: Any, collector: Any, point: _RestorePoint
) -> tuple[list[dict[str, float]], int]:
    """Load ``point`` into the trainer (a checkpoint's policy), the collector, the buffer and
    the driver's RNG, and give the engines its weights; returns (history, step)."""
    import ray

    state = point.driver_state()
    if point.folder is not None:
        stack.trainer_call("load_checkpoint", str(point.folder / "policy"))
    ray.get(collector.load_state.remote(state["collector"]))
    ray.get(stack.buffer.set_state.remote(state["buffer"]))
    ckpt.set_rng_state(state["rng"])
    step = int(state["step"])
    _heal(stack, collector, step, stack.push_weights(step)[1])
    ray.get(collector.set_version.remote(step))
    return list(state["history"]), step


def _recover(
    stack: Any,
    collector: Any,
    cfg: Any,
    tasks: list[dict[str, Any]],
    point: _RestorePoint,
    lost: Any,
) -> tuple[Any, list[dict[str, float]], int]:
    """After a trainer rank died: restart the whole trainer fleet, replace engines whose weight
    sync it broke, and rewind the run to ``point`` with a new collector and an empty buffer
    (work of the abandoned steps must not leak into the redone ones). Returns (collector,
    history, step)."""
    import ray

    with contextlib.suppress(Exception):
        ray.get(collector.stop.remote(), timeout=30)
    with contextlib.suppress(Exception):
        ray.kill(collector)
    stack.restart_trainer()
    for i in sorted(set(lost.engines)):  # mid-sync when the fleet died: their weights are partial
        ray.get(stack.engines.restart(i).ready.remote())
    stack.new_buffer()
    collector = _new_collector(stack, cfg, tasks)
    history, step = _restore(stack, collector, point)
    ray.get(collector.start.remote())
    return collector, history, step


def _stats(stack: Any) -> dict[str, int]:
    import ray

    out: dict[str, int] = ray.get(stack.buffer.get_stats.remote())
    return out


def _validate(collector: Any, tasks: list[dict[str, Any]], n: int, cfg: Any) -> dict[str, float]:
    """Held-out pass rate of ``n`` samples per task at the training temperature."""
    import ray

    out: dict[str, float] = ray.get(
        collector.validate.remote(tasks, n, cfg.policy.generation.temperature)
    )
    return out


def _sample(stack: Any, collector: Any, cfg: Any, step: int) -> tuple[list[Any], int]:
    """P groups for ``step``; with dynamic sampling only informative ones (draws more)."""
    import ray

    g = cfg.grpo
    P, A = g.num_prompts_per_step, g.async_grpo.age_bound()
    kept: list[Any] = []
    drawn = 0
    need = P
    for _ in range(g.dynamic_sampling_max_gen_batches if g.use_dynamic_sampling else 1):
        groups = None
        while groups is None:
            groups = ray.get(stack.buffer.wait_sample.remote(need, step, 10.0))
            if groups is None:
                _heal(stack, collector, step)
                if (why := ray.get(collector.failure.remote())) is not None:
                    raise RuntimeError(f"generation failed at step {step}: {why}")
                if ray.get(collector.report_exhausted.remote()):
                    skipped = ray.get(collector.skipped_long_prompts.remote())
                    raise RuntimeError(
                        f"the training data ran out at step {step}: raise grpo.max_num_epochs "
                        "or lower grpo.max_num_steps"
                        + (
                            f" ({skipped} prompts were skipped as longer than the engine's "
                            "context: raise policy.max_total_sequence_length and "
                            "policy.generation.vllm_cfg.max_model_len)"
                            if skipped
                            else ""
                        )
                    )
        drawn += len(groups)
        if not g.use_dynamic_sampling:
            return groups, drawn
        keep = informative_groups(groups)
        kept += [gr for gr, k in zip(groups, keep, strict=True) if k]
        if len(kept) >= P:
            return kept[:P], drawn
        need = P - len(kept)
        ray.get(collector.order.remote(need, step - A))
    raise RuntimeError(
        f"dynamic sampling found only {len(kept)} of {P} informative groups in "
        f"{g.dynamic_sampling_max_gen_batches} draws at step {step}: raise "
        "grpo.dynamic_sampling_max_gen_batches or make the task less easy/hard"
    )


def _heal(stack: Any, collector: Any, version: int, lost: list[int] | None = None) -> None:
    """Replace dead engines — those the collector reported and ``lost`` (found by a weight
    push) — loading the trainer's weights as ``version``; revive dead sandbox services."""
    import ray

    for i in sorted({*ray.get(collector.dead_engines.remote()), *(lost or [])}):
        handle = stack.restart_engine(i, version)
        ray.get(collector.replace_engine.remote(i, handle))
    if stack.sandbox is not None:
        stack.sandbox.heal()


def _save(
    stack: Any, collector: Any, root: Path, step: int, history: list[dict[str, float]], cfg: Any
) -> _RestorePoint:
    folder = ckpt.step_dir(root, step)
    if folder.exists() and not (folder / "done").exists():
        shutil.rmtree(folder)  # a save cut short (its trainer rank died): start it afresh
    folder.mkdir(parents=True, exist_ok=True)
    stack.trainer_call("save_checkpoint", str(folder / "policy"), {"step": step})
    ckpt.save_driver_state(folder, _driver_state(stack, collector, step, history))
    ckpt.mark_done(folder)
    metric = None
    if cfg.checkpointing.metric_name:
        metric = {
            i + 1: h.get(cfg.checkpointing.metric_name, float("nan")) for i, h in enumerate(history)
        }
    ckpt.prune(root, cfg.checkpointing.keep_top_k, metric, cfg.checkpointing.higher_is_better)
    return _RestorePoint(folder)  # (pruning always keeps the latest)
