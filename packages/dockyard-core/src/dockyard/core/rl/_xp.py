"""A tiny array namespace so the RL math is written once for numpy, torch and JAX.

``namespace(x)`` looks at the *type* of its arguments (never imports a framework that the
caller has not already imported) and returns an object with the handful of element-wise and
reduction ops the math needs. Every op keeps the input's array type, so torch tensors stay
differentiable through autograd and jax arrays through ``jax.grad``.

Adding an op: add it to :class:`_Numpy` (the reference semantics), then to the torch and JAX
classes where their spelling differs.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

Array = Any  # numpy.ndarray | torch.Tensor | jax.Array


class _Numpy:
    name = "numpy"

    def __init__(self) -> None:
        self.m: Any = np

    # -- creation / conversion -------------------------------------------------------------
    def asarray(self, x: Any, like: Array) -> Array:
        return self.m.asarray(x, dtype=self.float_dtype(like))

    def float_dtype(self, like: Array) -> Any:
        dt = getattr(like, "dtype", None)
        if dt is not None and self.m.issubdtype(dt, self.m.floating):
            return dt
        return self.m.float64

    def to_float(self, x: Array, like: Array) -> Array:
        return self.m.asarray(x).astype(self.float_dtype(like))

    def stop_gradient(self, x: Array) -> Array:
        return x

    def promote_half(self, x: Array) -> Array:
        """float16 / bfloat16 -> float32 (sums of many tokens lose exactness in 16 bits)."""
        return x.astype(self.m.float32) if str(x.dtype) in ("float16", "bfloat16") else x

    # -- element-wise ----------------------------------------------------------------------
    def exp(self, x: Array) -> Array:
        return self.m.exp(x)

    def expm1(self, x: Array) -> Array:
        return self.m.expm1(x)

    def log(self, x: Array) -> Array:
        return self.m.log(x)

    def log1p(self, x: Array) -> Array:
        return self.m.log1p(x)

    def abs(self, x: Array) -> Array:
        return self.m.abs(x)

    def sqrt(self, x: Array) -> Array:
        return self.m.sqrt(x)

    def where(self, cond: Array, a: Any, b: Any) -> Array:
        return self.m.where(cond, a, b)

    def maximum(self, a: Any, b: Any) -> Array:
        return self.m.maximum(a, b)

    def minimum(self, a: Any, b: Any) -> Array:
        return self.m.minimum(a, b)

    def clip(self, x: Array, lo: float | None, hi: float | None) -> Array:
        return self.m.clip(x, lo, hi)

    def log_sigmoid(self, x: Array) -> Array:
        return -self.m.logaddexp(0.0, -x)

    def logical_and(self, a: Array, b: Array) -> Array:
        return self.m.logical_and(a, b)

    def logical_or(self, a: Array, b: Array) -> Array:
        return self.m.logical_or(a, b)

    def logical_not(self, a: Array) -> Array:
        return self.m.logical_not(a)

    # -- reductions ------------------------------------------------------------------------
    def sum(self, x: Array, axis: int | None = None, keepdims: bool = False) -> Array:
        return self.m.sum(x, axis=axis, keepdims=keepdims)

    def max(self, x: Array, axis: int | None = None, keepdims: bool = False) -> Array:
        return self.m.max(x, axis=axis, keepdims=keepdims)

    def min(self, x: Array, axis: int | None = None, keepdims: bool = False) -> Array:
        return self.m.min(x, axis=axis, keepdims=keepdims)

    def logsumexp(self, x: Array, axis: int = -1, keepdims: bool = False) -> Array:
        mx = self.m.max(x, axis=axis, keepdims=True)
        mx = self.m.where(self.m.isfinite(mx), mx, 0.0)
        out = self.m.log(self.m.sum(self.m.exp(x - mx), axis=axis, keepdims=True)) + mx
        return out if keepdims else self.m.squeeze(out, axis=axis)

    def take_along_axis(self, x: Array, idx: Array, axis: int = -1) -> Array:
        return self.m.take_along_axis(x, idx, axis=axis)

    def expand_dims(self, x: Array, axis: int) -> Array:
        return self.m.expand_dims(x, axis)

    def stack(self, xs: list[Array], axis: int = 0) -> Array:
        return self.m.stack(xs, axis)

    def dot_all(self, x: Array, w: Array) -> Array:
        """Σ x·w over all elements in one pass (differentiable in x)."""
        return self.m.vdot(self.m.reshape(x, (-1,)), self.m.reshape(w, (-1,)))

    def count(self, cond: Array) -> Array:
        """Number of True entries, as a float like the inputs."""
        return self.m.sum(cond)


class _Torch(_Numpy):
    name = "torch"

    def __init__(self) -> None:
        # lazy: torch is no dependency of dockyard-core; only a caller with torch tensors gets here
        import torch

        self.m = torch

    def asarray(self, x: Any, like: Array) -> Array:
        return self.m.as_tensor(x, dtype=self.float_dtype(like), device=like.device)

    def float_dtype(self, like: Array) -> Any:
        dt = getattr(like, "dtype", None)
        return dt if dt is not None and dt.is_floating_point else self.m.float32

    def to_float(self, x: Array, like: Array) -> Array:
        return self.m.as_tensor(x, device=like.device).to(self.float_dtype(like))

    def stop_gradient(self, x: Array) -> Array:
        return x.detach()

    def promote_half(self, x: Array) -> Array:
        return x.float() if x.dtype in (self.m.float16, self.m.bfloat16) else x

    def where(self, cond: Array, a: Any, b: Any) -> Array:
        return self.m.where(cond, a, b)

    def clip(self, x: Array, lo: float | None, hi: float | None) -> Array:
        return self.m.clamp(x, lo, hi)

    def maximum(self, a: Any, b: Any) -> Array:
        if not isinstance(a, self.m.Tensor) and not isinstance(b, self.m.Tensor):
            return max(a, b)
        if not isinstance(b, self.m.Tensor):
            return self.m.clamp(a, min=b)
        if not isinstance(a, self.m.Tensor):
            return self.m.clamp(b, min=a)
        return self.m.maximum(a, b)

    def minimum(self, a: Any, b: Any) -> Array:
        if not isinstance(a, self.m.Tensor) and not isinstance(b, self.m.Tensor):
            return min(a, b)
        if not isinstance(b, self.m.Tensor):
            return self.m.clamp(a, max=b)
        if not isinstance(a, self.m.Tensor):
            return self.m.clamp(b, max=a)
        return self.m.minimum(a, b)

    def log_sigmoid(self, x: Array) -> Array:
        return self.m.nn.functional.logsigmoid(x)

    def sum(self, x: Array, axis: int | None = None, keepdims: bool = False) -> Array:
        return self.m.sum(x) if axis is None else self.m.sum(x, dim=axis, keepdim=keepdims)

    def max(self, x: Array, axis: int | None = None, keepdims: bool = False) -> Array:
        return self.m.amax(x) if axis is None else self.m.amax(x, dim=axis, keepdim=keepdims)

    def min(self, x: Array, axis: int | None = None, keepdims: bool = False) -> Array:
        return self.m.amin(x) if axis is None else self.m.amin(x, dim=axis, keepdim=keepdims)

    def logsumexp(self, x: Array, axis: int = -1, keepdims: bool = False) -> Array:
        return self.m.logsumexp(x, dim=axis, keepdim=keepdims)

    def take_along_axis(self, x: Array, idx: Array, axis: int = -1) -> Array:
        return self.m.gather(x, axis, idx.long())

    def expand_dims(self, x: Array, axis: int) -> Array:
        return self.m.unsqueeze(x, axis)

    def dot_all(self, x: Array, w: Array) -> Array:
        return self.m.dot(x.reshape(-1), w.reshape(-1))

    def count(self, cond: Array) -> Array:
        return self.m.count_nonzero(cond)


class _Jax(_Numpy):
    name = "jax"

    def __init__(self) -> None:
        # lazy: jax is no dependency of dockyard-core; only a caller with JAX arrays gets here
        import jax

        self.m = jax.numpy
        self._jax = jax

    def asarray(self, x: Any, like: Array) -> Array:
        return self.m.asarray(x, dtype=self.float_dtype(like))

    def float_dtype(self, like: Array) -> Any:
        dt = getattr(like, "dtype", None)
        if dt is not None and self.m.issubdtype(dt, self.m.floating):
            return dt
        return self.m.float32

    def to_float(self, x: Array, like: Array) -> Array:
        return self.m.asarray(x).astype(self.float_dtype(like))

    def stop_gradient(self, x: Array) -> Array:
        return self._jax.lax.stop_gradient(x)

    def log_sigmoid(self, x: Array) -> Array:
        return self._jax.nn.log_sigmoid(x)

    def logsumexp(self, x: Array, axis: int = -1, keepdims: bool = False) -> Array:
        return self._jax.nn.logsumexp(x, axis=axis, keepdims=keepdims)


_CACHE: dict[str, _Numpy] = {}


def _kind(x: Any) -> str | None:
    mod = type(x).__module__
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith(("jax", "jaxlib")):
        return "jax"
    if "torch" in sys.modules and isinstance(x, sys.modules["torch"].Tensor):
        return "torch"
    return None


def namespace(*arrays: Any) -> _Numpy:
    """The namespace of the first torch / JAX array among ``arrays`` (numpy otherwise).

    Mixing frameworks in one call is an error; ``None`` entries and Python scalars are ignored.
    """
    kinds = {k for k in (_kind(a) for a in arrays if a is not None) if k is not None}
    if len(kinds) > 1:
        raise TypeError(
            f"dockyard.core.rl: arrays from several frameworks in one call: {sorted(kinds)}"
        )
    kind = kinds.pop() if kinds else "numpy"
    if kind not in _CACHE:
        _CACHE[kind] = {"numpy": _Numpy, "torch": _Torch, "jax": _Jax}[kind]()
    return _CACHE[kind]


Namespace = _Numpy
