"""dockyard.jax: the JAX policy worker — Flax NNX Qwen2/Qwen3/Llama/Gemma 2/3 with Hugging Face
weight parity, ``jax.sharding`` over an ``(fsdp, tensor)`` mesh, optax AdamW, orbax checkpoints.

    from dockyard.jax import JaxPolicyWorker
    worker = JaxPolicyWorker({"model_name": "/path/to/hf_model"})

The worker is imported on first use (``import dockyard.jax`` alone does not import jax).
"""

from __future__ import annotations

from typing import Any

from dockyard.jax.config import JaxPolicyConfig

__all__ = ["JaxPolicyConfig", "JaxPolicyWorker"]


def __getattr__(name: str) -> Any:
    if name == "JaxPolicyWorker":
        # lazy: the worker imports jax, flax and optax (3 s); the config alone needs none of them
        from dockyard.jax.worker import JaxPolicyWorker

        return JaxPolicyWorker
    raise AttributeError(f"module 'dockyard.jax' has no attribute {name!r}")
