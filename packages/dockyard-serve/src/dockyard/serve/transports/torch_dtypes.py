"""numpy <-> torch conversion by dtype name, including bfloat16 (``ml_dtypes`` on the numpy side).

``torch.from_numpy`` rejects ``ml_dtypes.bfloat16``; both directions go through a 16-bit integer
view instead (no copy).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def torch_dtype(name: str) -> Any:
    import torch

    if name == "bool":
        return torch.bool
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise TypeError(f"no torch dtype named {name!r}")
    return dt


def from_numpy(a: np.ndarray) -> Any:
    """A torch tensor sharing ``a``'s memory (bfloat16 included)."""
    import torch

    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_numpy(t: Any) -> np.ndarray:
    """A numpy array sharing ``t``'s memory when it is on the CPU (bfloat16 -> ml_dtypes)."""
    import torch

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()
