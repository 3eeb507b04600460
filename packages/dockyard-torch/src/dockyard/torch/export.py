"""Weight export for refit: full tensors by Hugging Face name, in buckets, one tensor at a time.

Under FSDP2 each parameter is a DTensor shard; :func:`iter_hf_tensors` gathers *one* parameter
at a time (``DTensor.full_tensor()``, a collective: every rank must iterate in step), so no rank
ever holds more than one bucket plus one full tensor beyond its own shard.

Names are those of the Hugging Face model (``model.layers.0.self_attn.q_proj.weight``), what
``transformers`` and vLLM's ``load_weights`` expect. Tied weights appear once (the first name,
``model.embed_tokens.weight``), as ``save_pretrained`` writes them.

LoRA (peft) models export either

* ``merged``: W = W₀ + (α/r)·B·A under the base name (the engine needs no LoRA support), or
* ``adapters``: only ``…q_proj.lora_A.weight`` / ``…lora_B.weight`` under peft's saved names
  (``base_model.model.…``, without the adapter name), as in ``adapter_model.safetensors``.

Fused MoE experts (``transformers`` 5 keeps each layer's experts as ``mlp.experts.gate_up_proj
[E, 2I, H]`` and ``mlp.experts.down_proj [E, H, I]``) are exported per expert, under the names
``save_pretrained`` writes and vLLM's Qwen3-MoE ``load_weights`` reads:
``mlp.experts.{e}.gate_proj.weight = gate_up[e, :I]``, ``….up_proj.weight = gate_up[e, I:]``,
``….down_proj.weight = down[e]``. The aux-loss-free router bias (``mlp.expert_bias``) is trainer
state: Qwen3-MoE has no such tensor, so it is not exported (docs/packages/torch.md says what that
means for engine/trainer agreement).

A module peft trains in full (``modules_to_save``: the ``score`` head of a ``SEQ_CLS`` model)
exports its trained copy, under its HF name (``score.weight``) or, with ``adapters``, peft's
saved one (``base_model.model.score.weight``); peft's frozen original is left out.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

_PEFT_PREFIX = "base_model.model."
_SAVED = ".modules_to_save.default."  # peft's trainable copy of a ``modules_to_save`` module
_GATE_UP, _DOWN, _BIAS = ".mlp.experts.gate_up_proj", ".mlp.experts.down_proj", ".mlp.expert_bias"


def _full(t: torch.Tensor) -> torch.Tensor:
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.detach()


def _to_numpy(t: torch.Tensor, dtype: torch.dtype | None, copy: bool = True) -> np.ndarray:
    out = t.to("cpu", dtype=dtype) if dtype is not None else t.to("cpu")
    if out.dtype == torch.bfloat16:  # numpy has no bfloat16: ship float32
        out = out.float()
    if copy and out.data_ptr() == t.data_ptr():
        out = out.clone()  # never hand out a view of a live parameter (unless asked to)
    return out.contiguous().numpy()


def iter_hf_tensors(
    model: torch.nn.Module,
    mode: str = "merged",
    dtype: torch.dtype | None = None,
    copy: bool = True,
) -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(hf_name, full array)`` for every persistent tensor, gathering one at a time.

    ``mode``: ``"merged"`` or ``"adapters"`` (LoRA models; ignored otherwise). ``copy=False``:
    an array may view a live CPU parameter (valid until the next optimizer step) instead of
    being a copy of it, for a consumer that copies each one at once (a weight sender).
    """
    if mode not in ("merged", "adapters"):
        raise ValueError(f"export mode {mode!r}: expected 'merged' or 'adapters'")
    state = model.state_dict(keep_vars=True)
    is_peft = any(".lora_A." in k for k in state)
    seen: set[int] = set()
    scaling = _lora_scaling(model) if is_peft else {}
    for name, tensor in state.items():
        if id(tensor) in seen:
            continue  # tied weight: exported once, under its first name
        seen.add(id(tensor))
        if not is_peft:
            for out_name, part in hf_names(name, _full(tensor)):
                yield out_name, _to_numpy(part, dtype, copy)
            continue
        if ".original_module." in name:
            continue  # peft's frozen copy of a module that trains in full (below)
        if mode == "adapters":
            if ".lora_A." in name or ".lora_B." in name or _SAVED in name:
                saved = name.replace(_SAVED, ".").replace(".default.", ".")
                yield saved, _to_numpy(_full(tensor), dtype, copy)
            continue
        if ".lora_A." in name or ".lora_B." in name:
            continue  # folded into the base weight below
        hf_name = name.removeprefix(_PEFT_PREFIX).replace(".base_layer.", ".")
        hf_name = hf_name.replace(_SAVED, ".")  # a module trained in full: a classifier head
        full = _full(tensor)
        module = name.rsplit(".base_layer.", 1)[0] if ".base_layer." in name else None
        if module is not None and name.endswith(".weight") and module in scaling:
            a = _full(state[f"{module}.lora_A.default.weight"])
            b = _full(state[f"{module}.lora_B.default.weight"])
            full = full + scaling[module] * (b.float() @ a.float()).to(full.dtype)
        for out_name, part in hf_names(hf_name, full):
            yield out_name, _to_numpy(part, dtype, copy)


def hf_names(name: str, full: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint names and tensors of state-dict entry ``name`` (the module docstring's
    experts map; nothing for the router bias; else ``name`` itself)."""
    if name.endswith(_BIAS):
        return
    if name.endswith(_GATE_UP) and full.dim() == 3:
        prefix = name.removesuffix("gate_up_proj")
        for e, w in enumerate(full):
            gate, up = w.chunk(2, dim=0)
            yield f"{prefix}{e}.gate_proj.weight", gate
            yield f"{prefix}{e}.up_proj.weight", up
        return
    if name.endswith(_DOWN) and full.dim() == 3:
        prefix = name.removesuffix("down_proj")
        for e, w in enumerate(full):
            yield f"{prefix}{e}.down_proj.weight", w
        return
    yield name, full


def _lora_scaling(model: torch.nn.Module) -> dict[str, float]:
    """``{module state-dict prefix: α/r}`` for each LoRA layer (adapter ``default``)."""
    out: dict[str, float] = {}
    for name, module in model.named_modules():
        s = getattr(module, "scaling", None)
        if isinstance(s, dict) and "default" in s and hasattr(module, "lora_A"):
            out[name] = float(s["default"])
    return out


def bucketed(
    items: Iterator[tuple[str, np.ndarray]], bucket_bytes: int
) -> Iterator[dict[str, np.ndarray]]:
    """Group ``(name, array)`` pairs into dicts of at most ``bucket_bytes`` (a larger tensor
    forms its own bucket)."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    bucket: dict[str, np.ndarray] = {}
    size = 0
    for name, arr in items:
        if bucket and size + arr.nbytes > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        bucket[name] = arr
        size += arr.nbytes
    if bucket:
        yield bucket
