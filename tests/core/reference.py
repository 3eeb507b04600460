"""Plain float64 reference implementations for the policy-gradient losses: Python loops over
tokens, written from the papers' formulas, sharing no code with dockyard.core.rl."""

from __future__ import annotations

import math

import numpy as np

CLAMP = 20.0


def _c(x: float) -> float:
    return max(-CLAMP, min(CLAMP, x))


def kl_ref(lp: float, ref: float, kind: str) -> float:
    x = _c(ref - lp)
    return {"k1": -x, "k2": 0.5 * x * x, "k3": math.exp(x) - x - 1.0}[kind]


def is_weights_ref(prev, gen, mask, kind, wmax, wmin):
    B, T = prev.shape
    w = np.zeros((B, T))
    lo = 0.0 if wmin is None else wmin
    for b in range(B):
        idx = [t for t in range(T) if mask[b, t]]
        logw = {t: _c(prev[b, t] - gen[b, t]) for t in idx}
        keep_seq = True
        if kind == "seq-mask-tis" and idx:
            g = math.exp(sum(logw.values()) / len(idx))
            keep_seq = lo <= g <= wmax
        for t in idx:
            x = math.exp(logw[t])
            if kind == "tis":
                x = max(x, lo)
                x = x if wmax is None else min(x, wmax)
            elif kind == "icepop":
                x = x if lo <= x <= wmax else 0.0
            elif kind == "seq-mask-tis":
                x = x if keep_seq else 0.0
            w[b, t] = x
    return w


def aggregate_ref(per, mask, agg, norm_length=None):
    B, T = per.shape
    n_tok = sum(1 for b in range(B) for t in range(T) if mask[b, t])
    seqs = [[per[b, t] for t in range(T) if mask[b, t]] for b in range(B)]
    n_seq = sum(1 for s in seqs if s)
    if agg == "token-mean":
        return sum(sum(s) for s in seqs) / max(n_tok, 1)
    if agg == "seq-mean-token-mean":
        return sum(sum(s) / len(s) for s in seqs if s) / max(n_seq, 1)
    if agg == "seq-mean-token-sum":
        return sum(sum(s) for s in seqs) / max(n_seq, 1)
    return sum(sum(s) for s in seqs) / (max(n_seq, 1) * norm_length)


def clipped_pg_ref(
    lp,
    prev,
    gen,
    ref,
    adv,
    mask,
    *,
    eps_low=0.2,
    eps_high=0.2,
    c=None,
    beta=0.0,
    kl="k3",
    is_on=False,
    is_type="tis",
    wmax=None,
    wmin=None,
    gspo=False,
    agg="token-mean",
    norm_length=None,
    cispo=False,
):
    B, T = lp.shape
    w = is_weights_ref(prev, gen, mask, is_type, wmax, wmin) if is_on else np.ones((B, T))
    per = np.zeros((B, T))
    for b in range(B):
        idx = [t for t in range(T) if mask[b, t]]
        if not idx:
            continue
        seq_r = math.exp(_c(sum(lp[b, t] - prev[b, t] for t in idx) / len(idx)))
        A = float(adv[b])
        for t in idx:
            r = seq_r if gspo else math.exp(_c(lp[b, t] - prev[b, t]))
            clipped = min(max(r, 1 - eps_low), 1 + eps_high)
            if cispo:
                loss = -clipped * A * lp[b, t]
            else:
                J = min(r * A, clipped * A)
                if c is not None and A < 0:
                    J = max(J, c * A)
                loss = -J
            if beta:
                loss += beta * kl_ref(lp[b, t], ref[b, t], kl)
            per[b, t] = w[b, t] * loss
    return aggregate_ref(per, mask, agg, norm_length)
