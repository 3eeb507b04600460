"""Helpers for the core tests: random batches and conversion to each array framework."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

FRAMEWORKS = ("numpy", "torch", "jax")


def convert(x: Any, fw: str) -> Any:
    """A numpy array (or scalar / None) as an array of framework ``fw``; float64 kept in torch,
    JAX runs in its default float32 (x64 is a process-wide switch we leave alone)."""
    if not isinstance(x, np.ndarray):
        return x
    if fw == "numpy":
        return x
    if fw == "torch":
        import torch

        return torch.from_numpy(x.copy())
    import jax.numpy as jnp

    return jnp.asarray(x)


def to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def tol(fw: str) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 1e-5} if fw == "jax" else {"rtol": 1e-10, "atol": 1e-12}


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def pg_batch(
    rng: np.random.Generator, B: int = 6, T: int = 9, spread: float = 0.4
) -> dict[str, np.ndarray]:
    """A random policy-gradient batch: logprobs near each other, ragged masks (one row empty,
    one row of length 1), garbage values at masked positions."""
    lp = rng.normal(-1.5, 0.6, (B, T))
    prev = lp + rng.normal(0, spread, (B, T))
    gen = prev + rng.normal(0, spread / 2, (B, T))
    ref = lp + rng.normal(0, spread, (B, T))
    lens = rng.integers(2, T + 1, B)
    lens[0] = 0
    lens[1] = 1
    mask = np.arange(T)[None, :] < lens[:, None]
    rng.shuffle(mask, axis=0)
    adv = rng.normal(0, 1, B)
    for a in (lp, prev, gen, ref):
        a[~mask] = rng.normal(0, 50, (~mask).sum())  # garbage where masked
    return {
        "logprobs": lp,
        "prev_logprobs": prev,
        "gen_logprobs": gen,
        "ref_logprobs": ref,
        "mask": mask,
        "advantages": adv,
    }
