"""The building blocks every family shares: ``Linear`` (kernels ``[in, out]``), ``Embed`` and
``RMSNorm`` (plain, or Gemma's / Qwen3-Next's ``1 + w`` kind)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

INIT = nnx.initializers.normal(0.02)


class Linear(nnx.Module):
    """``y = x @ kernel + bias``; ``kernel: [in, out]``."""

    def __init__(self, d_in: int, d_out: int, *, bias: bool, rngs: nnx.Rngs):
        self.kernel = nnx.Param(INIT(rngs.params(), (d_in, d_out), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((d_out,), jnp.float32)) if bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        y = x @ self.kernel[...].astype(x.dtype)
        if self.bias is not None:
            y = y + self.bias[...].astype(x.dtype)
        return y


class Embed(nnx.Module):
    """Token embedding ``[vocab, hidden]``."""

    def __init__(self, vocab: int, dim: int, *, rngs: nnx.Rngs):
        self.embedding = nnx.Param(INIT(rngs.params(), (vocab, dim), jnp.float32))

    def __call__(self, ids: jax.Array, dtype: jnp.dtype) -> jax.Array:
        return jnp.take(self.embedding[...].astype(dtype), ids, axis=0)


class RMSNorm(nnx.Module):
    """``w ⊙ x / sqrt(mean(x²) + ε)`` over the last axis, normalised in float32; Gemma's and
    Qwen3-Next's (``offset``): ``(1 + w) ⊙ …``, all in float32 before the cast back."""

    def __init__(self, dim: int, eps: float, offset: bool = False):
        init = jnp.zeros if offset else jnp.ones
        self.scale = nnx.Param(init((dim,), jnp.float32))
        self.eps = eps
        self.offset = offset

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        var = jnp.mean(x32 * x32, axis=-1, keepdims=True)
        if self.offset:
            normed32 = x32 * jax.lax.rsqrt(var + self.eps)
            return (normed32 * (1.0 + self.scale[...].astype(jnp.float32))).astype(x.dtype)
        normed = (x32 * jax.lax.rsqrt(var + self.eps)).astype(x.dtype)
        return self.scale[...].astype(x.dtype) * normed
