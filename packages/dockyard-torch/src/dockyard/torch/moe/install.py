"""Put :class:`MoEBlock` into a loaded Hugging Face model, and split its experts over ranks.

:func:`install_moe` replaces every ``Qwen3MoeSparseMoeBlock`` (after ``from_pretrained``, before
LoRA / tensor parallelism / FSDP). :func:`shard_experts` is expert parallelism: on the ``dp``
axis of the worker's mesh (ep = dp), each rank keeps ``E/ep`` experts of every layer as a
``Shard(0)`` DTensor (so the grad-norm clip and the export's ``full_tensor()`` see all experts),
FSDP leaves them alone (``ignored_params``), and their gradients are divided by ``ep`` (the
worker scales each rank's loss by ``dp`` so that FSDP's gradient *average* is the sum; the
experts' gradients arrive already summed through the all-to-all backward).
"""

from __future__ import annotations

from typing import Any

import torch

from dockyard.torch.moe.block import MoEBlock, TokenMask
from dockyard.torch.moe.experts import check_grouped_shapes

SUPPORTED_BLOCKS = ("Qwen3MoeSparseMoeBlock",)


def install_moe(model: torch.nn.Module, cfg: Any) -> int:
    """Replace the model's supported MoE blocks by :class:`MoEBlock`; returns how many.

    A forward pre-hook on the decoder (``model.base_model``) hands each forward's
    ``attention_mask [b, T]`` to the blocks, so that router statistics (loads, the aux loss)
    count real tokens only, not padding."""
    tokens = TokenMask()
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if type(module).__name__ in SUPPORTED_BLOCKS
    ]
    for name, module in targets:
        if cfg.grouped_gemm:
            experts = module.experts
            check_grouped_shapes(experts.hidden_dim, experts.intermediate_dim)
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, MoEBlock(module, cfg, tokens))
    if targets:
        base = getattr(model, "base_model", model)
        base.register_forward_pre_hook(tokens.capture, with_kwargs=True)
    return len(targets)


def moe_blocks(model: torch.nn.Module) -> list[MoEBlock]:
    """The model's :class:`MoEBlock` layers, in module order."""
    return [m for m in model.modules() if isinstance(m, MoEBlock)]


def check_expert_parallel(cfg: Any, num_experts: int, dp: int, tp: int) -> None:
    """Raise naming the fix unless ``moe.expert_parallel_size`` fits the mesh and the model."""
    ep = cfg.expert_parallel_size
    if ep == 1:
        return
    problems = []
    if ep != dp:
        problems.append(f"it must equal the data-parallel size ({dp})")
    if tp != 1:
        problems.append(f"tensor_parallel_size must be 1 (is {tp})")
    if num_experts % ep:
        problems.append(f"it must divide the number of experts ({num_experts})")
    if problems:
        raise ValueError(
            f"moe.expert_parallel_size={ep}: " + "; ".join(problems) + " — set it to the "
            "number of data-parallel ranks (world_size) or to 1"
        )


def shard_experts(model: torch.nn.Module, mesh: Any, ep: int) -> set[torch.nn.Parameter]:
    """Split every :class:`MoEBlock`'s experts over the 1-D ``mesh`` (``ep`` ranks); returns the
    new expert parameters (for FSDP's ``ignored_params``)."""
    # lazy: torch.distributed.tensor takes ~0.5 s to import; only expert parallelism needs it
    from torch.distributed.tensor import Shard, distribute_tensor

    params: set[torch.nn.Parameter] = set()
    for block in moe_blocks(model):
        for name in ("gate_up_proj", "down_proj"):
            full = getattr(block.experts, name)
            sharded = torch.nn.Parameter(
                distribute_tensor(full.detach(), mesh, [Shard(0)]),
                requires_grad=full.requires_grad,
            )
            if sharded.requires_grad:
                sharded.register_hook(lambda g: g / ep)
            setattr(block.experts, name, sharded)
            params.add(sharded)
        block.ep_group = mesh.get_group()
    return params
