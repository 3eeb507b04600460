"""Token dispatch to the experts: on one rank, or all-to-all over an expert-parallel group.

Every path sorts the ``N·k`` (token, expert) assignments by expert, runs the expert FFN
(:mod:`dockyard.torch.moe.experts`) on rows grouped by expert, and sums ``g · y`` back per
token. Dropped assignments (capacity) are left out before the sort.

Expert parallelism (ep ranks; rank ``r`` holds experts ``[r·E/ep, (r+1)·E/ep)``), as in
GShard / Megatron-LM's all-to-all dispatcher:

    counts [E] ──all-to-all──▶ recv_counts [ep, E/ep]      (how many rows each source sends)
    rows sorted by expert ──all-to-all──▶ rows by (source, local expert)
    regroup by local expert → FFN → ungroup ──all-to-all──▶ back to their source, in order

The row exchanges are differentiable (``all_to_all_single_autograd``): the backward sends
gradients the opposite way, so each rank's experts receive the gradient of every rank's tokens.
All ranks of the group must call the MoE forward equally often (the worker keeps micro-batch
counts in step). Works on gloo (CPU) and NCCL.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

from dockyard.torch.moe.routing import Routing


def combine_local(
    x: torch.Tensor,
    routing: Routing,
    ffn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    num_experts: int,
    group: dist.ProcessGroup | None = None,
) -> torch.Tensor:
    """``[N, H]``: ``Σ_{i∈S(t)} g_ti · FFN_i(x_t)`` for tokens ``x [N, H]``.

    ``ffn(rows, counts)`` runs this rank's experts on rows grouped by (local) expert; with a
    ``group`` of ep > 1 ranks the rows travel there and back by all-to-all."""
    n, k = routing.experts.shape
    flat_e = routing.experts.reshape(-1)
    flat_tok = torch.arange(n, device=x.device).repeat_interleave(k)
    flat_g = routing.gates.reshape(-1)
    kept = routing.keep.reshape(-1)
    if not bool(kept.all()):
        flat_e, flat_tok, flat_g = flat_e[kept], flat_tok[kept], flat_g[kept]
    order = torch.argsort(flat_e, stable=True)
    tok = flat_tok[order]
    counts = torch.bincount(flat_e, minlength=num_experts)
    rows = x[tok]  # [M, H], grouped by expert
    if group is None or dist.get_world_size(group) == 1:
        y = ffn(rows, counts)
    else:
        y = _expert_parallel(rows, counts, ffn, group)
    out = torch.zeros_like(x)
    return out.index_add(0, tok, (y * flat_g[order, None]).to(x.dtype))


def _expert_parallel(
    rows: torch.Tensor,
    counts: torch.Tensor,
    ffn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    group: dist.ProcessGroup,
) -> torch.Tensor:
    """Send ``rows`` (grouped by global expert, ``counts [E]``) to the ranks that hold their
    experts, run them there, and bring the outputs back in the same order."""
    ep = dist.get_world_size(group)
    local = counts.numel() // ep
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=group)  # [ep·E/ep]: (source, expert)
    send_splits = counts.view(ep, local).sum(1).tolist()
    recv_splits = recv_counts.view(ep, local).sum(1).tolist()
    recv = fc.all_to_all_single_autograd(rows, recv_splits, send_splits, group)
    recv = fc.wait_tensor(recv) if isinstance(recv, fc.AsyncCollectiveTensor) else recv
    expert_of_row = torch.arange(local, device=rows.device).repeat(ep)
    row_expert = expert_of_row.repeat_interleave(recv_counts)
    regroup = torch.argsort(row_expert, stable=True)  # local expert, then source rank
    y = ffn(recv[regroup], recv_counts.view(ep, local).sum(0))
    back = y[torch.argsort(regroup)]  # undo the regroup
    out = fc.all_to_all_single_autograd(back, send_splits, recv_splits, group)
    return fc.wait_tensor(out) if isinstance(out, fc.AsyncCollectiveTensor) else out
