"""Shared fixtures for tests/torch: the tiny model folders (cached on disk by dockyard.torch.testing)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def qwen2_path():
    from dockyard.torch.testing import build_tiny_model

    return build_tiny_model(family="qwen2")


@pytest.fixture(scope="session")
def base_config(qwen2_path):
    """A worker config dict over the tiny Qwen2 (float32, constant lr after 2 warm-up steps)."""
    return {
        "model_name": str(qwen2_path),
        "precision": "float32",
        "train_micro_batch_size": 2,
        "logprob_batch_size": 4,
        "max_grad_norm": 1.0,
        "optimizer": {"lr": 1e-3, "weight_decay": 0.01},
        "scheduler": {"name": "cosine", "warmup_steps": 2, "total_steps": 10},
    }


@pytest.fixture(scope="session")
def qwen3_moe_path():
    """A tiny Qwen3-MoE: 2 layers, 8 experts of width 32, top-2 (dockyard.torch.testing)."""
    from dockyard.torch.testing import build_tiny_model

    return build_tiny_model(family="qwen3_moe")


@pytest.fixture(scope="session")
def moe_config(qwen3_moe_path):
    """A worker config dict over the tiny Qwen3-MoE (float32, no reference copy)."""
    return {
        "model_name": str(qwen3_moe_path),
        "precision": "float32",
        "train_micro_batch_size": 2,
        "logprob_batch_size": 4,
        "reference_policy": False,
        "optimizer": {"lr": 1e-3},
    }
