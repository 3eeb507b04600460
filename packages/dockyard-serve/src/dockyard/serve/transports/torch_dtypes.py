"""numpy <-> torch conversion by dtype name, including bfloat16 and the float8 formats of a
block-FP8 push (``ml_dtypes`` on the numpy side).

``torch.from_numpy`` rejects ``ml_dtypes`` arrays and ``Tensor.numpy`` these torch dtypes; both
directions go through an integer view of the same width instead (no copy).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def torch_dtype(name: str) -> Any:
    # lazy: torch is optional in dockyard-serve (its transformers and collective extras)
    import torch

    if name == "bool":
        return torch.bool
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise TypeError(f"no torch dtype named {name!r}")
    return dt


_VIA_INT = {"bfloat16": "int16", "float8_e4m3fn": "int8", "float8_e5m2": "int8"}
"""Dtypes numpy knows only through ``ml_dtypes``: carried as the integer of the same width."""


def from_numpy(a: np.ndarray) -> Any:
    """A torch tensor sharing ``a``'s memory (bfloat16 and float8 included)."""
    # lazy: torch is optional in dockyard-serve (its transformers and collective extras)
    import torch

    via = _VIA_INT.get(a.dtype.name)
    if via is not None:
        return torch.from_numpy(a.view(via)).view(getattr(torch, a.dtype.name))
    return torch.from_numpy(a)


def to_numpy(t: Any) -> np.ndarray:
    """A numpy array sharing ``t``'s memory when it is on the CPU (bfloat16 and float8 ->
    ml_dtypes)."""
    # lazy: torch is optional in dockyard-serve (its transformers and collective extras)
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    name = str(t.dtype).removeprefix("torch.")
    via = _VIA_INT.get(name)
    if via is not None:
        # lazy: ml_dtypes is no dependency of dockyard-serve (torch/jax bring it), ~0.5 s
        import ml_dtypes

        return t.view(getattr(torch, via)).numpy().view(getattr(ml_dtypes, name))
    return t.numpy()
