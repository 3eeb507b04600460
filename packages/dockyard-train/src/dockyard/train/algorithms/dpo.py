"""The DPO driver: a preference loss on (chosen, rejected) pairs, on the policy worker GRPO and
SFT train. Every variant of :func:`dockyard.core.rl.preference_loss` (``loss_fn.type``: dpo,
cdpo, ipo, dpop, rdpo, simpo, orpo; ``sft_weight`` blends in the chosen response's NLL).

A pair is ``{"prompt", "chosen", "rejected"}``: the prompt a string (one user message) or a list
of chat messages, each response a string or one assistant message. The prompt is rendered as
GRPO and SFT render theirs (:class:`~dockyard.train.prompts.PromptRenderer`: the chat template
or plain text, the system prompt and prompt files); a response is its content's tokens and the
end-of-turn token. Pair i is two rows of a batch, chosen at 2i and rejected at 2i + 1, each with
its loss mask on the response tokens; :class:`~dockyard.core.rl.PreferencePairsLoss` sums a row's
logprobs over the mask (π_c, π_r) and the worker keeps each pair in one micro-batch.

π_ref is the policy before its first step, so the reference logprobs (ρ_c, ρ_r) are one pass of
the policy over every pair, training and held-out, before training starts, cached and fed to the
loss as ``ref_logprobs``: no second copy of the model is kept (with LoRA the base is the
reference either way). SimPO and ORPO read no reference: the pass is skipped.

    ref     = response_logprobs(worker, train + val)   # once, before step 1 (not simpo / orpo)
    evaluate(0)                                        # grpo.val_at_start
    for step in range(steps):
        pairs   = next B pairs                         # a seeded order, reshuffled per epoch
        batch   = collate_pairs(pairs, ref[pairs])     # 2B rows, ref_logprobs on responses
        metrics = worker.train_step(batch, PreferencePairsLoss(loss))
        log(step + 1, metrics)                         # train/*
        evaluate(step + 1)                             # every grpo.val_period steps, and at
    worker.export_hf(output_dir)                       #   the end (grpo.val_at_end)

Held-out evaluation (``val/*``), with the implicit reward r(y) = β·(log π(y) − log π_ref(y))
(summed over the response) for the reference-based variants and r(y) = β·log π(y)/|y| for
SimPO / ORPO: ``preference_accuracy`` = the share of pairs with r_c > r_r, a tie counting half
(before the first step π = π_ref and every pair ties: 0.5); ``reward_margin`` = mean r_c − r_r;
``reward_chosen``, ``reward_rejected``; ``loss`` (the variant's, over the held-out pairs);
``logp_accuracy`` = the share whose mean token logprob is higher for the chosen response (the
policy's own preference, whatever the variant). Before the first step the held-out policy
logprobs are the reference pass's (the same weights).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dockyard.core.config import MasterConfig
from dockyard.core.experience import Batch
from dockyard.core.interfaces import LossFn, TrainMetrics
from dockyard.core.rl.preference import (
    REFERENCE_FREE,
    PreferenceLoss,
    PreferenceOptions,
    PreferencePairsLoss,
)
from dockyard.train.algorithms.pair_loop import PairResult, train_on_pairs
from dockyard.train.data import read_records
from dockyard.train.prompts import Messages, PromptRenderer

RowLogprobs = tuple[np.ndarray, np.ndarray]  # a pair's (chosen, rejected) response logprobs


class Trainer(Protocol):
    """What DPO calls: a :class:`~dockyard.core.interfaces.PolicyWorker` in this process (or
    the Ray fleet's ``TrainerClient``)."""

    def get_logprobs(self, batch: Batch) -> np.ndarray: ...

    def train_step(self, batch: Batch, loss_fn: LossFn) -> TrainMetrics: ...

    def export_hf(self, path: str) -> str: ...


# --------------------------------------------------------------------------- data
def _prompt(value: Any, where: str) -> Messages:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{where}: 'prompt' is empty")
        return [{"role": "user", "content": value}]
    ok = (
        isinstance(value, list)
        and value
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in value
        )
    )
    if not ok:
        raise ValueError(
            f"{where}: 'prompt' must be a string or a non-empty list of chat messages "
            "{'role': ..., 'content': ...}"
        )
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _response(value: Any, key: str, where: str) -> str:
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, list):
        one = value[0] if len(value) == 1 and isinstance(value[0], dict) else {}
        if one.get("role") != "assistant" or not isinstance(one.get("content"), str):
            raise ValueError(
                f"{where}: {key!r} must be a string or one assistant message "
                "[{'role': 'assistant', 'content': ...}]"
            )
        value = one["content"]
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key!r} must be a string, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{where}: {key!r} is an empty response")
    return value


def parse_pair(record: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"prompt": messages, "chosen": text, "rejected": text}`` of one record; ValueError
    naming ``where`` (``FILE:LINE``) for a missing field, a wrong type or an empty response."""
    missing = [k for k in ("prompt", "chosen", "rejected") if record.get(k) is None]
    if missing:
        have = ", ".join(sorted(record)) or "none"
        raise ValueError(
            f"{where}: a preference pair needs 'prompt', 'chosen' and 'rejected'; missing "
            f"{', '.join(map(repr, missing))} (fields: {have})"
        )
    return {
        "prompt": _prompt(record["prompt"], where),
        "chosen": _response(record["chosen"], "chosen", where),
        "rejected": _response(record["rejected"], "rejected", where),
    }


def load_pairs(path: str | Path, parse: Any = None) -> list[dict[str, Any]]:
    """The preference pairs of a JSONL or Parquet file (``parse(record, where)`` each, default
    :func:`parse_pair`; the RM driver's reads a margin too)."""
    parse = parse or parse_pair
    pairs = [parse(rec, where) for where, rec in read_records(path)]
    if not pairs:
        raise ValueError(f"{path}: no preference pairs")
    return pairs


def load_data(
    cfg: MasterConfig, parse: Any = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, held-out)`` pairs of a ``MasterConfig``: ``data.train_path`` and
    ``data.val_path``; without a val_path a seeded tenth of the training pairs (``grpo.seed``;
    at least one when there are two or more) is held out. At most ``grpo.max_val_samples``
    held-out pairs. ``parse``: as in :func:`load_pairs`."""
    if not cfg.data.train_path:  # (the drivers' pre-flight says so first)
        raise ValueError("data.train_path: set it to a JSONL of preference pairs")
    pairs = load_pairs(cfg.data.train_path, parse)
    cap = cfg.grpo.max_val_samples
    if cfg.data.val_path:
        return pairs, load_pairs(cfg.data.val_path, parse)[:cap]
    n_val = min(cap, max(1, len(pairs) // 10)) if len(pairs) > 1 else 0
    order = np.random.default_rng(cfg.grpo.seed).permutation(len(pairs))
    val = {int(i) for i in order[:n_val]}
    train = [p for i, p in enumerate(pairs) if i not in val]
    return train, [pairs[i] for i in sorted(val)]


@dataclass
class EncodedPair:
    """Token ids: the rendered prompt, and each response with its end-of-turn token."""

    prompt: list[int]
    chosen: list[int]
    rejected: list[int]

    def __len__(self) -> int:
        return len(self.prompt) + max(len(self.chosen), len(self.rejected))


def encode_pair(renderer: Any, pair: dict[str, Any]) -> EncodedPair:
    """``pair`` (:func:`parse_pair`'s) as token ids; ``renderer`` a :class:`PromptRenderer` or
    a bare tokenizer (its own chat template)."""
    r = PromptRenderer.wrap(renderer)
    eos = [int(r.tokenizer.eos_token_id)]
    return EncodedPair(
        r.prompt_ids(r.messages(pair["prompt"])),
        r.encode(pair["chosen"]) + eos,
        r.encode(pair["rejected"]) + eos,
    )


def encode_all(
    renderer: Any, pairs: list[dict[str, Any]], max_tokens: int | None, what: str
) -> list[EncodedPair]:
    """The pairs whose longer row fits ``max_tokens`` (``policy.max_total_sequence_length``);
    says how many were dropped (one line on stderr), ValueError when none is left."""
    encoded = [encode_pair(renderer, p) for p in pairs]
    kept = [e for e in encoded if max_tokens is None or len(e) <= max_tokens]
    if encoded and not kept:
        raise ValueError(
            f"all {len(encoded)} {what} pairs are longer than {max_tokens} tokens: raise "
            "policy.max_total_sequence_length, or shorten them"
        )
    if len(kept) < len(encoded):
        print(
            f"dockyard dpo: dropped {len(encoded) - len(kept)} of {len(encoded)} {what} pairs "
            f"longer than {max_tokens} tokens (policy.max_total_sequence_length)",
            file=sys.stderr,
            flush=True,
        )
    return kept


def collate_pairs(
    pairs: list[EncodedPair], ref: list[RowLogprobs] | None = None, pad_id: int = 0
) -> Batch:
    """``2·len(pairs)`` right-padded rows, pair i's chosen at 2i and rejected at 2i + 1;
    ``loss_mask`` on the response tokens; ``ref`` (the pairs' cached response logprobs) as
    ``ref_logprobs`` there (0 elsewhere)."""
    rows = [(p.prompt, resp) for p in pairs for resp in (p.chosen, p.rejected)]
    B, T = len(rows), max(len(p) + len(r) for p, r in rows)
    ids = np.full((B, T), pad_id, dtype=np.int64)
    att = np.zeros((B, T), dtype=bool)
    lm = np.zeros((B, T), dtype=bool)
    refs = None if ref is None else np.zeros((B, T), dtype=np.float32)
    for i, (prompt, resp) in enumerate(rows):
        n_p, n = len(prompt), len(prompt) + len(resp)
        ids[i, :n] = prompt + resp
        att[i, :n] = True
        lm[i, n_p:n] = True
        if refs is not None and ref is not None:
            refs[i, n_p:n] = ref[i // 2][i % 2]
    z = np.zeros((B, T), dtype=np.float32)
    return Batch(ids, att, lm, advantages=z, gen_logprobs=z, ref_logprobs=refs)


def response_logprobs(
    worker: Trainer, pairs: list[EncodedPair], chunk: int = 64
) -> list[RowLogprobs]:
    """Each pair's ``(chosen, rejected)`` per-token response logprobs under ``worker``'s
    current policy, ``chunk`` pairs per ``get_logprobs`` call."""
    out: list[RowLogprobs] = []
    for j in range(0, len(pairs), chunk):
        part = pairs[j : j + chunk]
        lp = worker.get_logprobs(collate_pairs(part))
        for k, p in enumerate(part):
            n = len(p.prompt)
            chosen = lp[2 * k, n : n + len(p.chosen)].astype(np.float64)
            rejected = lp[2 * k + 1, n : n + len(p.rejected)].astype(np.float64)
            out.append((chosen, rejected))
    return out


# --------------------------------------------------------------------------- evaluation
def _sums(rows: list[RowLogprobs]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    c = np.array([r[0].sum() for r in rows], dtype=np.float64)
    r_ = np.array([r[1].sum() for r in rows], dtype=np.float64)
    lc = np.array([len(r[0]) for r in rows], dtype=np.float64)
    lr = np.array([len(r[1]) for r in rows], dtype=np.float64)
    return c, r_, lc, lr


def _share(d: np.ndarray) -> float:
    """The share of ``d > 0``, a tie counting half."""
    return float(np.mean((d > 0) + 0.5 * (d == 0)))


def preference_metrics(
    loss: PreferenceLoss, policy: list[RowLogprobs], ref: list[RowLogprobs] | None
) -> dict[str, float]:
    """The held-out metrics of the module docstring from per-pair response logprobs."""
    pc, pr, lc, lr = _sums(policy)
    rc = rr = None
    if ref is not None:
        rc, rr, _, _ = _sums(ref)
    value, _ = loss(pc, pr, rc, rr, chosen_lengths=lc, rejected_lengths=lr)
    beta = float((loss.options or {}).get("beta", PreferenceOptions.beta))
    if rc is None or rr is None:
        r_c, r_r = beta * pc / lc, beta * pr / lr
    else:
        r_c, r_r = beta * (pc - rc), beta * (pr - rr)
    return {
        "preference_accuracy": _share(r_c - r_r),
        "reward_margin": float(np.mean(r_c - r_r)),
        "reward_chosen": float(np.mean(r_c)),
        "reward_rejected": float(np.mean(r_r)),
        "loss": float(value),
        "logp_accuracy": _share(pc / lc - pr / lr),
    }


DPOResult = PairResult  # what dpo() returns (pair_loop.py)


@dataclass
class DPOStrategy:
    """DPO's part of the pair loop (:mod:`.pair_loop`): rows rendered by ``renderer``, the
    reference pass (π_ref = the policy before its first step; none for SimPO / ORPO), the
    held-out preference metrics (at step 0: the reference pass's logprobs, the same weights)."""

    renderer: Any
    loss: PreferenceLoss
    max_tokens: int | None
    chunk: int = 64
    name: str = "DPO"
    ref_train: list[RowLogprobs] | None = None
    ref_val: list[RowLogprobs] | None = None

    @property
    def loss_fn(self) -> PreferencePairsLoss:
        return PreferencePairsLoss(self.loss)

    def encode(self, pairs: list[dict[str, Any]], what: str) -> list[EncodedPair]:
        return encode_all(self.renderer, pairs, self.max_tokens, what)

    def prepare(self, worker: Any, train: list[EncodedPair], val: list[EncodedPair]) -> None:
        if self.loss.variant not in REFERENCE_FREE:
            self.ref_train = response_logprobs(worker, train, self.chunk)
            self.ref_val = response_logprobs(worker, val, self.chunk)

    def batch(self, train: list[EncodedPair], idx: list[int]) -> Batch:
        refs = None if self.ref_train is None else [self.ref_train[i] for i in idx]
        return collate_pairs([train[i] for i in idx], refs)

    def evaluate(self, worker: Any, val: list[EncodedPair], step: int) -> dict[str, float]:
        policy = self.ref_val if step == 0 and self.ref_val is not None else None
        return preference_metrics(
            self.loss, policy or response_logprobs(worker, val, self.chunk), self.ref_val
        )

    def headline(self, step: int, metrics: dict[str, float]) -> str:
        m = metrics
        return (f"step {step}: held-out preference accuracy {m['val/preference_accuracy']:.3f}, "
                f"reward margin {m['val/reward_margin']:.4g}, loss {m['val/loss']:.4g}")  # fmt: skip


def dpo(
    worker: Trainer,
    renderer: Any,
    train_pairs: list[dict[str, Any]],
    val_pairs: list[dict[str, Any]],
    loss: PreferenceLoss,
    *,
    max_tokens: int | None = None,
    chunk: int = 64,
    **loop: Any,
) -> DPOResult:
    """Train ``worker`` on the pairs (see the module docstring): :func:`.pair_loop.
    train_on_pairs` with :class:`DPOStrategy`; ``loop`` its options (``steps``, ``batch_size``,
    ``seed``, ``val_period``, ``val_at_start``, ``val_at_end``, ``output_dir``, ``log``).

    ``renderer``: a :class:`PromptRenderer` (``PromptRenderer.from_config(cfg, tok)``) or a
    bare tokenizer. ``loss``: ``PreferenceLoss.from_config(cfg.loss_fn)``. ``max_tokens``: the
    longest pair kept (``policy.max_total_sequence_length``); ``chunk``: pairs per logprob
    call."""
    strategy = DPOStrategy(PromptRenderer.wrap(renderer), loss, max_tokens, chunk)
    return train_on_pairs(strategy, worker, train_pairs, val_pairs, **loop)
