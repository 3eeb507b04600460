"""Several frozen teachers on the torch worker, each seen on the student's tokens.

For a micro-batch of student sequences (ids ``[b, T]``), every teacher k gives

    p_k    [b, T, V_S]  its next-token distribution at each student position, on the student's
                        vocabulary (position t: the distribution of token t, as the logprobs);
    a_k    [b, T] bool  where it has one;
    ℓ_k    [b]          log P_Tk(the response's text): ``select_teacher``'s score;
    y_k    [b, T]       log π_Tk of each sampled student token's text, with where it has one
                        (OPD: exact for its own vocabulary; otherwise the chain rule over the
                        teacher tokens the student token spans, ``sampled_token_logprobs``).

A teacher whose tokenizer has the student's vocabulary reads the student's ids as they are
(p_k = softmax of its logits, a_k: every token but the first). Another tokenizer's teacher reads
its own tokenisation of the decoded text, and :mod:`dockyard.core.rl.cross_tokenizer` aligns its
positions (same character start) and projects its vocabulary (BPM's longest-prefix map, built
once per teacher here). :func:`combined_topk` makes the distillation loss's target from them
(``combine_teachers``, then top-k); ``y_k`` is what an OPD loss gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dockyard.core.rl.cross_tokenizer import (
    LOG_FLOOR,
    align_positions,
    char_starts,
    combine_teachers,
    prefix_token_map,
    project_to_student,
    sampled_token_logprobs,
)


@dataclass
class Teacher:
    """One loaded teacher: ``tokenizer``/``token_map`` are None when it shares the student's
    vocabulary."""

    model: torch.nn.Module
    weight: float
    tokenizer: Any = None
    token_map: np.ndarray | None = None


def load_tokenizer(name: str) -> Any:
    # lazy: transformers takes ~2 s to import; only teachers with their own tokenizer need it
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def build_teacher(model: torch.nn.Module, name: str, weight: float, student_tok: Any) -> Teacher:
    """A :class:`Teacher` for the model loaded from ``name``; its tokenizer is compared with
    the student's (``student_tok``) and, where they differ, the BPM map is built."""
    tok = load_tokenizer(name)
    if tok.get_vocab() == student_tok.get_vocab():
        return Teacher(model, weight)
    config: Any = model.config
    n_t = int(config.vocab_size)  # the teacher's logits' width
    teacher_pieces = _pieces(tok, n_t)
    student_pieces = _pieces(student_tok, len(student_tok))
    special_s = set(student_tok.all_special_ids)
    student_pieces = [None if i in special_s else p for i, p in enumerate(student_pieces)]
    fixed: dict[int, int] = {}
    by_text = {student_tok.convert_ids_to_tokens(i): i for i in special_s}
    for i in tok.all_special_ids:  # special tokens by name; the end of text to the student's
        teacher_pieces[i] = None
        if (s := by_text.get(tok.convert_ids_to_tokens(i))) is not None:
            fixed[i] = s
    if tok.eos_token_id is not None and student_tok.eos_token_id is not None:
        fixed[int(tok.eos_token_id)] = int(student_tok.eos_token_id)
    token_map = prefix_token_map(teacher_pieces, student_pieces, fixed=fixed)
    return Teacher(model, weight, tok, token_map)


def _pieces(tok: Any, n: int) -> list[str | None]:
    size = len(tok)
    return [tok.decode([i]) if i < size else None for i in range(n)]


def sequence_starts(tok: Any, ids: list[int]) -> tuple[str, np.ndarray]:
    """``(text, starts [n])``: the decoded text of ``ids`` and each token's first character
    (−1 where a token ends inside a character: a partial UTF-8 byte sequence)."""
    pieces = [tok.decode([i]) for i in ids]
    text = tok.decode(ids)
    if "".join(pieces) == text:
        return text, char_starts(pieces)
    starts = []
    for t in range(len(ids)):
        prefix = tok.decode(ids[:t])
        starts.append(-1 if prefix.endswith("\ufffd") else len(prefix))
    return text, np.asarray(starts, dtype=np.int64)


class TeacherSet:
    """The worker's teachers; ``forward(model, idx)`` runs a same-vocabulary teacher the way the
    student runs (packing included) and returns its per-token logits ``[b, T, V]`` aligned
    like the logprobs (the worker's ``_aligned_logits``)."""

    def __init__(self, teachers: list[Teacher], student_tok: Any, mode: str) -> None:
        self.teachers, self.student_tok, self.mode = teachers, student_tok, mode

    @property
    def weights(self) -> list[float]:
        return [t.weight for t in self.teachers]

    def views(
        self, same_vocab_logits: Any, ids: np.ndarray, lengths: np.ndarray, idx: list[int],
        loss_mask: np.ndarray, vocab: int, device: torch.device,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[Any]]:  # fmt: skip
        """``(p_k [b, T, V_S], a_k [b, T], ℓ_k [b], (y_k [b, T], its mask [b, T]))`` per teacher
        (module docstring); ``same_vocab_logits(model)`` gives a same-vocabulary teacher's
        aligned logits."""
        width = int(lengths[idx].max())
        cols = torch.arange(width, device=device)[None, :]
        valid = (cols >= 1) & (cols < torch.as_tensor(lengths[idx], device=device)[:, None])
        lm = torch.as_tensor(loss_mask[idx, :width], device=device)
        probs, aligned, scores, tokens = [], [], [], []
        with torch.no_grad():
            for t in self.teachers:
                if t.tokenizer is None:
                    logits = same_vocab_logits(t.model)[..., :vocab]
                    lp = torch.log_softmax(logits.float(), -1)
                    y = torch.as_tensor(ids[idx, :width], device=device)[..., None]
                    tok_lp = lp.gather(-1, y)[..., 0]
                    probs.append(lp.exp() * valid[..., None])
                    aligned.append(valid)
                    scores.append((tok_lp * (lm & valid)).sum(-1))
                    tokens.append((tok_lp * valid, valid))
                else:
                    p, a, s, y = self._cross(t, ids, lengths, idx, loss_mask, width, vocab, device)
                    probs.append(p)
                    aligned.append(a)
                    scores.append(s)
                    tokens.append(y)
        return probs, aligned, scores, tokens

    def _cross(
        self, t: Teacher, ids: np.ndarray, lengths: np.ndarray, idx: list[int],
        loss_mask: np.ndarray, width: int, vocab: int, device: torch.device,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:  # fmt: skip
        rows, where, first_char, spans = [], [], [], []
        for r in idx:
            n = int(lengths[r])
            text, s_starts = sequence_starts(self.student_tok, ids[r, :n].tolist())
            t_ids = t.tokenizer(text, add_special_tokens=False)["input_ids"]
            _, t_starts = sequence_starts(t.tokenizer, t_ids)
            rows.append(t_ids)
            where.append(align_positions(s_starts, t_starts))
            resp = np.nonzero(loss_mask[r, :n])[0]
            c0 = int(s_starts[resp[0]]) if len(resp) else len(text)
            first_char.append((c0, t_starts))
            spans.append((s_starts, len(text)))
        m = max(len(r) for r in rows)
        t_in = torch.zeros((len(rows), m), dtype=torch.int64, device=device)
        att = torch.zeros((len(rows), m), dtype=torch.int64, device=device)
        for i, r in enumerate(rows):
            t_in[i, : len(r)] = torch.as_tensor(r, device=device)
            att[i, : len(r)] = 1
        logits = t.model(input_ids=t_in, attention_mask=att, use_cache=False).logits.float()
        lp = torch.nn.functional.pad(torch.log_softmax(logits[:, :-1], -1), (0, 0, 1, 0))
        tok_lp = lp.gather(-1, t_in[..., None])[..., 0]  # [b, M]: log p_T(u_j), 0 at j = 0
        j = torch.as_tensor(np.stack([np.pad(w, (0, width - len(w)), constant_values=-1)
                                      for w in where]), device=device)  # fmt: skip
        a = j >= 1
        picked = lp.gather(1, j.clamp(min=0)[..., None].expand(-1, -1, lp.shape[-1]))
        p = project_to_student(picked, t.token_map, vocab) * a[..., None]
        score = []
        for i, (c0, starts) in enumerate(first_char):
            keep = torch.as_tensor(starts >= c0, device=device)
            score.append((tok_lp[i, : len(starts)] * keep).sum())
        # OPD: each sampled token's log-probability (chain rule; BPM inside one teacher token)
        y = torch.as_tensor(ids[idx, :width], device=device)[..., None]
        proj = torch.log(p.gather(-1, y)[..., 0].clamp(min=float(np.exp(LOG_FLOOR))))
        y_lp = torch.zeros((len(idx), width), dtype=torch.float32, device=device)
        y_on = torch.zeros((len(idx), width), dtype=torch.bool, device=device)
        for i, (s_starts, n_chars) in enumerate(spans):
            t_starts = first_char[i][1]
            lp_i, on_i = sampled_token_logprobs(s_starts, t_starts, n_chars,
                                                tok_lp[i, : len(t_starts)].tolist(),
                                                proj[i, : len(s_starts)].tolist())  # fmt: skip
            y_lp[i, : len(lp_i)] = torch.as_tensor(lp_i, device=device)
            y_on[i, : len(on_i)] = torch.as_tensor(on_i, device=device)
        return p, a, torch.stack(score), (y_lp, y_on)

    def combined_topk(
        self, probs: list[torch.Tensor], aligned: list[torch.Tensor], scores: list[torch.Tensor],
        k: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """The distillation target: ``(log p̄ top-k values [b, T, k], their ids, aligned
        [b, T])`` (log p̄ is a valid logit vector: the loss's softmax over the top-k
        renormalises it)."""
        logs, on = combine_teachers(probs, aligned, self.weights, self.mode, scores)
        v, i = torch.topk(logs, k, dim=-1)
        return v * on[..., None], i * on[..., None], on
