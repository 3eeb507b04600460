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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dockyard.core.experience import Batch
from dockyard.core.interfaces import LossFn, TrainMetrics
from dockyard.core.rl.preference import (
    REFERENCE_FREE,
    PreferenceLoss,
    PreferenceOptions,
    PreferencePairsLoss,
)
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


def load_data(cfg: Any, parse: Any = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, held-out)`` pairs of a ``MasterConfig``: ``data.train_path`` and
    ``data.val_path``; without a val_path a seeded tenth of the training pairs (``grpo.seed``;
    at least one when there are two or more) is held out. At most ``grpo.max_val_samples``
    held-out pairs. ``parse``: as in :func:`load_pairs`."""
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


# --------------------------------------------------------------------------- the loop
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


def loop_options(cfg: Any) -> dict[str, Any]:
    """The keyword options of a pair driver's loop (:func:`dpo`, the reward model's) from a
    ``MasterConfig``: steps, pairs per step, seed, held-out evaluation, the length cap."""
    p, g = cfg.policy, cfg.grpo
    return {
        "steps": g.max_num_steps,
        "batch_size": p.train_global_batch_size,
        "seed": g.seed,
        "val_period": g.val_period,
        "val_at_start": g.val_at_start,
        "val_at_end": g.val_at_end,
        "max_tokens": p.max_total_sequence_length,
    }


@dataclass
class DPOResult:
    """``history``: each step's train metrics; ``val``: step -> held-out metrics (step 0:
    before training); ``output_dir``: the exported model (None: not exported)."""

    history: list[dict[str, float]] = field(default_factory=list)
    val: dict[int, dict[str, float]] = field(default_factory=dict)
    output_dir: str | None = None


def _log(log: Any, step: int, metrics: dict[str, float]) -> None:
    if log is None:
        return
    log.log(step, metrics)
    if "val/preference_accuracy" in metrics:
        log.write(
            f"step {step}: held-out preference accuracy {metrics['val/preference_accuracy']:.3f}"
            f", reward margin {metrics['val/reward_margin']:.4g}, loss {metrics['val/loss']:.4g}"
        )


def dpo(
    worker: Trainer,
    renderer: Any,
    train_pairs: list[dict[str, Any]],
    val_pairs: list[dict[str, Any]],
    loss: PreferenceLoss,
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
) -> DPOResult:
    """Train ``worker`` for ``steps`` steps of ``batch_size`` pairs (see the module docstring).

    ``renderer``: a :class:`PromptRenderer` (``PromptRenderer.from_config(cfg, tok)``) or a
    bare tokenizer. ``loss``: ``PreferenceLoss.from_config(cfg.loss_fn)``. ``log``: a
    :class:`~dockyard.train.logging.MetricsLogger` (``train/*``, ``val/*``). Held-out pairs are
    evaluated before the first step (``val_at_start``), every ``val_period`` steps and after
    the last (``val_at_end``); the model is exported to ``output_dir``."""
    train = encode_all(renderer, train_pairs, max_tokens, "training")
    val = encode_all(renderer, val_pairs, max_tokens, "held-out") if val_pairs else []
    if not train:
        raise ValueError("no DPO training pairs")
    ref_train = ref_val = None
    if loss.variant not in REFERENCE_FREE:  # π_ref = this policy, before its first step
        ref_train = response_logprobs(worker, train, chunk)
        ref_val = response_logprobs(worker, val, chunk)
    result = DPOResult()

    def evaluate(step: int, policy: list[RowLogprobs] | None = None) -> dict[str, float]:
        if not val:
            return {}
        m = preference_metrics(loss, policy or response_logprobs(worker, val, chunk), ref_val)
        result.val[step] = m
        return {f"val/{k}": v for k, v in m.items()}

    if val_at_start and val:
        _log(log, 0, evaluate(0, ref_val))

    def batch(idx: list[int]) -> Batch:
        refs = None if ref_train is None else [ref_train[i] for i in idx]
        return collate_pairs([train[i] for i in idx], refs)

    result.history = pair_steps(
        worker, len(train), batch, PreferencePairsLoss(loss), evaluate,
        lambda step, m: _log(log, step, m),
        steps=steps, batch_size=batch_size, seed=seed, val_period=val_period,
        val_at_end=val_at_end,
    )  # fmt: skip
    if output_dir is not None:
        result.output_dir = worker.export_hf(str(output_dir))
    return result
