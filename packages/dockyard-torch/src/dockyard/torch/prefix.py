"""Shared-prefix layout: the sequences of a micro-batch as one token tree, each shared prefix
forwarded once.

In GRPO a prompt is trained G times, a DPO pair repeats its prompt, and the trajectories of one
multi-turn task agree up to the turn where they diverge. Here the sequences of a micro-batch are
merged into a prefix tree (a radix trie over their token ids) laid out as one row of ``N``
distinct tree nodes, with

* ``position_ids[q]`` = the depth of node q (its position in every sequence through it), and
* ``mask[q, k]`` = k is q or an ancestor of q (a token attends exactly to its own prefix),

so every node's hidden state — hence every logit, logprob, loss and gradient — is the one the
unshared forward computes for any sequence through that node (Prefix Grouper, arXiv 2506.05433,
shows the same for one shared prompt; the tree extends it to the longest common token prefix of
any two sequences). Only the order of floating-point sums differs (float32 tolerance). A batch
with nothing shared is a tree of separate roots: sequence packing's block-diagonal layout.

Sequence j's token ``t`` sits at row position ``where[j][t]``; its logprob comes from the logits
at ``where[j][t-1]`` (the node before it on its own path). Sorting the sequences lexicographically
makes the trie's size ``Σ_j (L_j − lcp(s_j, s_{j−1}))`` (:func:`tree_tokens`), which the
planner uses as a micro-batch's cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from dockyard.torch.logprobs import AllowedMasks

# A batch is laid out as trees only when that saves at least this share of its tokens: below it
# the padded / packed layouts (no custom mask) are as cheap.
MIN_SAVING = 0.125


@dataclass
class TreeRow:
    """One micro-batch as a token tree.

    Attributes:
        input_ids: ``[N] int64``, the distinct nodes' tokens (a parent before its children).
        position_ids: ``[N] int64``, each node's depth.
        parent: ``[N] int64``, the previous node on the node's path (−1 at a root).
        where: per sequence (micro-batch order), ``[L_j] int64`` row positions of its tokens.
    """

    input_ids: np.ndarray
    position_ids: np.ndarray
    parent: np.ndarray
    where: list[np.ndarray]

    @property
    def lengths(self) -> np.ndarray:
        return np.asarray([len(w) for w in self.where], dtype=np.int64)


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def lex_order(ids: np.ndarray, lengths: np.ndarray, rows: Sequence[int]) -> list[int]:
    """``rows`` sorted by their real tokens (lexicographically; a prefix before its extensions),
    ties by index."""
    return sorted(rows, key=lambda i: (tuple(ids[i, : int(lengths[i])].tolist()), i))


def tree_tokens(ids: np.ndarray, lengths: np.ndarray, rows: Sequence[int]) -> int:
    """Nodes of the prefix tree of ``rows``: ``Σ L − Σ lcp`` of lexicographic neighbours."""
    order = lex_order(ids, lengths, rows)
    total, prev = 0, None
    for i in order:
        seq = ids[i, : int(lengths[i])]
        total += len(seq) - (0 if prev is None else _lcp(prev, seq))
        prev = seq
    return total


def build_tree(ids: np.ndarray, lengths: np.ndarray, indices: Sequence[int]) -> TreeRow:
    """The prefix tree of ``ids[indices]`` (``[B, T]`` right-padded, true ``lengths [B]``)."""
    order = lex_order(ids, lengths, indices)
    tokens: list[np.ndarray] = []
    depth: list[np.ndarray] = []
    parent: list[np.ndarray] = []
    where: dict[int, np.ndarray] = {}
    path = np.zeros(0, dtype=np.int64)  # row positions of the previous sequence's tokens
    prev: np.ndarray | None = None
    n = 0
    for i in order:
        seq = ids[i, : int(lengths[i])].astype(np.int64)
        shared = 0 if prev is None else _lcp(prev, seq)
        new = len(seq) - shared
        pos = np.arange(n, n + new, dtype=np.int64)
        tokens.append(seq[shared:])
        depth.append(np.arange(shared, len(seq), dtype=np.int64))
        par = np.concatenate([[path[shared - 1] if shared else -1], pos[:-1]]) if new else pos
        parent.append(par.astype(np.int64))
        path = np.concatenate([path[:shared], pos])
        where[i] = path
        n += new
        prev = seq
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64)  # noqa: E731
    return TreeRow(cat(tokens), cat(depth), cat(parent), [where[i] for i in indices])


def tree_mask(tree: TreeRow, device: torch.device | str, dtype: torch.dtype | None = None):
    """``[1, 1, N, N]`` attention mask: query q sees key k iff k is q or its ancestor. Boolean
    (True: attend) for SDPA; with a float ``dtype``, additive (0 / the dtype's minimum) for the
    eager attention."""
    n = len(tree.input_ids)
    allowed = np.zeros((n, n), dtype=bool)
    for q, p in enumerate(tree.parent):  # parents precede children: rows are built in order
        if p >= 0:
            allowed[q] = allowed[p]
        allowed[q, q] = True
    mask = torch.as_tensor(allowed, device=device)[None, None]
    if dtype is None or dtype == torch.bool:
        return mask
    zero = torch.zeros((), dtype=dtype, device=device)
    return torch.where(mask, zero, torch.finfo(dtype).min)


def _sources(tree: TreeRow, device: torch.device) -> tuple[torch.Tensor, ...]:
    """``(seq, t, src, dst)``, each ``[M]``, over every token t ≥ 1 of every sequence: its row
    position ``dst`` and the row position ``src`` of the node before it on its path."""
    seqs, cols, srcs, dsts = [], [], [], []
    for j, w in enumerate(tree.where):
        if len(w) > 1:
            seqs.append(np.full(len(w) - 1, j, dtype=np.int64))
            cols.append(np.arange(1, len(w), dtype=np.int64))
            srcs.append(w[:-1])
            dsts.append(w[1:])
    if not seqs:
        return tuple(torch.zeros(0, dtype=torch.int64, device=device) for _ in range(4))
    return tuple(
        torch.as_tensor(np.concatenate(x), device=device) for x in (seqs, cols, srcs, dsts)
    )


def gather_aligned(x: torch.Tensor, tree: TreeRow, width: int) -> torch.Tensor:
    """Per-node values ``[N, ...]`` (already describing the *next* token: logits, their top-k)
    as ``[n, width, ...]`` aligned like the logprobs: position t of sequence j holds the value
    at the node before token t on j's path; 0 at t = 0 and on padding. Differentiable."""
    seq, col, src, _ = _sources(tree, x.device)
    out = x.new_zeros((len(tree.where), width, *x.shape[1:]))
    return out.index_put((seq, col), x[src])


def tree_logprobs(
    logits: torch.Tensor,
    tree: TreeRow,
    width: int,
    temperature: float = 1.0,
    allowed: AllowedMasks | None = None,
) -> torch.Tensor:
    """``[N, V]`` logits of a tree row -> ``[n, width] float32`` logprobs of each sequence's
    tokens (0 at t = 0 and on padding): ``z[src, y_t] − logsumexp z[src]``, ``z = logits / τ``,
    the log-normaliser computed once per node; over its allowed set where ``allowed`` (rows
    ``[n, ≥ width]`` in micro-batch order) constrains a token."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    seq, col, src, dst = _sources(tree, z.device)
    target = torch.as_tensor(tree.input_ids, device=z.device)[dst]
    picked = z[src, target] - torch.logsumexp(z, dim=-1)[src]
    if allowed is not None:
        picked = allowed.renormalise(picked, z, target, allowed.rows[seq, col], src=src)
    out = z.new_zeros((len(tree.where), width))
    return out.index_put((seq, col), picked)


def sliding_window(config: object) -> int | None:
    """The sliding window of a model config whose layers (some or all) attend through one, else
    None: Gemma 2 / 3's ``sliding_window`` with ``layer_types`` naming sliding layers, or
    ``use_sliding_window`` (Qwen2 / Mistral style). A tree's ancestor mask would let such a
    layer see tokens beyond its window, so these models are never laid out as trees."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None:
        return int(window) if any("sliding" in str(t) for t in types) else None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)
