"""The loop of the offline pair drivers — DPO (:mod:`.dpo`) and the reward model (:mod:`.rm`):
one skeleton, each algorithm's own part a small :class:`PairStrategy`.

    train, val = strategy.encode(train_pairs), strategy.encode(val_pairs)
    strategy.prepare(worker, train, val)               # DPO: the reference pass
    evaluate(0)                                        # grpo.val_at_start
    for step in range(1, steps + 1):                   # pair_steps
        batch   = strategy.batch(train, next B pairs)  # a seeded order, reshuffled per epoch
        metrics = worker.train_step(batch, strategy.loss_fn)
        log(step, train/* + evaluate(step))            # every grpo.val_period steps, and at
    worker.export_hf(output_dir)                       #   the end (grpo.val_at_end)

To add a pair driver, write its strategy (and a :class:`~dockyard.train.cli.pair_command.
PairCommand` for its command).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dockyard.core.config import MasterConfig
from dockyard.core.experience import Batch


class PairStrategy(Protocol):
    """A pair driver's own part: its rows, its reference pass, its held-out metrics."""

    @property
    def name(self) -> str:
        """In messages: "DPO", "reward-model"."""
        ...

    @property
    def loss_fn(self) -> Any:
        """The trainer's loss on this driver's rows."""
        ...

    def encode(self, pairs: list[dict[str, Any]], what: str) -> list[Any]:
        """The pairs as rows (``what``: "training" / "held-out", for messages)."""
        ...

    def prepare(self, worker: Any, train: list[Any], val: list[Any]) -> None:
        """Before the first evaluation (DPO: the reference logprobs of every pair)."""
        ...

    def batch(self, train: list[Any], idx: list[int]) -> Batch:
        """The training batch of pairs ``idx``."""
        ...

    def evaluate(self, worker: Any, val: list[Any], step: int) -> dict[str, float]:
        """Held-out metrics (unprefixed) of the weights after ``step`` steps."""
        ...

    def headline(self, step: int, metrics: dict[str, float]) -> str:
        """The log line of a step with ``val/*`` metrics."""
        ...


@dataclass
class PairResult:
    """``history``: each step's train metrics; ``val``: step -> held-out metrics (step 0:
    before training); ``output_dir``: the exported model (None: not exported)."""

    history: list[dict[str, float]] = field(default_factory=list)
    val: dict[int, dict[str, float]] = field(default_factory=dict)
    output_dir: str | None = None


def train_on_pairs(
    strategy: PairStrategy,
    worker: Any,
    train_pairs: list[dict[str, Any]],
    val_pairs: list[dict[str, Any]],
    *,
    steps: int,
    batch_size: int,
    seed: int = 0,
    val_period: int = 0,
    val_at_start: bool = True,
    val_at_end: bool = True,
    output_dir: str | Path | None = None,
    log: Any = None,
) -> PairResult:
    """The module docstring's loop. ``log``: a :class:`~dockyard.train.logging.MetricsLogger`
    (``train/*``, ``val/*``); the model is exported to ``output_dir``."""
    train = strategy.encode(train_pairs, "training")
    val = strategy.encode(val_pairs, "held-out") if val_pairs else []
    if not train:
        raise ValueError(f"no {strategy.name} training pairs")
    strategy.prepare(worker, train, val)
    result = PairResult()

    def evaluate(step: int) -> dict[str, float]:
        if not val:
            return {}
        m = strategy.evaluate(worker, val, step)
        result.val[step] = m
        return {f"val/{k}": v for k, v in m.items()}

    def show(step: int, metrics: dict[str, float]) -> None:
        if log is None:
            return
        log.log(step, metrics)
        if any(k.startswith("val/") for k in metrics):
            log.write(strategy.headline(step, metrics))

    if val_at_start and val:
        show(0, evaluate(0))
    result.history = pair_steps(
        worker, len(train), lambda idx: strategy.batch(train, idx), strategy.loss_fn, evaluate,
        show, steps=steps, batch_size=batch_size, seed=seed, val_period=val_period,
        val_at_end=val_at_end,
    )  # fmt: skip
    if output_dir is not None:
        result.output_dir = worker.export_hf(str(output_dir))
    return result


def pair_steps(
    worker: Any,
    n_train: int,
    batch: Callable[[list[int]], Batch],
    loss_fn: Any,  # the trainer's loss of the driver's rows (a LossFn, or the RM's on scores)
    evaluate: Callable[[int], dict[str, float]],
    log: Callable[[int, dict[str, float]], None],
    *,
    steps: int,
    batch_size: int,
    seed: int,
    val_period: int,
    val_at_end: bool,
) -> list[dict[str, float]]:
    """The optimizer steps of a pair driver (DPO, the reward model): step s trains on
    ``batch(idx)`` of ``batch_size`` training pairs — a seeded order over the ``n_train``
    pairs, reshuffled at each epoch — with ``loss_fn``; logs ``train/*`` (+ ``evaluate(s)``'s
    ``val/*`` every ``val_period`` steps and after the last with ``val_at_end``) and
    ``time/step_s`` through ``log(s, metrics)``. Returns each step's train metrics."""
    history: list[dict[str, float]] = []
    batch_size = min(batch_size, n_train)
    rng = np.random.default_rng(seed)
    order, pos = rng.permutation(n_train), 0
    for step in range(1, steps + 1):
        if pos + batch_size > len(order):
            order, pos = rng.permutation(n_train), 0
        idx = [int(i) for i in order[pos : pos + batch_size]]
        pos += batch_size
        t0 = time.perf_counter()
        m = worker.train_step(batch(idx), loss_fn)
        m = {k: float(v) for k, v in m.items() if isinstance(v, int | float | np.number)}
        m["time/step_s"] = time.perf_counter() - t0
        history.append(m)
        shown = {f"train/{k}": v for k, v in m.items() if k != "time/step_s"}
        if (val_period and step % val_period == 0) or (val_at_end and step == steps):
            shown.update(evaluate(step))
        log(step, {**shown, "time/step_s": m["time/step_s"]})
    return history


def loop_options(cfg: MasterConfig) -> dict[str, Any]:
    """The keyword options of :func:`train_on_pairs` from a ``MasterConfig``: steps, pairs per
    step, seed, held-out evaluation (the length cap, ``policy.max_total_sequence_length``, is
    the strategy's)."""
    p, g = cfg.policy, cfg.grpo
    return {
        "steps": g.max_num_steps,
        "batch_size": p.train_global_batch_size,
        "seed": g.seed,
        "val_period": g.val_period,
        "val_at_start": g.val_at_start,
        "val_at_end": g.val_at_end,
    }
