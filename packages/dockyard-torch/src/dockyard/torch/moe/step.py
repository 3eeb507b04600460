"""What a train step does with a model's MoE layers: the aux-loss term, the bias update, metrics.

The worker calls :meth:`MoE.aux_term` after each training micro-batch's forward (added to that
micro-batch's loss) and :meth:`MoE.end_step` after the optimizer step. ``end_step`` sums each
layer's per-expert loads and drops over all ranks (a collective: every rank calls it), applies
the aux-loss-free bias update ``b ← b + γ·sign(c̄ − c)`` with those global loads (identical on
every rank, so the bias stays replicated) and returns the step's router metrics:

* ``moe/expert_load/<i>``: expert ``i``'s share of the step's assignments (mean over layers;
  they sum to 1 over ``i``), the per-expert load;
* ``moe/load_imbalance``: ``max_i c_i / c̄`` (mean over layers; 1 is perfectly balanced);
* ``moe/dropped_tokens``: assignments dropped by the capacity over all layers and ranks (0 when
  dropless), and ``moe/dropped_frac`` of all assignments;
* ``moe/aux_loss``: the Switch loss L_aux (mean over layers and micro-batches), with
  ``router_load_balancing_type: aux_loss``;
* ``moe/expert_bias_absmean``: mean |b| (the aux-loss-free bias), with the bias on.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from dockyard.core.rl.metrics import router_metrics
from dockyard.torch.moe.block import MoEBlock
from dockyard.torch.moe.install import moe_blocks
from dockyard.torch.moe.routing import bias_update


class MoE:
    """The MoE layers of one trained model and the routing options (``cfg``: ``MoEConfig``)."""

    def __init__(self, blocks: list[MoEBlock], cfg: Any) -> None:
        self.blocks = blocks
        self.cfg = cfg
        self._aux_sum = 0.0
        self._aux_n = 0

    @classmethod
    def of(cls, model: torch.nn.Module, cfg: Any) -> MoE | None:
        """The handle for ``model``'s MoE layers, or None for a dense model."""
        blocks = moe_blocks(model)
        return cls(blocks, cfg) if blocks else None

    def aux_term(self, weight: float) -> torch.Tensor | float:
        """``α · weight · mean_layers L_aux`` of the forward passes since the last call (0 when
        the aux loss is off). ``weight``: this micro-batch's share of the step's tokens."""
        losses = [loss for b in self.blocks if (loss := b.take_aux_loss()) is not None]
        if not losses:
            return 0.0
        mean = torch.stack(losses).sum() / len(self.blocks)
        self._aux_sum += float(mean.detach()) * weight
        self._aux_n += 1
        return self.cfg.aux_loss_coeff * weight * mean

    def end_step(self) -> dict[str, float]:
        """Reduce the step's loads over ranks, update the biases, return the metrics (above)."""
        stats = [b.take_stats() for b in self.blocks]
        load = torch.stack([s[0] for s in stats]).to(torch.float64)  # [L, E]
        dropped = torch.stack([s[1] for s in stats]).to(torch.float64).sum()
        aux = torch.tensor([self._aux_sum], dtype=torch.float64, device=load.device)
        flat = torch.cat([load.reshape(-1), dropped.reshape(1), aux])
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(flat)
        load, dropped = flat[:-2].view_as(load), float(flat[-2])
        self._aux_sum = float(flat[-1])
        if self.cfg.router_enable_expert_bias and self.cfg.router_bias_update_rate > 0:
            with torch.no_grad():
                for block, c in zip(self.blocks, load, strict=True):
                    if c.sum() > 0:
                        block.expert_bias += bias_update(c, self.cfg.router_bias_update_rate).to(
                            block.expert_bias.device
                        )
        return self._metrics(load, dropped)

    def _metrics(self, load: torch.Tensor, dropped: float) -> dict[str, float]:
        out = router_metrics(load.tolist(), dropped)
        if self._aux_n:
            out["moe/aux_loss"] = self._aux_sum
            self._aux_sum, self._aux_n = 0.0, 0
        if self.cfg.router_enable_expert_bias:
            bias = torch.stack([b.expert_bias for b in self.blocks])
            out["moe/expert_bias_absmean"] = float(bias.abs().mean())
        return out
