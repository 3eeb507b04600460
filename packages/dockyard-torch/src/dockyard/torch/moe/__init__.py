"""Mixture-of-Experts layers for the torch worker (Qwen3-MoE).

``transformers`` builds the model; :func:`install_moe` swaps each ``Qwen3MoeSparseMoeBlock`` for
:class:`MoEBlock` (same parameters and names) whose forward adds grouped-GEMM experts, DeepSeek-V3's
aux-loss-free bias, the Switch aux loss, a capacity and all-to-all expert parallelism; :class:`MoE`
is what a train step calls (aux term, bias update, router metrics). Modules: ``routing`` (the
math), ``experts`` (grouped GEMM / loop), ``dispatch`` (one rank / all-to-all), ``block``,
``install``, ``step``.
"""

from dockyard.torch.moe.block import MoEBlock
from dockyard.torch.moe.install import (
    check_expert_parallel,
    install_moe,
    moe_blocks,
    shard_experts,
)
from dockyard.torch.moe.step import MoE

__all__ = [
    "MoE",
    "MoEBlock",
    "check_expert_parallel",
    "install_moe",
    "moe_blocks",
    "shard_experts",
]
