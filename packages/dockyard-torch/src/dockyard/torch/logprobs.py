"""Per-token logprobs from a causal LM's logits, and unpacking a packed row (torch).

Alignment (the ``PolicyWorker`` contract): for tokens ``y [b, T]`` and logits ``z [b, T, V]``
(``z[:, t]`` predicts ``y[:, t+1]``),

    logprobs[b, t] = z'[b, t−1, y_bt] − logsumexp_v z'[b, t−1, v],   z' = z / τ,

for t ≥ 1 and 0 at t = 0 — the generation temperature τ scales logits exactly as the engine
does when it samples. The worker's top-k logits use the same alignment (values at ``t``
describe the distribution of token t) and are *unscaled*: the distillation loss applies its own
τ. A prefix-tree row's logprobs are :func:`dockyard.torch.prefix.tree_logprobs`.
"""

from __future__ import annotations

import numpy as np
import torch

from dockyard.torch.packing import PackedRow


def token_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    temperature: float = 1.0,
    allowed: AllowedMasks | None = None,
):
    """``[b, T, V]`` logits, ``[b, T]`` ids -> ``[b, T] float32`` logprobs (0 at t = 0).

    With ``allowed`` (a grammar constrained the sampling), a constrained token's logprob is
    taken over its allowed set only — logits off the set are −inf, as the engine masked them
    before it sampled — so the loss trains the renormalised policy that sampled, and its
    gradient flows through the normaliser over the allowed tokens."""
    z = logits[:, :-1].float()
    if temperature != 1.0:
        z = z / temperature
    target = input_ids[:, 1:].unsqueeze(-1)
    picked = torch.gather(z, -1, target).squeeze(-1) - torch.logsumexp(z, dim=-1)
    if allowed is not None:
        rows = allowed.rows[:, 1 : z.shape[1] + 1]
        picked = allowed.renormalise(picked, z, target.squeeze(-1), rows)
    return torch.nn.functional.pad(picked, (1, 0))


class AllowedMasks:
    """A micro-batch's grammar masks on the device: ``bits [M, V] bool`` (the distinct allowed
    sets) and ``rows`` (the set of each token, -1 where unconstrained; ``[b, T]`` padded or
    per sequence of a tree, ``[1, N]`` packed), from a batch's
    :class:`~dockyard.core.experience.AllowedTokens`."""

    def __init__(self, table: np.ndarray, rows: np.ndarray, vocab: int, device) -> None:
        words = torch.as_tensor(np.ascontiguousarray(table), device=device)
        shifts = torch.arange(32, device=device, dtype=torch.int32)
        bits = ((words.unsqueeze(-1) >> shifts) & 1).bool().reshape(words.shape[0], -1)
        if bits.shape[1] < vocab:
            raise ValueError(
                f"the grammar's masks cover {bits.shape[1]} tokens but the model has {vocab} "
                "logits: the engine and the trainer use different vocabularies"
            )
        self.bits = bits[:, :vocab]
        self.rows = torch.as_tensor(np.asarray(rows, dtype=np.int64), device=device)

    def renormalise(
        self,
        picked: torch.Tensor,
        z: torch.Tensor,
        target: torch.Tensor,
        rows: torch.Tensor,
        src: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``picked`` (logprobs of ``target``, any shape) with each constrained one (``rows >=
        0``, same shape) taken over its set; its logits are ``z`` at the same index, or
        ``z[src]`` (a tree: ``z [N, V]``, ``src`` the node before each token)."""
        where = rows >= 0
        if not bool(where.any()):
            return picked
        zc = z[where] if src is None else z[src[where]]
        zc = zc.masked_fill(~self.bits[rows[where]], float("-inf"))
        lp = torch.gather(zc, -1, target[where].unsqueeze(-1)).squeeze(-1)
        return picked.index_put((where,), lp - torch.logsumexp(zc, dim=-1))


def position_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``[..., V]`` logits -> ``[...] float32``: the entropy (nats) of each position's
    next-token distribution at temperature τ, ``logsumexp z' − Σ_v softmax(z')_v z'_v``. Not
    shifted: position t describes token t + 1 (the worker aligns it like the logprobs)."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    lse = torch.logsumexp(z, dim=-1)
    return lse - (torch.softmax(z, dim=-1) * z).sum(-1)


def unpack(packed: torch.Tensor, row: PackedRow, width: int) -> torch.Tensor:
    """Scatter a packed row's per-token values ``[N, ...]`` into ``[n, width, ...]`` (zeros pad).

    Differentiable. The first token of each sequence is set to 0: in the packed row its
    "previous" position belongs to the preceding sequence.
    """
    n = len(row.lengths)
    device = packed.device
    rows = torch.repeat_interleave(torch.arange(n, device=device), torch.as_tensor(row.lengths))
    cols = torch.cat([torch.arange(int(L), device=device) for L in row.lengths])
    out = packed.new_zeros((n, width, *packed.shape[1:]))
    keep = (cols > 0).to(packed.dtype)
    if packed.dim() > 1:
        keep = keep.view(-1, *([1] * (packed.dim() - 1)))
    return out.index_put((rows, cols), packed * keep)
