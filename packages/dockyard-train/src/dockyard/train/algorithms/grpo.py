"""The GRPO driver: synchronous and asynchronous GRPO through one loop.

Policy versions: the trainer at step ``s`` holds version ``s``; after its optimizer step it
pushes version ``s + 1`` to the engines. With ``A = grpo.async_grpo.max_trajectory_age_steps``
(0 when asynchrony is off) the collector may generate the groups for step ``t`` once the engines
serve version ``t − A``, and the buffer hands step ``s`` only groups whose oldest token has
version ≥ ``s − A``. A = 0 is exactly on-policy GRPO; A ≥ 1 overlaps generation with training.
Each step takes ``P·G / policy.train_global_batch_size`` optimizer steps, one per consecutive
slice of the batch (usually one: ``train_global_batch_size = P·G``). With one, π_prev of the
clipped ratio is the policy being trained: the loss takes ``stop_grad(log π)`` from the train
step's own forward (as TRL does with one iteration per batch) and no separate logprob pass
runs; with several, π_prev is computed once, before the first. The mismatch against the
engines' logprobs comes from the loss's metrics. The asynchrony's off-policy gap
(π_gen ≠ π_prev) is what the importance-sampling correction is for.

    for step in range(start, max_num_steps):
        heal()                                             # replace dead engines, sandboxes
        buffer.draw(P, step)                               # P complete groups, age ≤ A
                  (+ dynamic sampling: drop all-equal groups, draw more)
        batch   = buffer.build(P, step)                    # shaping, masks, advantages: a ref
        trainer.hold(batch)                                # every rank resolves it
        trainer.fill_logprobs("ref")                       # only if β > 0
        metrics = trainer.train_held(loss_fn)              # version step -> step + 1 (one
                                                           #   per train_global_batch_size)
        collector.order(P, min_version=step + 1)           # work for step t = step + 1 + A
        checkpoint(step + 1)                               # every save_period steps
        push_weights(version=step + 1)                     # in-flight update, then the
        collector.set_version(step + 1)                    #   engines serve step + 1
        log(step + 1, metrics)                             # (+ validation every val_period
                                                           #    steps, after the last: val_at_end)
    a trainer rank lost on the way: restart every rank, rewind (start = the restore point), again

The trajectories never pass through the driver (:mod:`dockyard.train.runtime.dataplane`): the
buffer builds the batch and puts it in Ray's object store, the ranks resolve its reference, the
rollout log's writer actor gets the groups' reference; the driver handles references and a
summary of a few numbers.

Faults (helpers in :mod:`dockyard.train.recovery`): every step the driver replaces engines
found dead — reported by the collector, or found by the weight push, which skips a dead engine
instead of waiting on it — with a restarted actor holding the current weights (the dead
engine's groups are regenerated under the same uid), and restarts sandbox services that stopped
answering (their samples came back ``infra_error``: masked, and reported in the log). A trainer
rank that dies (any trainer call, or the weight push, raises ``TrainerLost`` as soon as Ray
reports it) costs the whole fleet — its process group cannot lose a member — so every rank is
restarted, engines caught mid-sync are replaced, and the run rewinds to its latest checkpoint
(or its start) with a new collector and an empty buffer: the abandoned steps are redone, their
log lines rewritten, nothing of them is trained on (``cluster.max_trainer_restarts`` times,
then the run stops with the rank's error).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.exceptions import RayActorError

from dockyard.core.config import MasterConfig
from dockyard.core.config.grpo import OPDAdvConfig
from dockyard.core.config.loss import PG_LOSS_TYPES, is_policy_gradient
from dockyard.core.rl import OnPolicyDistillationLoss, OPDPolicyLoss, PolicyLoss
from dockyard.train import checkpoint as ckpt
from dockyard.train.algorithms.configs import (
    batch_options,
    collector_config,
    needs_reference,
    stack_config,
)
from dockyard.train.algorithms.distillation import distill_problems
from dockyard.train.algorithms.drivers import loss_driver, loss_problems
from dockyard.train.algorithms.validation import pass_rate, pass_rate_ref, validate_distillation
from dockyard.train.data import read_jsonl
from dockyard.train.environments import load_dataset
from dockyard.train.export import export_hf, write_folder
from dockyard.train.logging import MetricsLogger, plot_rewards, process_age_s, startup_line
from dockyard.train.metrics import (
    mismatch_metrics,
    train_metrics,
)
from dockyard.train.recovery import (
    RestorePoint,
    driver_state,
    heal,
    new_collector,
    recover,
    restore_run,
    save_run,
)
from dockyard.train.runtime.collector_config import CollectorConfig
from dockyard.train.runtime.dataplane import RolloutWriter
from dockyard.train.runtime.stack import Stack
from dockyard.train.runtime.trainer import TrainerLost


@dataclass
class GRPOResult:
    """What a run leaves behind."""

    steps: int
    history: list[dict[str, float]] = field(default_factory=list)
    log_dir: str = ""
    plot: str | None = None
    val_start: float | None = None
    val_end: float | None = None
    val: dict[int, dict[str, float]] = field(default_factory=dict)
    """step -> the ``val/*`` metrics of each validation (step 0: before training)."""


def load_tasks(cfg: MasterConfig, split: str) -> list[dict[str, Any]]:
    """Training (``train``) or validation (``val``) tasks from ``data``."""

    path = cfg.data.train_path if split == "train" else cfg.data.val_path
    if path:
        return read_jsonl(path)
    if cfg.data.dataset_name:
        return load_dataset(cfg.data.dataset_name, split)
    if split == "val":
        return []
    raise ValueError("no training data: set data.dataset_name or data.train_path")


def train(
    cfg: MasterConfig,
    *,
    resume: bool = False,
    progress: bool = True,
    stack: Any = None,
    on_step: Any = None,
) -> GRPOResult:
    """Run GRPO per ``cfg`` (a ``MasterConfig``); see the module docstring.

    Args:
        resume: continue from the latest checkpoint in ``checkpointing.checkpoint_dir``.
        progress: show the progress bar.
        stack: a running :class:`~dockyard.train.runtime.stack.Stack` to reuse (else built).
        on_step: ``callable(step, stack)`` called after each step (tests inject faults here).

    The loss is ``loss_fn.type``'s entry in :data:`LOOP_LOSSES`: a policy gradient, or the
    on-policy distillation loss (``dockyard distill``, :mod:`.distillation`), with its own
    pre-flight and validation.

    Validation (``grpo.val_*``: the pass rate of ``val_samples_per_prompt`` samples per held-out
    task at ``val_temperature``) runs only where the config asks: before the first step
    (``val_at_start``), every ``val_period`` steps, after the last one (``val_at_end``); each is
    logged at the step whose weights it measured (step 0: before training) with ``val/*`` keys.
    """
    loss_fn, entry = _loss_for(cfg)  # a config built in code skips the pre-flight: checked

    g = cfg.grpo
    P, A = g.num_prompts_per_step, g.async_grpo.age_bound()
    opts, need_ref = batch_options(cfg), needs_reference(cfg)
    own_stack = stack is None
    stack = stack or Stack(
        stack_config(cfg), cfg.logger.log_dir, wait=False
    )  # begin waits for its fleets
    run: _Run | None = None
    try:
        run = _Run.begin(  # data, collector, log (+ validation)
            cfg, stack, resume, progress, loss_fn, entry.validate, (P, A)
        )
        start = step = run.start
        while True:  # once through; again from the restore point after a lost trainer rank
            try:
                for step in range(start, g.max_num_steps):
                    _step(stack, run, cfg, step, loss_fn, opts, need_ref, (P, A))
                    if on_step is not None:
                        on_step(step + 1, stack)
                break
            except TrainerLost as lost:  # every rank restarts; the run rewinds
                start = run.rewind(lost, step)
        val_end = run.final_validation()
        if own_stack:  # the engines exit while the export and the plot are made
            stack.stop_engines()
        return run.finish(val_end)
    finally:
        if run is not None:
            run.close()
        if own_stack:
            stack.shutdown()


def _step(
    stack: Any,
    run: _Run,
    cfg: MasterConfig,
    step: int,
    loss_fn: Any,
    opts: Any,
    need_ref: bool,
    loop: tuple[int, int],
) -> None:
    """One step, version ``step`` -> ``step + 1``: sample, batch, train, order the next work,
    checkpoint, push the weights, log. ``loop``: (P, A), the prompts a step and the age bound."""
    P, A = loop
    timer, trainer = _Timer(), stack.trainer  # a TrainerClient: every call reaches every rank
    heal(stack, run.collector, step)

    # 1. P complete groups no older than the bound, staged in the buffer (dynamic sampling
    #    draws more)
    with timer("wait_generation"):
        drawn = _sample(stack, run.collector, cfg, step, P, A)

    # 2. the batch, built by the buffer and held by every rank from its ObjectRef (the data
    #    plane, runtime/dataplane.py: the driver holds references and a summary), + reference
    #    logprobs if β > 0. π_prev is the policy being trained: with one optimizer step per
    #    batch the loss takes stop_grad(log π) from the step's own forward; a pass only for
    #    several
    refs, built = ray.get(stack.buffer.build.remote(P, step, A, opts, run.rollouts is not None))
    trainer.hold(refs[0])
    n_opt = max(1, built["rows"] // cfg.policy.train_global_batch_size)
    _logprob_passes(trainer, n_opt, need_ref, timer)

    with timer("rollout_log"):  # logger.rollouts.trainer_logprobs, .entropy
        run.rollout_values()

    # 3. the optimizer step(s), one per train_global_batch_size: version step -> step + 1
    with timer("train"):
        tm = trainer.train_held(loss_fn, n_opt)

    # 4. order the work for step + 1 + A, then checkpoint (before the weights move)
    run.settle_start_validation()
    ray.get(run.collector.order.remote(P, step + 1))  # there: version ≥ step + 1
    metrics = _step_metrics(built["metrics"], tm, drawn, step)
    if run.checkpoint_due(step + 1):
        with timer("checkpoint"):
            run.checkpoint(step + 1, metrics)

    # 5. in-flight weight update: engines pause (keeping requests), load, resume
    with timer("weight_sync"):
        _push_weights(stack, run.collector, cfg, step + 1)
        ray.get(run.collector.set_version.remote(step + 1))

    # 6. log (+ validation: every grpo.val_period steps, after the last)
    run.log(step + 1, metrics, built, refs, timer)


@dataclass(frozen=True)
class LoopLoss:
    """A loss this loop trains: how it is built from the config, what it cannot run with (its
    own pre-flight: one line per problem, dotted key first), and the validation that replaces
    the pass rate alone (``validate(stack, collector, tasks, cfg, loss)``; None: the pass rate).
    To add one, add its ``loss_fn.type`` to :data:`LOOP_LOSSES` and to the driver table
    (:data:`.drivers.LOSS_DRIVERS`); a policy gradient another package registers
    (``dockyard.losses``) is trained as the built-in ones are, without an entry."""

    build: Callable[[Any], Any]
    problems: Callable[[Any], list[str]] = lambda cfg: []
    validate: Callable[..., dict[str, float]] | None = None


def _policy_gradient(cfg: MasterConfig) -> PolicyLoss | OPDPolicyLoss:
    """The policy-gradient loss of ``loss_fn``; with ``adv_estimator: opd`` wrapped to take the
    teachers' token advantages in the trainer."""
    est, length = cfg.grpo.adv_estimator, cfg.policy.generation.max_new_tokens
    if isinstance(est, OPDAdvConfig):
        return OPDPolicyLoss.from_config(cfg.loss_fn, est, norm_length=length)
    return PolicyLoss.from_config(cfg.loss_fn, norm_length=length)


_POLICY_GRADIENT = LoopLoss(_policy_gradient)
LOOP_LOSSES: dict[str, LoopLoss] = {
    **dict.fromkeys(PG_LOSS_TYPES, _POLICY_GRADIENT),
    # on-policy distillation (dockyard distill): the trainer hands the loss the teacher's top-k
    # on the sampled tokens; validation adds the held-out KL to the teacher
    "distillation": LoopLoss(
        lambda cfg: OnPolicyDistillationLoss.from_config(cfg.loss_fn),
        distill_problems,
        validate_distillation,
    ),
}
"""``loss_fn.type`` -> the loss this loop trains; the other types are other drivers'
(:mod:`.drivers`)."""


def _logprob_passes(trainer: Any, n_opt: int, need_ref: bool, timer: _Timer) -> None:
    """π_prev's logprobs of the held batch when it takes several optimizer steps (with one, the
    loss takes stop_grad(log π) from the step's own forward), and π_ref's when the KL term
    needs them; the ranks keep them in the batch they hold."""
    if n_opt <= 1 and not need_ref:
        return
    with timer("logprobs"):
        if n_opt > 1:
            trainer.fill_logprobs("prev")
        if need_ref:
            trainer.fill_logprobs("ref")


def _loss_for(cfg: MasterConfig) -> tuple[Any, LoopLoss]:
    """The loop's loss and its entry (:data:`LOOP_LOSSES`), after the checks of the command
    that trains ``loss_fn.type`` and the loss's own; ValueError naming the command that does
    train a type this loop does not."""
    entry = LOOP_LOSSES.get(cfg.loss_fn.type)
    if entry is None and is_policy_gradient(cfg.loss_fn):  # a registered one (dockyard.losses)
        entry = _POLICY_GRADIENT
    if entry is None:
        raise ValueError(loss_problems(cfg, "train")[0])
    command = loss_driver(cfg.loss_fn.type)
    if problems := loss_problems(cfg, command) or entry.problems(cfg):
        raise ValueError(problems[0])
    return entry.build(cfg), entry


class _Timer:
    """Seconds per phase of one step (``time/<name>_s``), and the whole step's."""

    def __init__(self) -> None:
        self.t: dict[str, float] = {}
        self.started = time.perf_counter()

    def __call__(self, name: str) -> _Timer:
        self._name = name
        return self

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.t[f"time/{self._name}_s"] = (
            self.t.get(f"time/{self._name}_s", 0.0) + time.perf_counter() - self._t0
        )

    def metrics(self) -> dict[str, float]:
        return {**self.t, "time/step_s": time.perf_counter() - self.started}


@dataclass
class _Run:
    """What the loop's helpers share about a run, and what a rewind replaces."""

    cfg: MasterConfig
    stack: Any
    tasks: list[dict[str, Any]]
    val_tasks: list[dict[str, Any]]
    collector: Any  # a CollectorHost actor (a new one after each rewind)
    restore: RestorePoint  # where a restarted trainer fleet rewinds to
    start: int
    history: list[dict[str, float]]
    logger: MetricsLogger
    val_start: float | None
    restarts: int = 0
    collector_cfg: CollectorConfig | None = None  # a rewind's new collector gets it as it is
    loss_fn: Any = None  # the loss, for a validation of its own (LoopLoss.validate)
    loss_validation: Callable[..., dict[str, float]] | None = None
    val: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> val/* metrics
    rollouts: Any = None  # the RolloutWriter actor (logger.rollouts), else None
    _values: Any = None  # this step's trainer values for the rollout log (rank 0's ObjectRef)
    _entropy_mean: float | None = None  # their entropy's mean over the loss tokens
    _written: Any = None  # the last step's write (waited for at the next one, and at the end)
    startup: dict[str, float] = field(default_factory=dict)  # `startup/*`: the first step's
    _val_at_start: tuple[float, Any] | None = None  # (its start, its ObjectRef) until settled

    @classmethod
    def begin(
        cls, cfg: MasterConfig, stack: Any, resume: bool, progress: bool, loss_fn: Any,
        loss_validation: Callable[..., dict[str, float]] | None, loop: tuple[int, int],
    ) -> _Run:  # fmt: skip
        """Load the data; start a collector from the latest checkpoint (``resume``) or from
        the run's start (seeded, the pipeline filled for steps 0..A); open the log; validate
        before training (``grpo.val_at_start``), logged as step 0 (distilling, before the
        first step: the held-out KL needs the trainer's start weights)."""

        g = cfg.grpo
        P, A = loop  # read once, by train()
        collector_cfg = collector_config(cfg, P, A)  # the collector actor's own
        t0 = time.perf_counter()
        tasks, val_tasks = load_tasks(cfg, "train"), load_tasks(cfg, "val")[: g.max_val_samples]
        # the collector's process (its environment, tokenizer, task filtering: seconds) starts
        # while the fleets load, unless it needs the sandbox fleet's addresses
        early = stack.sandbox is None
        collector = new_collector(stack, collector_cfg, tasks) if early else None
        t_wait = time.perf_counter()
        stack.wait_ready()
        t_wait = time.perf_counter() - t_wait
        collector = collector or new_collector(stack, collector_cfg, tasks)
        history: list[dict[str, float]] = []
        start = 0
        last = ckpt.latest_checkpoint(Path(cfg.checkpointing.checkpoint_dir)) if resume else None
        if last is not None:
            restore = RestorePoint(last)
            history, start = restore_run(stack, collector, restore)
        else:
            random.seed(g.seed)
            np.random.seed(g.seed % (2**32))
            ray.get(collector.order.remote(P * (A + 1), 0))  # fill the pipeline: steps 0..A
            restore = RestorePoint(None, driver_state(stack, collector, 0, []))
        ray.get(collector.start.remote())
        # data + collector: the part of their start not hidden behind the fleets'
        data_s = time.perf_counter() - t0 - t_wait
        startup = {**getattr(stack, "startup", {}), "startup/data_s": data_s}
        config = cfg.model_dump(mode="json")
        logger = MetricsLogger(cfg.logger, g.max_num_steps, start, config, progress)
        run = cls(cfg, stack, tasks, val_tasks, collector, restore, start, history, logger, None)
        run.startup = startup
        run.rollouts = RolloutWriter.start(
            cfg.logger.rollouts,
            cfg.logger.log_dir,
            tokenizer=cfg.policy.tokenizer.name or cfg.policy.model_name,
            seed=g.seed,
            env=",".join(cfg.env),
            initial_step=start,
        )
        run.loss_fn, run.loss_validation = loss_fn, loss_validation
        run.collector_cfg = collector_cfg
        if val_tasks and g.val_at_start and start == 0 and loss_validation is not None:
            run._settle(time.perf_counter(), run.validate())
        elif val_tasks and g.val_at_start and start == 0:  # beside step 1, until its push
            run._val_at_start = (time.perf_counter(), pass_rate_ref(collector, val_tasks, cfg))
        return run

    def rollout_values(self) -> None:
        """The trainer's logprobs of the held batch for the rollout log, where it asks for
        them (``logger.rollouts.trainer_logprobs``): π_prev's, when the step computed them, else
        one logprob pass of the weights about to be trained; and their token entropies where it
        asks for them (``logger.rollouts.entropy``: one forward). Kept on rank 0: the driver
        gets their reference and the entropy's mean."""
        self._values, self._entropy_mean = None, None
        if self.rollouts is None:
            return
        asked = self.cfg.logger.rollouts
        self._values, self._entropy_mean = self.stack.trainer.rollout_values(
            asked.trainer_logprobs, asked.entropy
        )

    def settle_start_validation(self) -> None:
        """Wait for the validation before training (``grpo.val_at_start``), which ran beside
        the first step's generation and training: it measures the start's weights, so it ends
        before the first weight push. Logged as step 0."""

        if self._val_at_start is None:
            return
        (t0, ref), self._val_at_start = self._val_at_start, None
        try:
            val: dict[str, float] = ray.get(ref)
        except RayActorError:  # its collector was replaced by a rewind
            self.logger.write("dockyard: the validation before training was lost in a rewind")
            return
        self._settle(t0, val)

    def _settle(self, t0: float, val: dict[str, float]) -> None:
        """Log the validation before training (started at ``t0``) as step 0."""
        self.logger.log(0, val)
        self.val[0] = val
        self.val_start = val["val/pass_rate"]
        self.startup["startup/validation_s"] = time.perf_counter() - t0
        kl = f", held-out KL {val['val/distill_kl']:.4f}" if "val/distill_kl" in val else ""
        per = [f"{k[len('val/pass_rate/') :]} {100 * v:.1f}%" for k, v in val.items()
               if k.startswith("val/pass_rate/")]  # fmt: skip
        kinds = f" ({', '.join(per)})" if per else ""
        self.logger.write(
            f"validation before training: pass rate {100 * self.val_start:.1f}%{kinds}{kl}"
        )

    def validate(self) -> dict[str, float]:
        if self.loss_validation is not None:  # the loss's own (distillation: + held-out KL)
            return self.loss_validation(
                self.stack, self.collector, self.val_tasks, self.cfg, self.loss_fn
            )
        return pass_rate(self.collector, self.val_tasks, self.cfg)

    def validation_due(self, step: int) -> bool:
        """Every ``grpo.val_period`` steps, and after the last step with ``grpo.val_at_end``."""
        g = self.cfg.grpo
        return bool(self.val_tasks) and (
            (g.val_at_end and step == g.max_num_steps)
            or (g.val_period > 0 and step % g.val_period == 0)
        )

    def checkpoint_due(self, step: int) -> bool:
        """Every ``checkpointing.save_period`` steps and at the end (at the end only, for the
        export, when checkpointing is off but ``checkpointing.export_hf`` is set)."""
        c, last = self.cfg.checkpointing, step == self.cfg.grpo.max_num_steps
        return (c.enabled and (step % c.save_period == 0 or last)) or (last and bool(c.export_hf))

    def checkpoint(self, step: int, metrics: dict[str, float]) -> None:
        """Save the run at ``step`` (``metrics``: that step's so far); the new restore point."""
        root = Path(self.cfg.checkpointing.checkpoint_dir)
        history = [*self.history, metrics]
        self.restore = save_run(
            self.stack, self.collector, root, step, history, self.cfg.checkpointing
        )

    def log(
        self,
        step: int,
        metrics: dict[str, float],
        built: dict[str, Any],
        refs: list[Any],
        timer: _Timer,
    ) -> None:
        """Complete step ``step``'s ``metrics`` — the collector's report, throughput per second
        of wall time, the buffer, validation (:meth:`validation_due`; after the last step with
        the collector stopped), the phases' times — keep them in the history and log them, with
        a line on samples masked as ``infra_error``; the step's trajectories to the rollout log
        (``built``, ``refs``: the buffer's summary of the batch, and the batch's and the
        groups' references, :meth:`.StepBuffer.build`)."""

        rep: dict[str, float] = ray.get(self.collector.report.remote())
        metrics.update(rep)
        gen_s, train_s = rep.get("collector/gen_wall_s", 0.0), timer.t.get("time/train_s", 0.0)
        metrics["tokens_per_s/gen"] = rep.get("collector/gen_tokens", 0.0) / gen_s if gen_s else 0.0
        trained = float(built["tokens"])
        metrics["tokens_per_s/train"] = trained / train_s if train_s else 0.0
        metrics["buffer/evicted_stale"] = float(_buffer_stats(self.stack).get("evicted_stale", 0))
        if self.validation_due(step):
            with timer("validation"):
                if step == self.cfg.grpo.max_num_steps:  # nothing more to generate for
                    ray.get(self.collector.stop.remote())
                self.val[step] = self.validate()
                metrics.update(self.val[step])
        if self._entropy_mean is not None:  # the policy's mean entropy over its own tokens
            metrics["policy/entropy"] = self._entropy_mean
        if self.rollouts is not None:  # the trajectories it trained on, as Parquet
            with timer("rollout_log"):  # the writer works beside the next step
                self.flush_rollouts()
                batch_ref, groups_ref = refs
                self._written = self.rollouts.write_step.remote(
                    step, groups_ref, batch_ref, self._values
                )
        metrics.update(timer.metrics())
        metrics["trainer/restarts"] = float(self.restarts)
        # engines and sandbox services this process has restarted (found dead by the collector,
        # a weight push or a health check): a recovery shows in the curves, not only the log
        metrics["engines/restarts"] = float(self.stack.engines.restarts)
        if self.stack.sandbox is not None:
            metrics["sandbox/restarts"] = float(self.stack.sandbox.restarts)
        metrics["time/since_process_start_s"] = process_age_s()
        if self.startup:  # the first step of this process: where its start-up went
            metrics.update(self.startup)
            self.logger.write(startup_line(self.startup, metrics["time/since_process_start_s"]))
            self.startup = {}
        self.history.append(metrics)
        if (masked := built["masked"]) is not None:
            self.logger.write(masked)
        self.logger.log(step, metrics)

    def rewind(self, lost: TrainerLost, step: int) -> int:
        """Trainer rank ``lost`` died in ``step``: restart the fleet and rewind to the restore
        point (again if a rank dies on the way), at most ``cluster.max_trainer_restarts``
        times in the run; returns the step to go on from."""

        limit = self.cfg.cluster.max_trainer_restarts
        while True:
            self.restarts += 1
            if self.restarts > limit:
                raise RuntimeError(
                    f"{lost} (step {step + 1}), and the trainer fleet was already restarted "
                    f"{self.restarts - 1} times (cluster.max_trainer_restarts): see that rank's "
                    "log (`ray logs`, or the actor's stderr above) for the cause; the run can go "
                    "on from its last checkpoint with --resume"
                ) from lost
            self.logger.write(
                f"dockyard: {lost} at step {step + 1}: restarting every trainer rank (restart "
                f"{self.restarts} of {limit}, cluster.max_trainer_restarts) and rewinding to "
                + (f"step {self.restore.step}" if self.restore.folder else "the start")
            )
            assert self.collector_cfg is not None  # set by begin()
            try:
                self.collector, self.history, start = recover(
                    self.stack, self.collector, self.collector_cfg, self.tasks, self.restore, lost
                )
            except TrainerLost as again:
                lost = again
                continue
            self.logger.rewind(start)
            if self.rollouts is not None:
                self.flush_rollouts()
                ray.get(self.rollouts.rewind.remote(start))
            return start

    def final_validation(self) -> float | None:
        """The pass rate after training, then the collector stopped: ``grpo.val_at_end``'s
        (the last step's; run now, and logged at the last step, when a resumed run had no step
        left), else the last step's ``val_period`` one if it fell there, else None."""

        steps = self.cfg.grpo.max_num_steps
        val_end = None
        if self.val_tasks and self.history and self.history[-1].get("version") == steps:
            val_end = self.history[-1].get("val/pass_rate")
        if self.val_tasks and self.cfg.grpo.val_at_end and val_end is None:
            ray.get(self.collector.stop.remote())
            val = self.validate()
            self.logger.log(steps, val)
            self.val[steps] = val
            val_end = val["val/pass_rate"]
        ray.get(self.collector.stop.remote())  # nothing more to generate
        return val_end

    def flush_rollouts(self) -> None:
        """Wait for the rollout log's last write (its error raised here)."""
        if self._written is not None:
            written, self._written = self._written, None
            ray.get(written)

    def finish(self, val_end: float | None) -> GRPOResult:
        """The Hugging Face export (``checkpointing.export_hf``) and the reward curve (the
        rollout log's last write waited for)."""
        self.flush_rollouts()
        cfg = self.cfg
        steps = cfg.grpo.max_num_steps
        if cfg.checkpointing.export_hf:
            self.export_hf(cfg.checkpointing.export_hf)
        plot = None
        if cfg.logger.jsonl_enabled:
            png = Path(cfg.logger.log_dir) / "reward_curve.png"
            plot = str(plot_rewards(self.logger.jsonl_path, png))
        return GRPOResult(
            steps, self.history, cfg.logger.log_dir, plot, self.val_start, val_end, self.val
        )

    def export_hf(self, out: str) -> None:
        """The final policy as a Hugging Face folder. The torch trainer writes it from the
        weights it holds (what the checkpoint saved after the last step holds: the driver then
        loads no model, which cost it ~8 s of imports and loading at every run's end); the JAX
        trainer's folder comes from that checkpoint (:meth:`checkpoint_due` saves one whenever
        ``checkpointing.export_hf`` is set)."""

        folder = self.restore.folder
        if folder is None:
            raise RuntimeError(
                f"checkpointing.export_hf={out!r}: this run saved no checkpoint to export"
            )
        self.logger.write(f"exporting {folder} as a Hugging Face model to {out}")
        if self.cfg.policy.jax_cfg.enabled:
            export_hf(folder, out, force=True)
        else:
            write_folder(out, lambda tmp: self.stack.trainer.export_hf(str(tmp)), force=True)

    def close(self) -> None:

        self.logger.close()
        if self.rollouts is not None:
            with contextlib.suppress(Exception):  # Ray may be down (the run's own error)
                ray.kill(self.rollouts)
        try:
            ray.get(self.collector.stop.remote(), timeout=30)
            ray.kill(self.collector)
        except Exception:
            pass


def _sample(stack: Any, collector: Any, cfg: MasterConfig, step: int, P: int, A: int) -> int:
    """Stage ``P`` groups for ``step`` in the buffer (:meth:`.StepBuffer.draw`); with dynamic
    sampling only informative ones (draws more: for step − A, the bound ``A``). Returns the
    groups drawn."""

    g = cfg.grpo
    dynamic = g.use_dynamic_sampling
    drawn, staged, need, fresh = 0, 0, P, True
    for _ in range(g.dynamic_sampling_max_gen_batches if dynamic else 1):
        got = None
        while got is None:
            got = ray.get(stack.buffer.draw.remote(need, step, 10.0, dynamic, fresh))
            if got is None:
                _wait_problem(stack, collector, step)
        fresh = False
        drawn += got[0]
        staged = got[1]
        if staged >= P:
            return drawn
        need = P - staged
        ray.get(collector.order.remote(need, step - A))
    raise RuntimeError(
        f"dynamic sampling found only {staged} of {P} informative groups in "
        f"{g.dynamic_sampling_max_gen_batches} draws at step {step + 1} (as logged): raise "
        "grpo.dynamic_sampling_max_gen_batches or make the task less easy/hard"
    )


def _wait_problem(stack: Any, collector: Any, step: int) -> None:
    """While the buffer waits for a step's groups: heal the fleets; raise if generation failed
    or the data ran out."""
    heal(stack, collector, step)
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


def _step_metrics(rollouts: dict[str, float], tm: Any, drawn: int, step: int) -> dict[str, float]:
    """What ``step`` trained: its rollouts (the buffer's ``rollout_metrics``), the gen-vs-train
    logprob mismatch, the optimizer step's metrics, the groups drawn, the version it produced."""
    return {
        **rollouts,
        **mismatch_metrics(tm),
        **train_metrics(tm),
        "dynamic_sampling/groups_drawn": float(drawn),
        "version": float(step + 1),
    }


def _push_weights(stack: Any, collector: Any, cfg: MasterConfig, version: int) -> None:
    """The trainer's weights to the engines as ``version``: in flight, or once the collector
    drained (``grpo.async_grpo.in_flight_weight_updates`` off with A > 0); engines that died
    on the way are replaced holding them."""

    a = cfg.grpo.async_grpo
    if not a.in_flight_weight_updates and a.age_bound() > 0:
        ray.get(collector.drain.remote())
    _, lost = stack.push_weights(version)
    heal(stack, collector, version, lost)


def _buffer_stats(stack: Any) -> dict[str, int]:

    out: dict[str, int] = ray.get(stack.buffer.get_stats.remote())
    return out
