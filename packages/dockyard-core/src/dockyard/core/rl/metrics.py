"""Combining a loss's metrics over micro-batches and ranks into the step's.

A loss returns scalar metrics of one micro-batch. The step's value of a mean (``clip_fraction``,
``logprob_mismatch_mean``) is the loss-token-weighted mean of the micro-batches' values; of an
extreme (a name ending in ``_max`` / ``_min``: ``logprob_mismatch_max``, ``is_weight_min``) it
is the largest / smallest of them — averaging those would under-report the worst token. The
trainers accumulate with :func:`add_metric`, merge ranks with :func:`merge_metrics` and
finish with :func:`final_metrics`; ``loss`` is summed (each micro-batch's loss is already
normalised by the whole batch's counts).
"""

from __future__ import annotations

from collections.abc import Sequence


def _kind(key: str) -> str:
    if key == "loss":
        return "sum"
    if key.endswith("_max"):
        return "max"
    if key.endswith("_min"):
        return "min"
    return "mean"


def add_metric(acc: dict[str, float], key: str, value: float, weight: float) -> None:
    """Fold one micro-batch's ``value`` of ``key`` (``weight``: its loss tokens) into ``acc``."""
    kind = _kind(key)
    if kind == "sum":
        acc[key] = acc.get(key, 0.0) + value
    elif kind == "max":
        acc[key] = max(acc.get(key, value), value)
    elif kind == "min":
        acc[key] = min(acc.get(key, value), value)
    elif weight > 0:  # a micro-batch without loss tokens says nothing about a mean
        acc[key] = acc.get(key, 0.0) + value * weight


def merge_metrics(parts: list[dict[str, float]]) -> dict[str, float]:
    """Accumulators of several ranks as one (:func:`add_metric`'s, before :func:`final_metrics`)."""
    out: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            kind = _kind(key)
            if key not in out:
                out[key] = value
            elif kind == "max":
                out[key] = max(out[key], value)
            elif kind == "min":
                out[key] = min(out[key], value)
            else:
                out[key] += value
    return out


def final_metrics(acc: dict[str, float], num_loss_tokens: float) -> dict[str, float]:
    """The step's metrics: weighted sums divided by the step's loss tokens."""
    n = max(num_loss_tokens, 1.0)
    return {k: v / n if _kind(k) == "mean" else v for k, v in acc.items()}


def router_metrics(load: Sequence[Sequence[float]], dropped: float = 0.0) -> dict[str, float]:
    """A Mixture-of-Experts step's router metrics from its per-expert loads ``load [layers, E]``
    (assignments, all ranks) and the assignments ``dropped`` by a capacity (0: dropless):

    * ``moe/expert_load/<i>``: expert ``i``'s share of the step's assignments, averaged over the
      layers (the shares sum to 1 over ``i``);
    * ``moe/load_imbalance``: ``max_i c_i / c̄`` averaged over the layers (1: balanced);
    * ``moe/dropped_tokens`` and ``moe/dropped_frac`` (of all assignments).
    """
    rows = [[float(c) for c in layer] for layer in load]
    shares = [[c / max(sum(r), 1.0) for c in r] for r in rows]
    experts = len(rows[0]) if rows else 0
    out = {
        f"moe/expert_load/{i}": sum(s[i] for s in shares) / max(len(rows), 1)
        for i in range(experts)
    }
    out["moe/load_imbalance"] = sum(max(r) / max(sum(r) / len(r), 1e-12) for r in rows) / max(
        len(rows), 1
    )
    out["moe/dropped_tokens"] = float(dropped)
    out["moe/dropped_frac"] = float(dropped) / max(sum(sum(r) for r in rows), 1.0)
    return out
