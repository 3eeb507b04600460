"""Aggregating a per-token loss ``[B, T]`` into a scalar, with *global* normalisation.

With mask m, per-token loss ℓ, |y_b| = Σ_t m_bt, and N_tok / N_seq the loss-token / sequence
counts over the *whole* step (all micro-batches, all ranks: passed in, so that gradient
accumulation and data parallelism give the same gradient as one big batch):

* ``token-mean`` (DAPO, token-level loss):      Σ_bt m ℓ / N_tok
* ``seq-mean-token-mean`` (GRPO paper):         Σ_b (Σ_t m ℓ / |y_b|) / N_seq
* ``seq-mean-token-sum``:                       Σ_bt m ℓ / N_seq
* ``seq-mean-token-sum-norm`` (Dr.GRPO):        Σ_bt m ℓ / (N_seq · L),  L a constant length

References: DAPO (Yu et al. 2025, arXiv:2503.14476) §3.3; Dr.GRPO (Liu et al. 2025,
arXiv:2503.20783) §3.1.
"""

from __future__ import annotations

from typing import Any, Literal

from dockyard.core.rl._xp import Array, Namespace

AggMode = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]
AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


def aggregate(
    xp: Namespace,
    per_token: Array,
    m: Array,
    mode: str = "token-mean",
    num_loss_tokens: Any = None,
    num_sequences: Any = None,
    norm_length: float | None = None,
) -> Array:
    """Scalar loss from ``per_token [B, T]`` and float mask ``m [B, T]`` (see module doc).

    ``num_loss_tokens`` / ``num_sequences``: the global counts (None: this batch's own).
    """
    if mode == "token-mean":
        n = xp.sum(m) if num_loss_tokens is None else num_loss_tokens
        return xp.sum(per_token * m) / xp.maximum(n, 1.0)
    lens = xp.sum(m, axis=-1)
    n_seq = xp.sum(xp.to_float(lens > 0, m)) if num_sequences is None else num_sequences
    n_seq = xp.maximum(n_seq, 1.0)
    seq_sum = xp.sum(per_token * m, axis=-1)
    if mode == "seq-mean-token-mean":
        return xp.sum(seq_sum / xp.maximum(lens, 1.0)) / n_seq
    if mode == "seq-mean-token-sum":
        return xp.sum(seq_sum) / n_seq
    if mode == "seq-mean-token-sum-norm":
        if norm_length is None or norm_length <= 0:
            raise ValueError("seq-mean-token-sum-norm needs norm_length > 0 (e.g. max_new_tokens)")
        return xp.sum(seq_sum) / (n_seq * norm_length)
    raise ValueError(f"unknown loss aggregation {mode!r}; use one of {', '.join(AGG_MODES)}")


def masked_mean(xp: Namespace, x: Array, m: Array) -> Array:
    """Σ m·x / max(Σ m, 1)."""
    return xp.sum(x * m) / xp.maximum(xp.sum(m), 1.0)
