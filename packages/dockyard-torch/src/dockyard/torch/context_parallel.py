"""Context parallelism: each sequence of a micro-batch split over the ``cp`` ranks of a group.

A micro-batch of right-padded rows of width W is cut into ``cp`` chunks of ``t = ⌈W / cp⌉``
positions; rank ``c`` of the group runs the whole model on positions ``[c·t, (c+1)·t)`` of every
row, with their true position ids (RoPE), so activations and logits scale with W / cp. In each
attention layer (:func:`attention`, registered with transformers' ``AttentionInterface`` as
``"dockyard_cp"``) the rank gathers the keys and values of the whole group
(an all-gather whose backward sums each chunk's key/value gradients back to the rank that holds
it) and a query at position p attends to keys 0..p: the
causal mask over global positions. Rows are right-padded, so a real token never attends to
padding and no padding mask is needed. This is all-gather attention (Llama 3's context
parallelism); ring attention would overlap the transfers with the compute, which gloo cannot.

Per-position outputs — the next-token logprobs, entropies, top-k — are gathered into full rows
by :func:`gather_positions`, whose backward keeps the local slice: every rank of the group then
computes the same loss on the same rows, and a row's parameter gradient is the *sum* of the
group's gradients. FSDP2 shards over the flattened ``dp × cp`` mesh and averages its gradients,
so the worker scales each rank's loss by ``dp · cp`` (by ``dp`` without context parallelism).

Refused (:func:`check_context_parallel`): sliding-window and soft-capped attention (Gemma 2/3,
Mistral-style windows), Mixture-of-Experts (its load statistics are per rank), shared-prefix
trees and sequence packing (their own masks), tensor parallelism beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from transformers import AttentionInterface

from dockyard.torch.prefix import sliding_window

ATTENTION = "dockyard_cp"


@dataclass(frozen=True)
class CPChunk:
    """This rank's chunk of a micro-batch: positions ``[offset, offset + chunk)`` of rows of
    width ``width`` (padded to ``size · chunk``); ``input_ids`` ``[b, size · chunk]`` are the
    whole rows (the next-token targets of the chunk's last position live on the next rank)."""

    group: Any
    rank: int
    size: int
    width: int
    chunk: int
    input_ids: torch.Tensor

    @property
    def offset(self) -> int:
        return self.rank * self.chunk

    def local_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.offset : self.offset + self.chunk]

    def position_ids(self) -> torch.Tensor:
        b = self.input_ids.shape[0]
        cols = torch.arange(self.offset, self.offset + self.chunk, device=self.input_ids.device)
        return cols[None].expand(b, -1)


def split_rows(input_ids: torch.Tensor, group: Any) -> CPChunk:
    """The chunk of ``input_ids [b, W]`` (right-padded) this rank of ``group`` computes."""
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    width = input_ids.shape[1]
    chunk = math.ceil(width / size)
    padded = torch.nn.functional.pad(input_ids, (0, size * chunk - width))
    return CPChunk(group, rank, size, width, chunk, padded)


def attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cp_chunk: CPChunk | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: ``query [b, h, t, d]``, ``key``/``value``
    ``[b, h_kv, t, d]`` of this rank's chunk -> ``([b, t, h, d], None)``. ``cp_chunk`` is the
    model call's keyword argument (transformers hands it to every attention layer, and
    activation checkpointing's recomputation replays it); without one (a zero-weighted pass
    that only keeps FSDP's collectives in step, run by every rank of the group at once) this is
    plain causal attention over the local positions.

    The chunk's queries ``[offset, end)`` attend to the keys ``[0, end)``, causally. An explicit
    ``[t, end]`` mask would send SDPA to a kernel that keeps the scores; instead ``offset`` zero
    queries are put before the chunk, SDPA runs square and causal (the flash kernel: memory
    linear in ``end``) and their outputs are dropped — a zero query's output is not used, so it
    adds no gradient. The price is compute: the last rank attends as one process would."""
    offset = 0
    if cp_chunk is not None:
        group, offset = cp_chunk.group, cp_chunk.offset
        end = offset + query.shape[2]  # keys past this chunk are masked: not attended at all
        key = _GatherKV.apply(key, group)[:, :, :end]
        value = _GatherKV.apply(value, group)[:, :, :end]
    if offset:  # zero queries before the chunk make the causal mask square (see the docstring)
        pad = query.new_zeros(*query.shape[:2], offset, query.shape[3])
        query = torch.cat([pad, query], dim=2)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, dropout_p=dropout, scale=scaling, is_causal=True,
        enable_gqa=query.shape[1] != key.shape[1],
    )[:, :, offset:]  # fmt: skip
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, attention)


class _GatherKV(torch.autograd.Function):
    """All-gather of ``[b, h, t, d]`` keys or values along the positions (dim 2); the backward
    sums every rank's gradient and keeps this rank's slice. (``torch.distributed.nn.functional
    .all_gather``'s backward on gloo scatters from group-local ranks as if they were global
    ones: it fails in a group without global rank 0, e.g. the second pair of dp 2 × cp 2.)"""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        ctx.group, ctx.rank, ctx.n = group, dist.get_rank(group), x.shape[2]
        return torch.cat(parts, dim=2)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None]:
        (grad,) = grads
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)  # a reduce-scatter's result, via all-reduce
        return grad[:, :, ctx.rank * ctx.n : (ctx.rank + 1) * ctx.n].contiguous(), None


class _GatherPositions(torch.autograd.Function):
    """All-gather along dim 1; the backward keeps this rank's slice (every rank of the group
    computes the same loss on the gathered rows)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, rank: int) -> torch.Tensor:
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        ctx.rank, ctx.n = rank, x.shape[1]
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (grad,) = grads
        return grad[:, ctx.rank * ctx.n : (ctx.rank + 1) * ctx.n], None, None


def gather_positions(x: torch.Tensor, chunk: CPChunk) -> torch.Tensor:
    """``[b, chunk, ...]`` per-position values of this rank -> ``[b, width, ...]`` whole rows."""
    full = _GatherPositions.apply(x, chunk.group, chunk.rank)
    assert isinstance(full, torch.Tensor)
    return full[:, : chunk.width]


def next_token_logprobs(logits: torch.Tensor, chunk: CPChunk, temperature: float) -> torch.Tensor:
    """``[b, width]`` logprobs of the whole rows from this rank's ``[b, chunk, V]`` logits,
    aligned like :func:`dockyard.torch.logprobs.token_logprobs` (position t: token t; 0 at
    t = 0). Position p's logits score token p + 1, which may sit on the next rank's chunk."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    targets = torch.nn.functional.pad(chunk.input_ids[:, 1:], (0, 1))  # p -> token p + 1
    local = targets[:, chunk.offset : chunk.offset + chunk.chunk].unsqueeze(-1)
    picked = torch.gather(z, -1, local).squeeze(-1) - torch.logsumexp(z, dim=-1)
    full = gather_positions(picked, chunk)  # [b, width]: position p scores token p + 1
    return torch.nn.functional.pad(full[:, :-1], (1, 0))


def check_context_parallel(config: Any, cp: int, *, tp: int, moe: bool, packing: bool) -> None:
    """Raise naming the fix unless context parallelism over ``cp`` ranks can run this model
    (its transformers ``config``) with these options (module docstring)."""
    if cp == 1:
        return
    problems = []
    if sliding_window(config) is not None:
        problems.append("the model has sliding-window attention layers")
    if getattr(config, "attn_logit_softcapping", None):
        problems.append("the model soft-caps its attention scores")
    if moe:
        problems.append("the model is a Mixture-of-Experts (per-rank routing statistics)")
    if tp > 1:
        problems.append(f"tensor_parallel_size={tp} (context parallelism runs beside FSDP2 only)")
    if packing:
        problems.append("sequence_packing is on (packed rows carry their own mask)")
    if problems:
        raise ValueError(
            f"context_parallel_size={cp} cannot run here: " + "; ".join(problems) + " — set "
            "context_parallel_size=1 (supported: Qwen2, Qwen3 and Llama-style dense models "
            "with full causal attention, FSDP2 over the data- and context-parallel ranks)"
        )
