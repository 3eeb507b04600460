"""Tensor parallelism (DTensor) on a 2-D device mesh ``(dp, tp)``, and grad-norm clipping over it.

The ``world_size`` ranks form a mesh of ``dp = world_size / tp`` rows by ``tp`` columns
(rank ``r`` = ``dp_rank · tp + tp_rank``: a tensor-parallel group is ``tp`` consecutive ranks,
the ones sharing a node's fast links). Ranks of one tensor-parallel group see the same
sequences; data-parallel rows see disjoint ones.

Inside each decoder layer, the model's own ``base_model_tp_plan`` (transformers' config: Qwen2,
Qwen3, Llama, Mistral, ...) says how to split each projection (Megatron-LM, Shoeybi et al. 2019):

* ``colwise`` — ``q/k/v_proj``, ``gate/up_proj``: ``W ∈ R^{out×in}`` split along ``out``
  (:class:`~torch.distributed.tensor.parallel.ColwiseParallel`); each rank computes its
  ``n_heads / tp`` query heads and ``n_kv_heads / tp`` key/value heads (GQA groups stay whole),
  and its ``intermediate / tp`` MLP columns, from the replicated hidden state;
* ``rowwise`` — ``o_proj``, ``down_proj``: split along ``in``
  (:class:`~torch.distributed.tensor.parallel.RowwiseParallel`); partial outputs are summed by
  one all-reduce, so the residual stream stays replicated;
* ``replicated_with_grad_allreduce`` — Qwen3's per-head ``q_norm``/``k_norm``: a replicated
  weight applied to each rank's own heads, so its gradient is summed over the group
  (``SequenceParallel`` over the heads dimension: a Replicate DTensor weight on a
  ``Shard(2)`` input of shape ``[b, T, h/tp, d]``).

Embeddings, norms and the LM head stay replicated (full logits on every rank: the logprob
and loss code is unchanged). FSDP2 then shards every parameter over the ``dp`` axis
(``fully_shard(..., mesh=mesh["dp"])``; TP parameters become 2-D DTensors). The same code runs
on ``gloo`` (CPU) and ``nccl`` (GPU).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

TP_STYLES = ("colwise", "rowwise", "replicated_with_grad_allreduce")


@dataclass(frozen=True)
class MeshInfo:
    """This rank's place on the ``(dp, tp)`` mesh — ``(dp, cp, tp)`` with context parallelism
    (:mod:`dockyard.torch.context_parallel`); ``mesh`` is None on a single process."""

    dp_size: int
    tp_size: int
    dp_rank: int
    tp_rank: int
    mesh: Any = None
    cp_size: int = 1
    cp_rank: int = 0

    @property
    def fsdp_mesh(self) -> Any:
        """The mesh FSDP2 shards over: ``dp``, or ``dp × cp`` flattened (a context-parallel
        group's ranks hold parts of the same rows: their gradients are reduced together)."""
        if self.cp_size == 1:
            return self.mesh["dp"]
        return self.mesh["dp", "cp"]._flatten("dp_cp")

    @property
    def cp_group(self) -> Any:
        """The process group of this rank's context-parallel group (None without one)."""
        return self.mesh["cp"].get_group() if self.cp_size > 1 else None


SINGLE_PROCESS = MeshInfo(1, 1, 0, 0, None)


def mesh_info(
    rank: int, world_size: int, tp_size: int, device_type: str, cp_size: int = 1
) -> MeshInfo:
    """Build the ``(dp, tp)`` DeviceMesh (``(dp, cp, tp)`` when ``cp_size > 1``; rank ``r`` =
    ``(dp_rank · cp + cp_rank) · tp + tp_rank``) when a process group exists (collective)."""
    if cp_size > 1 and world_size < cp_size:
        raise ValueError(
            f"context_parallel_size={cp_size} needs {cp_size} ranks or more; this worker has "
            f"{world_size}: set context_parallel_size=1 or start more trainer ranks"
        )
    if world_size % (tp_size * cp_size):
        sizes = f"tensor_parallel_size={tp_size}"
        if cp_size > 1:
            sizes += f" × context_parallel_size={cp_size}"
        raise ValueError(
            f"{sizes} does not divide world_size={world_size}: use a divisor of the number of ranks"
        )
    dp = world_size // (tp_size * cp_size)
    if not dist.is_initialized():
        return SINGLE_PROCESS
    if cp_size == 1:
        mesh = init_device_mesh(device_type, (dp, tp_size), mesh_dim_names=("dp", "tp"))
        return MeshInfo(dp, tp_size, rank // tp_size, rank % tp_size, mesh)
    mesh = init_device_mesh(device_type, (dp, cp_size, tp_size), mesh_dim_names=("dp", "cp", "tp"))
    row = rank // tp_size
    return MeshInfo(dp, tp_size, row // cp_size, rank % tp_size, mesh, cp_size, row % cp_size)


def _hf_model(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def check_tp_divisibility(config: Any, tp: int) -> None:
    """Raise a clear error unless heads, KV heads and the MLP width all divide by ``tp``."""
    sizes = {
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": getattr(config, "num_key_value_heads", None)
        or config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
    }
    bad = {k: v for k, v in sizes.items() if v % tp}
    if bad:
        detail = ", ".join(f"{k}={v}" for k, v in bad.items())
        raise ValueError(
            f"tensor_parallel_size={tp} must divide the model's {detail} (each rank takes whole "
            f"attention heads; with GQA the key/value heads too): choose a tensor_parallel_size "
            f"that divides {', '.join(map(str, bad.values()))}"
        )


def tp_plan(model: torch.nn.Module) -> dict[str, Any]:
    """``{module path relative to the decoder layer: ParallelStyle}`` from the HF config."""
    # lazy: torch.distributed.tensor takes ~0.5 s to import; only tensor parallelism needs it
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
    )

    hf = _hf_model(model)
    raw = getattr(hf.config, "base_model_tp_plan", None) or {}
    if not raw:
        raise ValueError(
            f"{type(hf).__name__} has no base_model_tp_plan in its transformers config: tensor "
            "parallelism is not available for this model; set tensor_parallel_size=1"
        )
    plan: dict[str, Any] = {}
    for pattern, style in raw.items():
        if not pattern.startswith("layers.*."):
            continue  # embeddings / LM head stay replicated (full logits on every rank)
        if style == "colwise":
            plan[pattern.removeprefix("layers.*.")] = ColwiseParallel()
        elif style == "rowwise":
            plan[pattern.removeprefix("layers.*.")] = RowwiseParallel()
        elif style == "replicated_with_grad_allreduce":
            # weight on [b, T, h/tp, d]: the heads dimension (2) is the sharded one
            plan[pattern.removeprefix("layers.*.")] = SequenceParallel(
                sequence_dim=2, use_local_output=True
            )
        else:
            raise ValueError(
                f"{type(hf).__name__}'s tp plan uses style {style!r} for {pattern!r}; supported: "
                f"{', '.join(TP_STYLES)}. Set tensor_parallel_size=1 for this model"
            )
    return plan


def apply_tensor_parallel(
    model: torch.nn.Module, layers: list[torch.nn.Module], info: MeshInfo
) -> None:
    """``parallelize_module`` every decoder layer with :func:`tp_plan` on the ``tp`` axis."""
    # lazy: torch.distributed.tensor takes ~0.5 s to import; only tensor parallelism needs it
    from torch.distributed.tensor.parallel import parallelize_module

    check_tp_divisibility(_hf_model(model).config, info.tp_size)
    plan = tp_plan(model)
    tp_mesh = info.mesh["tp"]
    for layer in layers:
        parallelize_module(layer, tp_mesh, plan)


def clip_grad_norm_(params: Iterable[torch.nn.Parameter], max_norm: float) -> float:
    """Clip the global 2-norm ‖g‖ = √(Σ_p ‖g_p‖²) to ``max_norm``; return ‖g‖ before clipping.

    Works for any mix of plain tensors and DTensors on different meshes (FSDP's ``dp`` mesh,
    2-D ``(dp, tp)`` TP parameters, replicated ones): per-mesh norms are reduced with
    ``full_tensor()`` (a collective: call it on every rank). Plain tensors are replicated
    across ranks, so their local norm is already the global one.
    """
    grads = [p.grad for p in params if p.grad is not None]
    groups: dict[Any, list[torch.Tensor]] = {}
    for g in grads:
        key = (g.device_mesh, g.placements) if hasattr(g, "device_mesh") else None
        groups.setdefault(key, []).append(g)
    total_sq = 0.0
    for gs in groups.values():  # same order on every rank: the parameters' order
        norm = torch.nn.utils.get_total_norm(gs, 2.0)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        total_sq += float(norm) ** 2
    total = math.sqrt(total_sq)
    coef = min(max_norm / (total + 1e-6), 1.0)  # as torch.nn.utils.clip_grad_norm_
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return total
