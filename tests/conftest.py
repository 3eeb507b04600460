"""Suite-wide pytest set-up: `gpu` tests skip (with the reason) where CUDA is absent."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def _cuda_available() -> tuple[bool, str]:
    try:
        import torch  # lazy: most of the suite must not pay for torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU on this machine (run scripts/gpu_checks.sh on a GPU host)"
    return True, ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    ok, reason = _cuda_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"gpu: {reason}")
    for item in gpu_items:
        item.add_marker(skip)
