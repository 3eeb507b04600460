"""The name map between Hugging Face parameter names and the NNX model's state paths.

Every parameter has one row: ``HF name ↔ NNX path``, plus whether the array is transposed on
the way (HF ``Linear.weight`` is ``[out, in]``, our kernels are ``[in, out]``). Loading and
exporting both walk this one table, so HF → NNX → HF is the identity (a test holds it to that,
byte for byte). A tied model has no ``lm_head.weight`` in either direction, as in HF files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open

from dockyard.jax.models.config import ModelConfig

NNXPath = tuple[str | int, ...]


@dataclass(frozen=True)
class NameMapEntry:
    """``expert``: the HF tensor is slice ``expert`` (axis 0) of the NNX array (Qwen3-MoE's
    experts are stacked ``[E, ...]`` here, one tensor per expert in HF files)."""

    hf_name: str
    path: NNXPath
    transpose: bool
    expert: int | None = None

    def to_nnx(self, hf_array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(hf_array.T) if self.transpose else hf_array

    def to_hf(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array.T) if self.transpose else array


def name_map(cfg: ModelConfig) -> list[NameMapEntry]:
    """All parameters of ``cfg``'s model, in the order HF's ``state_dict()`` lists them."""
    rows: list[NameMapEntry] = [
        NameMapEntry("model.embed_tokens.weight", ("model", "embed_tokens", "embedding"), False)
    ]

    def linear(hf: str, path: NNXPath, bias: bool) -> None:
        rows.append(NameMapEntry(f"{hf}.weight", (*path, "kernel"), True))
        if bias:
            rows.append(NameMapEntry(f"{hf}.bias", (*path, "bias"), False))

    def norm(hf: str, path: NNXPath) -> None:
        rows.append(NameMapEntry(f"{hf}.weight", (*path, "scale"), False))

    for i in range(cfg.num_hidden_layers):
        hf, p = f"model.layers.{i}", ("model", "layers", i)
        if cfg.is_linear(i):  # Qwen3-Next's Gated DeltaNet
            la, lp = f"{hf}.linear_attn", (*p, "linear_attn")
            linear(f"{la}.in_proj_qkvz", (*lp, "in_proj_qkvz"), False)
            linear(f"{la}.in_proj_ba", (*lp, "in_proj_ba"), False)
            rows.append(NameMapEntry(f"{la}.conv1d.weight", (*lp, "conv1d", "weight"), False))
            rows.append(NameMapEntry(f"{la}.dt_bias", (*lp, "dt_bias"), False))
            rows.append(NameMapEntry(f"{la}.A_log", (*lp, "A_log"), False))
            norm(f"{la}.norm", (*lp, "norm"))
            linear(f"{la}.out_proj", (*lp, "out_proj"), False)
        else:
            for name in ("q_proj", "k_proj", "v_proj"):
                linear(f"{hf}.self_attn.{name}", (*p, "self_attn", name), cfg.qkv_bias)
            linear(f"{hf}.self_attn.o_proj", (*p, "self_attn", "o_proj"), cfg.o_bias)
            if cfg.qk_norm:
                norm(f"{hf}.self_attn.q_norm", (*p, "self_attn", "q_norm"))
                norm(f"{hf}.self_attn.k_norm", (*p, "self_attn", "k_norm"))
        if cfg.is_moe(i):
            linear(f"{hf}.mlp.gate", (*p, "mlp", "gate"), False)
            for e in range(cfg.num_experts):
                for name in ("gate_proj", "up_proj", "down_proj"):
                    rows.append(NameMapEntry(f"{hf}.mlp.experts.{e}.{name}.weight",
                                             (*p, "mlp", "experts", name), True, e))  # fmt: skip
            if cfg.shared_expert_intermediate_size:
                for name in ("gate_proj", "up_proj", "down_proj"):
                    linear(f"{hf}.mlp.shared_expert.{name}", (*p, "mlp", "shared_expert", name),
                           False)  # fmt: skip
                linear(f"{hf}.mlp.shared_expert_gate", (*p, "mlp", "shared_expert_gate"), False)
        else:
            for name in ("gate_proj", "up_proj", "down_proj"):
                linear(f"{hf}.mlp.{name}", (*p, "mlp", name), cfg.mlp_bias)
        norm(f"{hf}.input_layernorm", (*p, "input_layernorm"))
        norm(f"{hf}.post_attention_layernorm", (*p, "post_attention_layernorm"))
        if cfg.gemma:
            norm(f"{hf}.pre_feedforward_layernorm", (*p, "pre_feedforward_layernorm"))
            norm(f"{hf}.post_feedforward_layernorm", (*p, "post_feedforward_layernorm"))
    norm("model.norm", ("model", "norm"))
    if not cfg.tie_word_embeddings:
        linear("lm_head", ("lm_head",), False)
    return rows


def safetensors_files(path: str | Path) -> list[Path]:
    """The checkpoint's ``*.safetensors`` files (single file or an index of shards)."""
    root = Path(path)
    index = root / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [root / s for s in shards]
    single = root / "model.safetensors"
    if single.is_file():
        return [single]
    found = sorted(root.glob("*.safetensors"))
    if not found:
        raise FileNotFoundError(
            f"no *.safetensors in {root}: save the model with "
            "`model.save_pretrained(path, safe_serialization=True)`"
        )
    return found


def iter_hf_tensors(path: str | Path) -> Iterator[tuple[str, np.ndarray]]:
    """``(HF name, array)`` for every tensor of the checkpoint, one at a time (host memory)."""
    for file in safetensors_files(path):
        with safe_open(str(file), framework="numpy") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a Mapping
                yield key, f.get_tensor(key)


def check_names(cfg: ModelConfig, names: set[str]) -> None:
    """Fail naming every missing or unexpected HF tensor."""
    expected = {e.hf_name for e in name_map(cfg)}
    # A tied checkpoint may still carry lm_head.weight (equal to the embedding): accepted.
    extra = names - expected - ({"lm_head.weight"} if cfg.tie_word_embeddings else set())
    extra = {n for n in extra if not n.endswith("rotary_emb.inv_freq")}
    missing = expected - names
    if missing or extra:
        raise ValueError(
            f"checkpoint does not match the {cfg.family} name map: "
            f"missing {sorted(missing)[:8]}{'...' if len(missing) > 8 else ''}, "
            f"unexpected {sorted(extra)[:8]}{'...' if len(extra) > 8 else ''}"
        )
