"""Process group, device and model construction: HF causal LM → (LoRA) → TP → FSDP2.

One code path for CPU and GPU: the backend is ``gloo`` on CPU and ``nccl`` on CUDA. The ranks
form a ``(dp, tp)`` device mesh (:mod:`dockyard.torch.parallel`); with ``tensor_parallel_size``
> 1 the decoder layers' projections are split over ``tp`` (DTensor), then parameters are sharded
over ``dp`` with ``fully_shard`` per decoder layer and at the root (FSDP2). On a single process
sharding is skipped (plain module, same numerics).

Precision: parameters and optimizer state stay float32; ``bfloat16`` runs the forward under
``torch.autocast`` (mixed precision; gradients float32).

CPU offload (``fsdp.cpu_offload``, core ``policy.dtensor_cfg.cpu_offload``): on CUDA, FSDP2's
``CPUOffloadPolicy``: each rank's parameter shards, gradients and optimizer state live in
(pinned) CPU memory, every layer's shards are copied to the GPU for its all-gather, and the
optimizer step runs on CPU. The process group then has a gloo backend for CPU tensors beside
NCCL (``cpu:gloo,cuda:nccl``: gradient-norm and export collectives see CPU shards). It needs
FSDP: a single CUDA process without a process group refuses it. On a CPU device the option
changes nothing (everything already lives in CPU memory).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from dockyard.torch.config import TorchPolicyConfig
from dockyard.torch.moe import check_expert_parallel, install_moe, moe_blocks, shard_experts
from dockyard.torch.parallel import SINGLE_PROCESS, MeshInfo, apply_tensor_parallel, mesh_info
from dockyard.torch.vision import is_vision_language


@dataclass(frozen=True)
class DistInfo:
    """Where this worker runs: ``rank`` of ``world_size``, on ``device``, at ``mesh``'s
    ``(dp_rank, tp_rank)`` of ``(dp_size, tp_size)``."""

    rank: int
    world_size: int
    device: torch.device
    mesh: MeshInfo = SINGLE_PROCESS

    @property
    def sharded(self) -> bool:
        return self.world_size > 1

    @property
    def dp_rank(self) -> int:
        return self.mesh.dp_rank

    @property
    def dp_size(self) -> int:
        return self.mesh.dp_size

    @property
    def tp_rank(self) -> int:
        return self.mesh.tp_rank

    @property
    def tp_size(self) -> int:
        return self.mesh.tp_size

    @property
    def cp_rank(self) -> int:
        return self.mesh.cp_rank

    @property
    def cp_size(self) -> int:
        return self.mesh.cp_size


def init_distributed(
    rank: int | None = None,
    world_size: int | None = None,
    tensor_parallel_size: int = 1,
    cpu_offload: bool = False,
    context_parallel_size: int = 1,
) -> DistInfo:
    """Join (or create) the default process group from arguments or torchrun's environment,
    and build the ``(dp, tp)`` mesh.

    ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` (torchrun, or set by the Ray
    runtime) are read when the arguments are None. World size 1 needs no process group.
    ``cpu_offload`` on CUDA adds gloo for CPU tensors (``cpu:gloo,cuda:nccl``).
    """
    rank = int(os.environ.get("RANK", 0)) if rank is None else rank
    world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else world_size
    cuda = torch.cuda.is_available()
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", rank % max(torch.cuda.device_count(), 1)))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        for key in ("MASTER_ADDR", "MASTER_PORT"):
            if key not in os.environ:
                raise RuntimeError(
                    f"world_size={world_size} needs {key} in the environment "
                    "(torchrun sets it; or export MASTER_ADDR=127.0.0.1 MASTER_PORT=29500)"
                )
        dist.init_process_group(
            process_group_backend(cuda, cpu_offload),
            rank=rank,
            world_size=world_size,
            device_id=device if cuda else None,
        )
    if dist.is_initialized():
        rank, world_size = dist.get_rank(), dist.get_world_size()
    mesh = mesh_info(rank, world_size, tensor_parallel_size, device.type, context_parallel_size)
    return DistInfo(rank, world_size, device, mesh)


def process_group_backend(cuda: bool, cpu_offload: bool = False) -> str:
    """``nccl`` on CUDA (with gloo for CPU tensors when offloading), ``gloo`` on CPU."""
    if not cuda:
        return "gloo"
    return "cpu:gloo,cuda:nccl" if cpu_offload else "nccl"


def compute_dtype(cfg: TorchPolicyConfig, device: torch.device) -> torch.dtype:
    """The autocast dtype: bfloat16 on CUDA for ``auto``, else what ``precision`` says."""
    if cfg.precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return torch.bfloat16 if cfg.precision == "bfloat16" else torch.float32


def load_hf_model(
    cfg: TorchPolicyConfig,
    device: torch.device,
    *,
    trainable: bool = True,
    num_labels: int | None = None,
):
    """Load ``cfg.model_name`` (float32) onto ``device``; LoRA-wrap it when configured.

    ``num_labels``: a sequence-classification model instead of the causal LM
    (``AutoModelForSequenceClassification``, its head new and random unless the folder has one;
    a reward model: 1), with ``config.pad_token_id`` set from the tokenizer (its pad token, else
    its end-of-sequence token) when the model's config has none, and LoRA's task type
    ``SEQ_CLS`` (the head trains in full)."""
    # lazy: transformers takes ~2 s to import; importing the worker stays light
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoModelForSequenceClassification,
    )

    attn = cfg.attn_implementation
    hf_config = AutoConfig.from_pretrained(cfg.model_name)
    if attn == "sdpa" and getattr(hf_config, "attn_logit_softcapping", None):
        # transformers' sdpa attention drops the scores' soft-cap (Gemma 2: c·tanh(s/c)),
        # which eager applies, as vLLM does: sdpa would train another model than it serves
        attn = "eager"
    kwargs: dict[str, Any] = {"dtype": torch.float32, "attn_implementation": attn}
    if num_labels is None and is_vision_language(hf_config):  # Qwen2-VL: the vision tower too
        model = AutoModelForImageTextToText.from_pretrained(cfg.model_name, **kwargs)
    elif num_labels is None:
        model = AutoModelForCausalLM.from_pretrained(cfg.model_name, **kwargs)
    else:
        model = AutoModelForSequenceClassification.from_pretrained(
            cfg.model_name, num_labels=num_labels, **kwargs
        )
        _set_pad_token(model.config, cfg)
        model.config.architectures = [type(model).__name__]  # what the exported folder holds
    install_moe(model, cfg.moe)  # Qwen3-MoE blocks -> dockyard.torch.moe.MoEBlock
    model = model.to(device)
    model.config.use_cache = False
    if trainable and cfg.lora.enabled:
        try:
            # lazy: peft takes ~0.5 s to import on top of transformers; only LoRA needs it
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:  # pragma: no cover - peft is a declared dependency
            raise ImportError('LoRA needs peft: pip install "dockyard-torch"') from exc
        torch.manual_seed(cfg.seed)  # identical adapter init on every rank
        model = get_peft_model(
            model,
            LoraConfig(
                r=cfg.lora.rank,
                lora_alpha=cfg.lora.alpha,
                lora_dropout=cfg.lora.dropout,
                target_modules=list(cfg.lora.target_modules),
                bias="none",
                task_type="CAUSAL_LM" if num_labels is None else "SEQ_CLS",
            ),
        )
    if trainable and cfg.activation_checkpointing:
        hf = model.get_base_model() if cfg.lora.enabled else model
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg.lora.enabled:
            hf.enable_input_require_grads()
    if not trainable:
        model.eval()
        model.requires_grad_(False)
    return model


def _set_pad_token(config: Any, cfg: TorchPolicyConfig) -> None:
    """``config.pad_token_id`` from the tokenizer when the model names none: a sequence
    classifier scores the last token that is not padding, and refuses a batch without one."""
    if config.pad_token_id is not None:
        return
    # lazy: transformers takes ~2 s to import; only a model with no pad token id needs it
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cfg.tokenizer_name or cfg.model_name)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    if pad is None:
        raise ValueError(
            f"the tokenizer of {cfg.tokenizer_name or cfg.model_name} has neither a pad nor an "
            "end-of-sequence token: a sequence classifier needs one to find each row's last token"
        )
    config.pad_token_id = int(pad)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks (``_no_split_modules`` classes of the HF model)."""
    hf = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(hf, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(hf).__name__} declares no _no_split_modules: cannot find decoder layers to "
            "shard; set fsdp.enabled=false for a single process"
        )
    return layers


def shard_model(model: torch.nn.Module, info: DistInfo, cfg: TorchPolicyConfig, fsdp: bool) -> Any:
    """Split decoder layers over ``tp`` (when ``tp_size > 1``) and MoE experts over ``dp``
    (``moe.expert_parallel_size > 1``), then, with ``fsdp``, apply FSDP2 ``fully_shard`` over
    ``dp`` per decoder layer and at the root (expert shards excluded)."""
    layers = decoder_layers(model)
    ignored = _expert_parallel(model, info, cfg)
    if info.tp_size > 1:
        if cfg.lora.enabled:
            raise ValueError(
                "tensor_parallel_size > 1 with lora.enabled is not supported (peft wraps the "
                "projections that tensor parallelism splits): set tensor_parallel_size=1"
            )
        apply_tensor_parallel(model, layers, info.mesh)
    if not fsdp:
        return model
    # lazy: torch.distributed.fsdp takes ~0.5 s to import; only FSDP-sharded models need it
    from torch.distributed.fsdp import fully_shard

    kwargs = fsdp_kwargs(cfg, info)
    if ignored:
        kwargs["ignored_params"] = ignored
    for layer in layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def _expert_parallel(
    model: torch.nn.Module, info: DistInfo, cfg: TorchPolicyConfig
) -> set[torch.nn.Parameter]:
    """Shard MoE experts over the ``dp`` axis when ``moe.expert_parallel_size > 1``; returns
    the expert parameters FSDP must leave alone (empty otherwise)."""
    blocks = moe_blocks(model)
    if not blocks:
        return set()
    ep = cfg.moe.expert_parallel_size
    check_expert_parallel(cfg.moe, blocks[0].num_experts, info.dp_size, info.tp_size)
    if ep == 1:
        return set()
    return shard_experts(model, info.mesh.mesh["dp"], ep)


def fsdp_kwargs(cfg: TorchPolicyConfig, info: DistInfo) -> dict[str, Any]:
    """``fully_shard``'s keyword arguments: the ``dp`` mesh, ``reshard_after_forward`` and, for
    ``fsdp.cpu_offload`` on CUDA, ``offload_policy=CPUOffloadPolicy()`` (see the module doc)."""
    # lazy: torch.distributed.fsdp takes ~0.5 s to import; only FSDP-sharded models need it
    from torch.distributed.fsdp import CPUOffloadPolicy

    kwargs: dict[str, Any] = {
        "mesh": info.mesh.fsdp_mesh,
        "reshard_after_forward": cfg.fsdp.reshard_after_forward,
    }
    if cfg.fsdp.cpu_offload and info.device.type == "cuda":
        kwargs["offload_policy"] = CPUOffloadPolicy()
    return kwargs


def use_fsdp(cfg: TorchPolicyConfig, info: DistInfo) -> bool:
    """Whether to shard over ``dp`` (``dp × cp``): ``fsdp.enabled``, or (None) when there are
    several such ranks."""
    ranks = info.dp_size * info.cp_size
    enabled = ranks > 1 if cfg.fsdp.enabled is None else cfg.fsdp.enabled
    if ranks > 1 and not enabled:
        raise ValueError(
            f"fsdp.enabled=false with {ranks} data- and context-parallel ranks (world_size="
            f"{info.world_size} / tensor_parallel_size={info.tp_size}): gradients would not be "
            "synchronised across them; set fsdp.enabled=true (or leave it unset)"
        )
    if enabled and info.mesh.mesh is None:
        enabled = False  # one process without a process group: nothing to shard over
    if cfg.fsdp.cpu_offload and info.device.type == "cuda" and not enabled:
        raise ValueError(
            "policy.dtensor_cfg.cpu_offload (fsdp.cpu_offload) offloads FSDP2's shards, but "
            f"this trainer runs {info.dp_size} data-parallel rank(s) without FSDP: use 2 or more "
            "data-parallel ranks (cluster.trainer_ranks) or set cpu_offload: false"
        )
    return enabled
