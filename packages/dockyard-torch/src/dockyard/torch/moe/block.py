"""The MoE layer the torch worker trains, in place of ``transformers``' Qwen3-MoE block.

:class:`MoEBlock` takes over a ``Qwen3MoeSparseMoeBlock``'s own submodules (``gate``: the
router weight ``[E, H]``; ``experts``: ``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``),
so parameter names, checkpoints and the exported folder are unchanged. Its forward is
``transformers``' (softmax router, top-k, optional renormalisation, SwiGLU experts) plus what
the worker adds (:mod:`dockyard.torch.moe.routing`): the aux-loss-free bias (``expert_bias [E]``,
a persistent buffer: checkpointed, never exported), a capacity, the Switch aux loss, grouped
GEMM experts and all-to-all expert parallelism (:mod:`dockyard.torch.moe.dispatch`).

With the bias at 0 and no capacity the logits equal ``transformers``' model on the same weights
(tests/torch/test_moe.py). Statistics accumulate while the module is in training mode with
gradients on (train micro-batches; not logprob passes) until :class:`dockyard.torch.moe.MoE`
collects them at the end of a step.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dockyard.torch.moe.dispatch import combine_local
from dockyard.torch.moe.experts import expert_ffn
from dockyard.torch.moe.routing import Routing, route, switch_aux_loss


class TokenMask:
    """The current forward's real tokens, shared by a model's blocks: ``mask [b·T]`` bool or
    None (all real: a packed row, or no ``attention_mask`` given)."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None

    def capture(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        """Forward pre-hook of the decoder: remember ``attention_mask`` when it is 2-D."""
        mask = kwargs.get("attention_mask")
        ok = isinstance(mask, torch.Tensor) and mask.dim() == 2
        self.mask = mask.reshape(-1).bool() if ok else None

    def real(self, n: int) -> torch.Tensor | None:
        """The mask when it covers ``n`` tokens, else None."""
        m = self.mask
        return m if m is not None and m.numel() == n else None


class MoEBlock(torch.nn.Module):
    """Router + experts of one MoE layer. ``hidden [b, T, H] → [b, T, H]``.

    ``ep_group``: the expert-parallel group (None: all experts here); then ``experts``' weights
    hold this rank's ``E/ep`` experts (as DTensors sharded over the group, see
    :func:`dockyard.torch.moe.install.shard_experts`)."""

    def __init__(
        self, hf_block: torch.nn.Module, cfg: Any, tokens: TokenMask | None = None
    ) -> None:
        super().__init__()
        self.tokens = tokens or TokenMask()
        self.gate = hf_block.gate
        self.experts = hf_block.experts
        self.num_experts = int(self.gate.num_experts)
        self.top_k = int(self.gate.top_k)
        self.norm_topk_prob = bool(self.gate.norm_topk_prob)
        self.grouped = bool(cfg.grouped_gemm)
        self.use_bias = bool(cfg.router_enable_expert_bias)
        self.aux = cfg.router_load_balancing_type == "aux_loss"
        self.capacity_factor = cfg.expert_capacity_factor
        self.ep_group: dist.ProcessGroup | None = None
        weight = self.gate.weight
        self.register_buffer(
            "expert_bias", torch.zeros(self.num_experts, device=weight.device), persistent=True
        )
        self._reset_stats(weight.device)

    def _reset_stats(self, device: torch.device) -> None:
        self.load = torch.zeros(self.num_experts, dtype=torch.int64, device=device)
        self.dropped = torch.zeros((), dtype=torch.int64, device=device)
        self.aux_losses: list[torch.Tensor] = []

    def _weights(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's ``gate_up [E_l, 2I, H]`` and ``down [E_l, H, I]`` in ``dtype``."""
        w = [self.experts.gate_up_proj, self.experts.down_proj]
        w = [t.to_local() if hasattr(t, "to_local") else t for t in w]
        return w[0].to(dtype), w[1].to(dtype)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        b, t, h = hidden.shape
        x = hidden.reshape(-1, h)
        logits = F.linear(x, self.gate.weight)  # [N, E] (autocast's dtype)
        real = self.tokens.real(x.shape[0])
        routing = route(
            logits,
            self.top_k,
            self.expert_bias if self.use_bias else None,
            self.norm_topk_prob,
            self.capacity_factor,
            real,
        )
        self._record(routing, real)
        dtype = logits.dtype  # what the projections compute in (autocast does not reach
        gate_up, down = self._weights(dtype)  # grouped_mm: cast here)
        ffn = expert_ffn(self.grouped)
        act = self.experts.act_fn

        def run(rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
            return ffn(rows.to(dtype), counts, gate_up, down, act)

        out = combine_local(x, routing, run, self.num_experts, self.ep_group)
        return out.reshape(b, t, h)

    def _record(self, routing: Routing, real: torch.Tensor | None) -> None:
        """Accumulate loads and drops (and the aux loss) over the real tokens (``real [N]``
        bool, None: all). Activation checkpointing's recompute (inside backward) runs the same
        operations (it must save as many tensors as the forward did) and keeps nothing."""
        if not (self.training and torch.is_grad_enabled()):
            return
        experts, probs = routing.experts, routing.probs
        if real is not None:
            experts, probs = experts[real], probs[real]
        counts = torch.bincount(experts.reshape(-1), minlength=self.num_experts)
        aux = switch_aux_loss(probs, counts) if self.aux and probs.shape[0] > 0 else None
        if torch._C._current_graph_task_id() != -1:
            return  # the recompute: already counted in the forward
        self.load += counts
        self.dropped += routing.dropped
        if aux is not None:
            self.aux_losses.append(aux)

    def take_aux_loss(self) -> torch.Tensor | None:
        """The aux losses recorded since the last call, summed (None: none), and forget them."""
        if not self.aux_losses:
            return None
        total = torch.stack(self.aux_losses).sum()
        self.aux_losses = []
        return total

    def take_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(load [E] int64, dropped int64)`` since the last call, and reset them."""
        load, dropped = self.load, self.dropped
        self._reset_stats(load.device)
        return load, dropped
