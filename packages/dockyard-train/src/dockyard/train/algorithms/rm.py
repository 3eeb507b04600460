"""The reward-model driver: a scalar head trained on (chosen, rejected) pairs with the
Bradley–Terry loss (``loss_fn.type: bradley_terry``), exported as a Hugging Face
sequence-classification folder that GRPO scores with (the ``reward_model`` environment).

    ℓ = −log σ(r(x, y_c) − r(x, y_r) − m)        (Bradley & Terry 1952; Ouyang et al. 2022)

r(x, y) is the head's output at the last token of prompt x followed by response y;
m the pair's ``margin`` with ``loss_fn.use_margin`` (else 0). The pairs are DPO's
(:func:`dockyard.train.algorithms.dpo.parse_pair`: ``{"prompt", "chosen", "rejected"}``,
strings or chat messages, JSONL or Parquet, rendered and tokenised the same way), with an
optional numeric ``margin`` per pair (how much better the chosen response is; 0 when absent).
Pair i is two rows of a batch, chosen at 2i and rejected at 2i + 1; the worker
(:class:`dockyard.torch.reward.TorchRewardWorker`) keeps each pair in one micro-batch.

    evaluate(0)                                        # grpo.val_at_start
    for step in range(steps):
        pairs   = next B pairs                         # a seeded order, reshuffled per epoch
        metrics = worker.train_step(collate(pairs), BradleyTerryPairsLoss(loss))
        log(step + 1, metrics)                         # train/*
        evaluate(step + 1)                             # every grpo.val_period steps, and at
    worker.export_hf(output_dir)                       #   the end (grpo.val_at_end)

Held-out evaluation (``val/*``) from the scores of the held-out pairs: ``rm_accuracy`` = the
share of pairs with r_c > r_r (a tie counting half; chance is 0.5), ``rm_margin`` = mean
r_c − r_r, ``reward_chosen``, ``reward_rejected`` (mean r_c, r_r), ``reward_std`` (the spread
of all held-out scores), ``loss`` (Bradley–Terry over the held-out pairs, with their margins
under ``use_margin``). ``LOG_DIR/rm_accuracy.png`` plots the held-out and training accuracy.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.interfaces import TrainMetrics
from dockyard.core.rl.preference import BradleyTerryLoss, BradleyTerryPairsLoss
from dockyard.train.algorithms.dpo import (
    EncodedPair,
    collate_pairs,
    encode_pair,
    pair_steps,
    parse_pair,
)


class Trainer(Protocol):
    """What the RM driver calls: a :class:`dockyard.torch.reward.TorchRewardWorker`."""

    def get_scores(self, batch: Batch) -> np.ndarray: ...

    def train_step(self, batch: Batch, loss_fn: Any) -> TrainMetrics: ...

    def export_hf(self, path: str) -> str: ...


# --------------------------------------------------------------------------- data
def parse_rm_pair(record: dict[str, Any], where: str) -> dict[str, Any]:
    """:func:`parse_pair` and the optional numeric ``margin`` (0.0 when absent); ValueError
    naming ``where`` for a margin that is not a finite number."""
    pair = parse_pair(record, where)
    margin = record.get("margin", 0.0)
    if margin is None:
        margin = 0.0
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not np.isfinite(margin):
        raise ValueError(f"{where}: 'margin' must be a finite number, not {margin!r}")
    return {**pair, "margin": float(margin)}


@dataclass
class RMPair:
    """A pair's token ids (:class:`~dockyard.train.algorithms.dpo.EncodedPair`) and margin."""

    ids: EncodedPair
    margin: float = 0.0


def encode_rm_pairs(
    renderer: Any, pairs: list[dict[str, Any]], max_tokens: int | None, what: str
) -> list[RMPair]:
    """The pairs whose longer row fits ``max_tokens`` (``policy.max_total_sequence_length``),
    encoded as DPO encodes them; says how many were dropped (one line on stderr), ValueError
    when none is left."""
    encoded = [RMPair(encode_pair(renderer, p), float(p.get("margin", 0.0))) for p in pairs]
    kept = [e for e in encoded if max_tokens is None or len(e.ids) <= max_tokens]
    if encoded and not kept:
        raise ValueError(
            f"all {len(encoded)} {what} pairs are longer than {max_tokens} tokens: raise "
            "policy.max_total_sequence_length, or shorten them"
        )
    if len(kept) < len(encoded):
        print(
            f"dockyard rm: dropped {len(encoded) - len(kept)} of {len(encoded)} {what} pairs "
            f"longer than {max_tokens} tokens (policy.max_total_sequence_length)",
            file=sys.stderr,
            flush=True,
        )
    return kept


def collate_rm(pairs: list[RMPair], pad_id: int = 0) -> Batch:
    """DPO's rows (:func:`~dockyard.train.algorithms.dpo.collate_pairs`: chosen at 2i,
    rejected at 2i + 1) with each pair's margin on both its rows (``extras["margin"] [2B]``)."""
    batch = collate_pairs([p.ids for p in pairs], pad_id=pad_id)
    batch.extras["margin"] = np.repeat(np.array([p.margin for p in pairs], np.float32), 2)
    return batch


def pair_scores(worker: Trainer, pairs: list[RMPair], chunk: int = 64) -> np.ndarray:
    """``[N, 2]`` float64: each pair's (chosen, rejected) scores, ``chunk`` pairs per call."""
    out = [worker.get_scores(collate_rm(pairs[j : j + chunk])) for j in range(0, len(pairs), chunk)]
    return np.concatenate(out).astype(np.float64).reshape(-1, 2)


# --------------------------------------------------------------------------- evaluation
def rm_metrics(loss: BradleyTerryLoss, scores: np.ndarray, margins: np.ndarray) -> dict[str, float]:
    """The held-out metrics of the module docstring from ``[N, 2]`` pair scores."""
    rc, rr = scores[:, 0], scores[:, 1]
    value, _ = loss(rc, rr, margins)
    d = rc - rr
    return {
        "rm_accuracy": float(np.mean((d > 0) + 0.5 * (d == 0))),
        "rm_margin": float(np.mean(d)),
        "reward_chosen": float(np.mean(rc)),
        "reward_rejected": float(np.mean(rr)),
        "reward_std": float(np.std(scores)),
        "loss": float(value),
    }


# --------------------------------------------------------------------------- the loop
@dataclass
class RMResult:
    """``history``: each step's train metrics; ``val``: step -> held-out metrics (step 0:
    before training); ``output_dir``: the exported model (None: not exported); ``plot``: the
    accuracy curve's PNG (None: none drawn)."""

    history: list[dict[str, float]] = field(default_factory=list)
    val: dict[int, dict[str, float]] = field(default_factory=dict)
    output_dir: str | None = None
    plot: str | None = None


def _log(log: Any, step: int, metrics: dict[str, float]) -> None:
    if log is None:
        return
    log.log(step, metrics)
    if "val/rm_accuracy" in metrics:
        log.write(
            f"step {step}: held-out pair accuracy {metrics['val/rm_accuracy']:.3f}, margin "
            f"{metrics['val/rm_margin']:.4g}, loss {metrics['val/loss']:.4g}"
        )


def reward_modelling(
    worker: Trainer,
    renderer: Any,
    train_pairs: list[dict[str, Any]],
    val_pairs: list[dict[str, Any]],
    loss: BradleyTerryLoss,
    *,
    steps: int,
    batch_size: int,
    seed: int = 0,
    val_period: int = 0,
    val_at_start: bool = True,
    val_at_end: bool = True,
    max_tokens: int | None = None,
    output_dir: str | Path | None = None,
    log: Any = None,
    chunk: int = 64,
) -> RMResult:
    """Train ``worker`` for ``steps`` steps of ``batch_size`` pairs (module docstring).

    ``renderer``: a :class:`~dockyard.train.prompts.PromptRenderer` or a bare tokenizer.
    ``train_pairs`` / ``val_pairs``: :func:`parse_rm_pair`'s (or :func:`parse_pair`'s: no
    margin). ``loss``: ``BradleyTerryLoss.from_config(cfg.loss_fn)``. ``log``: a
    :class:`~dockyard.train.logging.MetricsLogger`. Held-out pairs are evaluated before the
    first step (``val_at_start``), every ``val_period`` steps and after the last
    (``val_at_end``); the model is exported to ``output_dir``."""
    train = encode_rm_pairs(renderer, train_pairs, max_tokens, "training")
    val = encode_rm_pairs(renderer, val_pairs, max_tokens, "held-out") if val_pairs else []
    if not train:
        raise ValueError("no reward-model training pairs")
    val_margins = np.array([p.margin for p in val], dtype=np.float64)
    result = RMResult()

    def evaluate(step: int) -> dict[str, float]:
        if not val:
            return {}
        m = rm_metrics(loss, pair_scores(worker, val, chunk), val_margins)
        result.val[step] = m
        return {f"val/{k}": v for k, v in m.items()}

    if val_at_start and val:
        _log(log, 0, evaluate(0))
    result.history = pair_steps(
        worker, len(train), lambda idx: collate_rm([train[i] for i in idx]),
        BradleyTerryPairsLoss(loss), evaluate, lambda step, m: _log(log, step, m),
        steps=steps, batch_size=batch_size, seed=seed, val_period=val_period,
        val_at_end=val_at_end,
    )  # fmt: skip
    if output_dir is not None:
        result.output_dir = worker.export_hf(str(output_dir))
    return result
