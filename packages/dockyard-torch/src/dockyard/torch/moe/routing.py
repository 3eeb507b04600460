"""Top-k routing with DeepSeek-V3's aux-loss-free bias, optional capacity, the Switch aux loss.

For tokens ``x [N, H]``, router weight ``W_r [E, H]`` and top-k ``k``:

    s = softmax(x W_rᵀ)                         [N, E] float32 (Qwen3-MoE's scores)
    S = top-k_i (s_i + b_i)                     expert choice; b [E] only steers the choice
    g_i = s_i / Σ_{j∈S} s_j  (i ∈ S)            gates (``norm_topk_prob``; else g_i = s_i)

* **Aux-loss-free balancing** (DeepSeek-V3, Liu et al. 2024, §2.1.2; Wang et al. 2024 "Auxiliary-
  Loss-Free Load Balancing"): after each optimizer step ``b_i ← b_i + γ·sign(c̄ − c_i)`` with
  ``c_i`` the step's assignments to expert ``i`` over all ranks and ``c̄`` their mean. With
  ``b = 0`` the choice is exactly Hugging Face's ``topk(s)``. Departure: DeepSeek-V3 scores
  with a sigmoid; Qwen3-MoE's softmax is kept so that the model stays Qwen3-MoE.
* **Auxiliary loss** (Switch Transformer, Fedus et al. 2021, eq. 4): per MoE layer
  ``L_aux = E · Σ_i f_i · P_i`` with ``f_i = c_i / N`` (the fraction of tokens that chose ``i``,
  summing to k) and ``P_i = mean_t s_ti``; averaged over layers. Departure from
  ``transformers``' ``load_balancing_loss_func``: that pools all layers' tokens before the
  product; this is per layer, as Switch and Megatron-LM define it.
* **Capacity** (optional, Megatron-LM's ``probs`` drop policy): expert ``i`` keeps at most
  ``C = ⌈f·N·k/E⌉`` of its assignments, highest ``s_ti`` first; dropped assignments contribute
  nothing (the token keeps its other experts and the residual). ``N`` counts the real tokens
  only: padding takes no slot (it is ranked after every real assignment and always dropped),
  so a micro-batch's padding never changes which real tokens are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Routing:
    """One forward's routing of ``N`` tokens to ``E`` experts, ``k`` each.

    ``experts [N, k]`` int64 choices, ``gates [N, k]`` (the compute dtype; 0 where dropped),
    ``keep [N, k]`` bool (False: dropped by capacity), ``probs [N, E]`` float32 scores (they
    carry the router's gradient into the aux loss), ``counts [E]`` int64 assignments chosen
    (before drops), ``dropped`` int64 scalar."""

    experts: torch.Tensor
    gates: torch.Tensor
    keep: torch.Tensor
    probs: torch.Tensor
    counts: torch.Tensor
    dropped: torch.Tensor


def route(
    logits: torch.Tensor,
    top_k: int,
    bias: torch.Tensor | None,
    norm_topk_prob: bool,
    capacity_factor: float | None = None,
    real: torch.Tensor | None = None,
) -> Routing:
    """Route tokens from router ``logits [N, E]`` (see the module docstring); ``real [N]``
    bool marks the real tokens (None: all), for the capacity."""
    _n, e = logits.shape
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)
    choice = probs if bias is None else probs + bias.to(probs.dtype)
    experts = torch.topk(choice, top_k, dim=-1).indices  # [N, k]
    chosen = probs.gather(1, experts)  # s_ti of the chosen experts
    gates = chosen
    if norm_topk_prob:
        gates = gates / gates.sum(dim=-1, keepdim=True)
    counts = torch.bincount(experts.reshape(-1), minlength=e)
    keep = torch.ones_like(experts, dtype=torch.bool)
    if capacity_factor is not None:
        keep = _within_capacity(experts, chosen.detach(), e, capacity_factor, real)
    gates = (gates * keep).to(logits.dtype)
    dropped = (~keep).sum() if real is None else (~keep[real]).sum()
    return Routing(experts, gates, keep, probs, counts, dropped)


def _within_capacity(
    experts: torch.Tensor,
    score: torch.Tensor,
    num_experts: int,
    factor: float,
    real: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[N, k]`` bool: each expert's ``⌈factor·N_real·k/E⌉`` highest-scored assignments of
    real tokens (``real [N]``, None: all real; padding is never kept)."""
    flat_e, flat_s = experts.reshape(-1), score.reshape(-1)
    n_real = flat_e.numel()
    if real is not None:
        flat_r = real.repeat_interleave(experts.shape[1])
        flat_s = torch.where(flat_r, flat_s, -1.0)  # scores are >= 0: padding ranks last
        n_real = int(flat_r.sum())
    capacity = math.ceil(factor * n_real / num_experts)
    by_score = torch.argsort(flat_s, descending=True, stable=True)
    order = by_score[torch.argsort(flat_e[by_score], stable=True)]  # expert, then score desc
    counts = torch.bincount(flat_e, minlength=num_experts)
    starts = torch.cumsum(counts, 0) - counts
    rank_in_expert = torch.arange(flat_e.numel(), device=flat_e.device) - starts[flat_e[order]]
    keep = torch.empty_like(flat_e, dtype=torch.bool)
    keep[order] = rank_in_expert < capacity
    if real is not None:
        keep &= flat_r
    return keep.view_as(experts)


def switch_aux_loss(probs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """``E · Σ_i (c_i / N) · mean_t s_ti`` for one layer (``probs [N, E]``, ``counts [E]``)."""
    n, e = probs.shape
    f = counts.to(probs.dtype) / max(n, 1)
    return e * (f * probs.mean(dim=0)).sum()


def bias_update(counts: torch.Tensor, rate: float) -> torch.Tensor:
    """DeepSeek-V3's step ``γ·sign(c̄ − c)`` for global per-expert loads ``counts [E]``."""
    c = counts.to(torch.float32)
    return rate * torch.sign(c.mean() - c)
