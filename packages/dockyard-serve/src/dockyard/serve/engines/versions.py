"""Per-token policy versions and the bookkeeping shared by the engines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def versions_from_spans(spans: Sequence[Any] | None, n_tokens: int, fallback: int) -> np.ndarray:
    """``[n_tokens] int32`` from vLLM's ``WeightVersionSpan(version, start, end)`` list.

    Tokens no span covers (vLLM reported no label) get ``fallback``. Version labels are the
    decimal strings the engine set with ``update_weight_version``.
    """
    out = np.full(n_tokens, fallback, dtype=np.int32)
    for s in spans or ():
        try:
            v = int(s.version)
        except ValueError:
            v = fallback
        out[s.start : min(s.end, n_tokens)] = v
    return out


def finish_reason(reason: str | None) -> str:
    """Map an engine's finish reason onto ``"stop" | "length" | "abort"``."""
    if reason in ("stop", "length", "abort"):
        return reason
    if reason in ("eos", "stop_token", "stop_string"):
        return "stop"
    if reason in ("max_tokens",):
        return "length"
    return "abort"
