"""Teachers with other tokenizers: their next-token distributions on the student's tokens.

Three steps, for a student sample y (token ids of the student's tokenizer) and a teacher whose
tokenizer differs; they work through the *text*, so nothing about either model is assumed:

1. **Positions** (:func:`align_positions`). The sample is decoded to its text s and the
   teacher tokenises s (u_1..u_M). Student token t starts at character c_t (its pieces'
   lengths summed, :func:`char_starts`), teacher token j at d_j. Where c_t = d_j the two
   prefixes are the same text s[:c_t], so the teacher's distribution of token j and the
   student's of token t predict the same thing: t is *aligned* to j. A student token that
   starts inside a teacher token is unaligned and gets no teacher signal (the loss masks it).
2. **Vocabulary** (:func:`prefix_token_map`, :func:`project_to_student`): Byte-Prefix
   Marginalisation (BPM; "Cross-Tokenizer On-Policy Distillation via Byte-Prefix
   Marginalization", arXiv:2607.22334). Each teacher token v is mapped to m(v), the *longest*
   student token whose text is a prefix of v's text; the teacher's probability of the student's
   next token is the mass mapped to it,

       p_T→S(s) = Σ_{v : m(v) = s} p_T(v) / Σ_{v : m(v) ≠ ∅} p_T(v).

   This is the probability that the next text starts with s whenever s's text ends inside v
   (BPM: > 99 % of positions on real tokenizers).
3. **Several teachers** (:func:`combine_teachers`), weights w_k, w̃_k = w_k / Σ_j w_j over the
   teachers aligned at the position:

   * ``weighted_sum``:   p̄ = Σ_k w̃_k p_k  (the mixture; the forward KL to p̄ has the gradient
     of Σ_k w̃_k KL(p_k ‖ q_S), the weighted sum of the per-teacher losses);
   * ``average_logits``: log p̄ = Σ_k w̃_k log p_k − log Z (the weighted average of the teachers'
     logits — their log-probabilities — renormalised: a product of experts);
   * ``select_teacher``: per sample b, the teacher of highest posterior
     k*(b) = argmax_k (log w_k + ℓ_k(b)), ℓ_k(b) = log P_Tk(the response's text) (the sum of
     its token log-probabilities on its own tokenisation); p̄ = p_{k*(b)}.

   The result is a distribution over the student's vocabulary per student position: the
   top-k KL of :mod:`dockyard.core.rl.supervised` takes it as the teacher's "logits".
4. **OPD's token log-probabilities** (:func:`sampled_token_logprobs`): log π_T of the sampled
   student token's text, by the chain rule over the teacher tokens it spans when both its ends
   are teacher boundaries (exact), by BPM's projection when it ends inside one teacher token.

Which methods we follow, and why: ULD (Boizard et al. 2024, arXiv:2402.12030) compares *sorted*
probability vectors position by position, dropping token identity; DSKD (Zhang et al. 2024,
arXiv:2406.17328) learns projections between the models' hidden spaces (extra trained
parameters); GOLD (Hugging Face TRL, "Unlocking On-Policy Distillation for Any Model Family",
2025) aligns sequences through the text and matches vocabularies by identical token strings,
falling back to ULD for the rest. We align positions through the text as GOLD does (boundaries
at the same character), and keep token identity for *every* teacher token through BPM's prefix
map instead of GOLD's exact matches + ULD.

Departures: token texts are the tokenizers' decoded strings (BPM works on bytes: a token that
decodes to a partial UTF-8 character, "\\ufffd", maps nowhere, and its mass is renormalised
away instead of BPM's residual category); a student position inside a teacher token is
skipped, not given BPM's chain-factorised bound (GOLD merges such spans); a student token
longer than the teacher's next token gets, in the distribution of step 2, only the mass of
teacher tokens that start with its text (the teacher's later tokens are not chained in: a finer
teacher under-weights the student's long tokens — OPD's log-probabilities of step 4 chain them
exactly); the teacher reads its own canonical tokenisation of the student's text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dockyard.core.rl._xp import Array, namespace

COMBINATIONS = ("weighted_sum", "average_logits", "select_teacher")
LOG_FLOOR = -30.0
"""log p below this is treated as this (a student token no teacher token maps to)."""


def char_starts(pieces: Sequence[str]) -> np.ndarray:
    """``[n] int64`` character offset where each token starts, from the tokens' decoded texts
    (``pieces``, whose concatenation is the sequence's text)."""
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)[: len(pieces)]


def align_positions(student_starts: Any, teacher_starts: Any) -> np.ndarray:
    """``[n] int64``: for each student token t ≥ 1 (``student_starts [n]``: its first character;
    ``teacher_starts [M]`` the teacher tokens'), the teacher token j ≥ 1 that starts at the
    same character (its distribution predicts the same text), else −1; −1 at t = 0 (no
    distribution precedes the first token) and where a start is negative (unknown)."""
    first: dict[int, int] = {}
    for j, d in enumerate(teacher_starts):
        if j >= 1 and d >= 0:
            first.setdefault(int(d), j)
    out = np.full(len(student_starts), -1, dtype=np.int64)
    for t, c in enumerate(student_starts):
        if t >= 1 and c >= 0:
            out[t] = first.get(int(c), -1)
    return out


def sampled_token_logprobs(
    student_starts: Any,
    teacher_starts: Any,
    text_length: int,
    teacher_token_logprobs: Any,
    projected_logprobs: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """The teacher's log-probability of each sampled student token's *text* (OPD's
    log π_T(y_t)), for one sequence: ``(logprobs [n], scored [n] bool)``.

    Student token t covers characters [c_t, c_{t+1}) (c_n = ``text_length``); teacher token j
    starts at d_j and has log p_T(u_j) = ``teacher_token_logprobs[j]`` (its own tokenisation).
    With t aligned (some d_j = c_t, j ≥ 1):

    * the span ends at a teacher boundary too (d_j' = c_{t+1}, or the text's end): the chain
      rule, exactly, log P_T(text[c_t:c_{t+1}]) = Σ_{j ≤ j' : d_j' < c_{t+1}} log p_T(u_j');
    * it ends inside teacher token j (one teacher token covers it): BPM's projected
      log p_T→S(y_t) (``projected_logprobs[t]``, :func:`project_to_student`);
    * else (it ends inside a later teacher token) it is not scored.
    """
    n = len(student_starts)
    d = np.asarray(teacher_starts, dtype=np.int64)
    j_at = align_positions(student_starts, teacher_starts)
    bounds = {int(x) for x in d if x >= 0} | {int(text_length)}
    out = np.zeros(n, dtype=np.float64)
    on = np.zeros(n, dtype=bool)
    for t in range(n):
        j = int(j_at[t])
        if j < 1:
            continue
        end = int(student_starts[t + 1]) if t + 1 < n else int(text_length)
        if end < 0:
            continue
        inside = np.nonzero((d >= d[j]) & (d < end))[0]
        if end in bounds:
            out[t] = float(sum(teacher_token_logprobs[i] for i in inside))
            on[t] = True
        elif len(inside) == 1:
            out[t] = float(projected_logprobs[t])
            on[t] = True
    return out, on


def prefix_token_map(
    teacher_pieces: Sequence[str | None],
    student_pieces: Sequence[str | None],
    *,
    fixed: Mapping[int, int] | None = None,
) -> np.ndarray:
    """``[V_T] int64``: m(v), the student id of the longest student token text that is a prefix
    of teacher token v's text (BPM), −1 where none is. ``None`` (or "", or a text holding
    "\\ufffd") takes no part on either side; ``fixed`` sets m(v) for some teacher ids outright
    (special tokens: the teacher's end of sequence -> the student's). Among student ids of
    one text the lowest wins."""
    by_text: dict[str, int] = {}
    for s, text in enumerate(student_pieces):
        if text and "\ufffd" not in text:
            by_text.setdefault(text, s)
    longest = max((len(t) for t in by_text), default=0)
    out = np.full(len(teacher_pieces), -1, dtype=np.int64)
    for v, text in enumerate(teacher_pieces):
        if not text or "\ufffd" in text:
            continue
        for n in range(min(len(text), longest), 0, -1):
            s = by_text.get(text[:n])
            if s is not None:
                out[v] = s
                break
    for v, s in (fixed or {}).items():
        out[v] = s
    return out


def project_to_student(teacher_logprobs: Array, token_map: Any, student_vocab: int) -> Array:
    """p_T→S ``[..., V_S]`` (probabilities, each row summing to 1 or, with no mass mapped, 0)
    from the teacher's log-probabilities ``[..., V_T]`` and m = ``token_map [V_T]``."""
    xp = namespace(teacher_logprobs)
    m = np.asarray(token_map)
    keep = np.nonzero(m >= 0)[0]
    p = xp.exp(xp.promote_half(teacher_logprobs))
    out = _scatter_add_last(p, keep, m[keep], student_vocab)
    mass = xp.sum(out, axis=-1, keepdims=True)
    return out / xp.maximum(mass, 1e-30)


def combine_teachers(
    probs: Sequence[Array],
    aligned: Sequence[Array],
    weights: Sequence[float],
    mode: str = "weighted_sum",
    scores: Sequence[Array] | None = None,
) -> tuple[Array, Array]:
    """One distribution per student position from N teachers (module docstring, step 3).

    Args:
        probs: N arrays ``[B, T, V]``, each teacher's p_k on the student's vocabulary.
        aligned: N bool arrays ``[B, T]``, where teacher k has a distribution.
        weights: the N weights w_k > 0.
        mode: ``weighted_sum`` | ``average_logits`` | ``select_teacher``.
        scores: N arrays ``[B]``, ℓ_k(b) (``select_teacher`` only).

    Returns:
        ``(log p̄ [B, T, V], aligned [B, T] bool)``: log p̄ floored at :data:`LOG_FLOOR`, and
        where any (``select_teacher``: the chosen) teacher is aligned; log p̄ = LOG_FLOOR
        elsewhere.
    """
    if mode not in COMBINATIONS:
        raise ValueError(f"teacher_combination {mode!r}: use one of {', '.join(COMBINATIONS)}")
    if not (len(probs) == len(aligned) == len(weights)) or not probs:
        raise ValueError(f"{len(probs)} teachers, {len(aligned)} masks, {len(weights)} weights")
    if any(w <= 0 for w in weights):
        raise ValueError(f"teacher weights must be > 0, got {list(weights)}")
    xp = namespace(*probs)
    P = xp.stack([xp.promote_half(p) for p in probs])  # [N, B, T, V]
    A = xp.stack([xp.to_float(a, P) for a in aligned])  # [N, B, T]
    w = xp.asarray(list(weights), P)
    if mode == "select_teacher":
        if scores is None:
            raise ValueError("select_teacher needs the teachers' scores ℓ_k(b)")
        S = xp.stack([xp.to_float(s, P) for s in scores])  # [N, B]
        post = S + xp.log(xp.expand_dims(w, -1))
        best = xp.max(post, axis=0, keepdims=True)
        # the first teacher of highest posterior: a one-hot over N
        hit = xp.to_float(post >= best, P)
        first = xp.to_float(_cumsum0(xp, hit) == 1.0, P) * hit  # [N, B]
        W = xp.expand_dims(first, -1) * A  # [N, B, T]
    else:
        W = xp.expand_dims(xp.expand_dims(w, -1), -1) * A
    total = xp.sum(W, axis=0)  # [B, T]
    on = total > 0
    Wn = xp.expand_dims(W / xp.maximum(xp.expand_dims(total, 0), 1e-30), -1)  # [N, B, T, 1]
    if mode == "average_logits":
        logs = xp.sum(Wn * xp.log(xp.maximum(P, float(np.exp(LOG_FLOOR)))), axis=0)
        logs = logs - xp.logsumexp(logs, axis=-1, keepdims=True)
    else:
        logs = xp.log(xp.maximum(xp.sum(Wn * P, axis=0), float(np.exp(LOG_FLOOR))))
    logs = xp.maximum(logs, LOG_FLOOR)
    logs = xp.where(xp.expand_dims(on, -1), logs, LOG_FLOOR)
    return logs, on


def _cumsum0(xp: Any, x: Array) -> Array:
    """Cumulative sum over axis 0."""
    if xp.name == "torch":
        return xp.m.cumsum(x, dim=0)
    return xp.m.cumsum(x, axis=0)


def _scatter_add_last(p: Array, cols: np.ndarray, to: np.ndarray, size: int) -> Array:
    """``out[..., to[i]] += p[..., cols[i]]`` into zeros ``[..., size]`` (numpy, torch, JAX)."""
    xp = namespace(p)
    m: Any = xp.m
    if xp.name == "torch":
        torch = m
        c = torch.as_tensor(cols, device=p.device)
        t = torch.as_tensor(to, device=p.device)
        out = p.new_zeros((*p.shape[:-1], size))
        return out.index_add(-1, t, p.index_select(-1, c))
    if xp.name == "jax":
        out: Any = m.zeros((*p.shape[:-1], size), dtype=p.dtype)
        return out.at[..., to].add(p[..., cols])
    flat = np.zeros((int(np.prod(p.shape[:-1])), size), dtype=p.dtype)
    src = np.asarray(p).reshape(-1, p.shape[-1])[:, cols]
    rows = np.arange(flat.shape[0])[:, None]
    np.add.at(flat, (rows, to[None, :]), src)
    return flat.reshape(*p.shape[:-1], size)
