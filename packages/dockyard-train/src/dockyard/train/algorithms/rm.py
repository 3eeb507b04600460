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
from typing import Any, Protocol

import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.interfaces import TrainMetrics
from dockyard.core.rl.preference import BradleyTerryLoss, BradleyTerryPairsLoss
from dockyard.train.algorithms.dpo import EncodedPair, collate_pairs, encode_pair, parse_pair
from dockyard.train.algorithms.pair_loop import PairResult, train_on_pairs


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
RMResult = PairResult  # what reward_modelling() returns (pair_loop.py)


@dataclass
class RMStrategy:
    """The reward model's part of the pair loop (:mod:`.pair_loop`): rows with each pair's
    margin, no reference pass, the held-out metrics from the pairs' scores."""

    renderer: Any
    loss: BradleyTerryLoss
    max_tokens: int | None
    chunk: int = 64
    name: str = "reward-model"
    margins: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def loss_fn(self) -> BradleyTerryPairsLoss:
        return BradleyTerryPairsLoss(self.loss)

    def encode(self, pairs: list[dict[str, Any]], what: str) -> list[RMPair]:
        return encode_rm_pairs(self.renderer, pairs, self.max_tokens, what)

    def prepare(self, worker: Any, train: list[RMPair], val: list[RMPair]) -> None:
        self.margins = np.array([p.margin for p in val], dtype=np.float64)

    def batch(self, train: list[RMPair], idx: list[int]) -> Batch:
        return collate_rm([train[i] for i in idx])

    def evaluate(self, worker: Any, val: list[RMPair], step: int) -> dict[str, float]:
        return rm_metrics(self.loss, pair_scores(worker, val, self.chunk), self.margins)

    def headline(self, step: int, metrics: dict[str, float]) -> str:
        m = metrics
        return (f"step {step}: held-out pair accuracy {m['val/rm_accuracy']:.3f}, margin "
                f"{m['val/rm_margin']:.4g}, loss {m['val/loss']:.4g}")  # fmt: skip


def reward_modelling(
    worker: Trainer,
    renderer: Any,
    train_pairs: list[dict[str, Any]],
    val_pairs: list[dict[str, Any]],
    loss: BradleyTerryLoss,
    *,
    max_tokens: int | None = None,
    chunk: int = 64,
    **loop: Any,
) -> RMResult:
    """Train ``worker`` on the pairs (module docstring): :func:`.pair_loop.train_on_pairs` with
    :class:`RMStrategy`; ``loop`` its options (``steps``, ``batch_size``, ``seed``,
    ``val_period``, ``val_at_start``, ``val_at_end``, ``output_dir``, ``log``).

    ``renderer``: a :class:`~dockyard.train.prompts.PromptRenderer` or a bare tokenizer.
    ``train_pairs`` / ``val_pairs``: :func:`parse_rm_pair`'s (or :func:`parse_pair`'s: no
    margin). ``loss``: ``BradleyTerryLoss.from_config(cfg.loss_fn)``."""
    return train_on_pairs(RMStrategy(renderer, loss, max_tokens, chunk), worker, train_pairs,
                          val_pairs, **loop)  # fmt: skip
