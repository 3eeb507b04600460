"""Flax NNX Qwen2 / Qwen3 / Llama / Gemma 2 / Gemma 3 / Qwen3-MoE / Qwen3-Next with Hugging Face
weight parity."""

from dockyard.jax.models.config import ModelConfig, RopeConfig
from dockyard.jax.models.hf import (
    abstract_model,
    apply,
    init_params,
    iter_hf_weights,
    load_hf_model,
    load_hf_params,
    save_hf,
)
from dockyard.jax.models.name_map import NameMapEntry, name_map
from dockyard.jax.models.transformer import CausalLM

__all__ = [
    "CausalLM",
    "ModelConfig",
    "NameMapEntry",
    "RopeConfig",
    "abstract_model",
    "apply",
    "init_params",
    "iter_hf_weights",
    "load_hf_model",
    "load_hf_params",
    "name_map",
    "save_hf",
]
