"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, arXiv:2412.06464): Qwen3-Next's linear
attention layers, numerically as transformers' ``modeling_qwen3_next`` computes them.

Per value head, with q and k L2-normalised and q scaled by ``d_k^-½``, a state
``S ∈ R^{d_k × d_v}`` runs over the sequence, token t doing

    S ← e^{g_t} S;   S ← S + k_t (β_t (v_t − Sᵀk_t))ᵀ;   o_t = Sᵀq_t

: the state forgets by the gate
``g_t = −e^{A} softplus(a_t + dt_bias) ≤ 0`` and writes only the part of ``v_t`` it does not
already predict from ``k_t`` (the delta rule), at the rate ``β_t = σ(b_t)``.

Two forms, equal (a test holds them to float32 rounding, values and gradients):

* :func:`gated_delta_recurrent` — the rule above, one ``lax.scan`` step per token (the
  reference, and what decoding one token at a time computes);
* :func:`gated_delta_chunked` — the training form: the sequence cut into chunks of ``C``
  tokens; inside a chunk the C delta updates collapse, by the UT transform, into one unit
  lower-triangular system ``(I + tril₋₁(β K Kᵀ ⊙ Γ)) U = β V`` (Γ the pairwise decays), solved
  by forward substitution, so the chunk costs matmuls, and a scan carries S across chunks.

Packed rows: ``segments [B, T]`` (an id per token, a new id where a sequence starts) keep the
sequences apart — the state and the convolution never reach across a boundary, in either form.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from dockyard.jax.models.config import ModelConfig
from dockyard.jax.models.layers import Linear, RMSNorm


def l2norm(x: jax.Array, eps: float = 1e-6) -> jax.Array:
    """``x / sqrt(Σ x² + ε)`` over the last axis (the FLA kernels' and transformers' form)."""
    return x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def _prepare(q, k, v, g, beta):
    f32 = (a.astype(jnp.float32) for a in (q, k, v, g, beta))
    q, k, v, g, beta = f32
    q = l2norm(q) * q.shape[-1] ** -0.5
    return q, l2norm(k), v, g, beta


def _starts(segments: jax.Array | None, B: int, T: int) -> jax.Array:
    """``[B, T]`` bool: the token opens a new sequence (its state starts from zero)."""
    if segments is None:
        return jnp.zeros((B, T), bool)
    prev = jnp.concatenate([segments[:, :1], segments[:, :-1]], axis=1)
    return segments != prev


def gated_delta_recurrent(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    g: jax.Array,
    beta: jax.Array,
    segments: jax.Array | None = None,
) -> jax.Array:
    """``q, k: [B, T, H, d_k]``, ``v: [B, T, H, d_v]``, ``g, beta: [B, T, H]`` → ``o: [B, T,
    H, d_v]`` in ``q``'s dtype (computed in float32), one token at a time."""
    dtype, (B, T, H, dk), dv = q.dtype, k.shape, v.shape[-1]
    q, k, v, g, beta = _prepare(q, k, v, g, beta)
    starts = _starts(segments, B, T)

    def step(S, xs):
        q_t, k_t, v_t, g_t, b_t, start = xs
        S = jnp.where(start[:, None, None, None], 0.0, S * jnp.exp(g_t)[..., None, None])
        delta = (v_t - jnp.einsum("bhkv,bhk->bhv", S, k_t)) * b_t[..., None]
        S = S + k_t[..., :, None] * delta[..., None, :]
        return S, jnp.einsum("bhkv,bhk->bhv", S, q_t)

    xs = tuple(jnp.moveaxis(a, 1, 0) for a in (q, k, v, g, beta, starts))
    _, out = jax.lax.scan(step, jnp.zeros((B, H, dk, dv), jnp.float32), xs)
    return jnp.moveaxis(out, 0, 1).astype(dtype)


def gated_delta_chunked(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    g: jax.Array,
    beta: jax.Array,
    segments: jax.Array | None = None,
    chunk_size: int = 64,
) -> jax.Array:
    """:func:`gated_delta_recurrent`'s result, ``chunk_size`` tokens at a time."""
    dtype, (B, T, H, dk), dv = q.dtype, k.shape, v.shape[-1]
    q, k, v, g, beta = _prepare(q, k, v, g, beta)
    C = chunk_size
    pad = (-T) % C
    N = (T + pad) // C
    seg = jnp.zeros((B, T), jnp.int32) if segments is None else segments.astype(jnp.int32)
    seg = jnp.pad(seg, ((0, 0), (0, pad)), mode="edge").reshape(B, N, C)

    def chunks(x: jax.Array) -> jax.Array:  # [B, T, H, ...] -> [B, H, N, C, ...]
        x = jnp.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 2))
        x = jnp.moveaxis(x, 2, 1)
        return x.reshape(B, H, N, C, *x.shape[3:])

    q, k, v, g, beta = (chunks(a) for a in (q, k, v, g, beta))
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    cum = jnp.cumsum(g, axis=-1)  # log of the decay from the chunk's start to each token
    same = (seg[..., :, None] == seg[..., None, :])[:, None]  # [B, 1, N, C, C]
    causal = jnp.tril(jnp.ones((C, C), bool))
    diff = cum[..., :, None] - cum[..., None, :]
    decay = jnp.where(causal & same, jnp.exp(jnp.where(causal, diff, 0.0)), 0.0)  # Γ, ≤ 1
    # Tokens that read the state carried in: those in the sequence the previous chunk ended in.
    prev = jnp.concatenate([seg[:, :1, 0], seg[:, :-1, -1]], axis=1)  # [B, N]
    carry = (seg == prev[..., None])[:, None].astype(jnp.float32)  # [B, 1, N, C]
    last = (seg == seg[..., -1:])[:, None].astype(jnp.float32)  # writes the chunk's last sequence

    ut = jnp.einsum("bhncd,bhnsd->bhncs", k_beta, k) * decay
    inverse = _unit_lower_inverse(ut)
    new_values = inverse @ v_beta
    k_cumdecay = inverse @ (k_beta * (jnp.exp(cum) * carry)[..., None])
    intra = jnp.einsum("bhncd,bhnsd->bhncs", q, k) * decay
    q_read = q * (jnp.exp(cum) * carry)[..., None]
    k_write = k * (jnp.exp(cum[..., -1:] - cum) * last)[..., None]
    chunk_decay = jnp.exp(cum[..., -1]) * carry[..., -1]  # [B, H, N]: S survives the chunk

    def step(S, xs):
        nv, kc, qr, intra_n, kw, cd = xs
        v_new = nv - kc @ S
        out = qr @ S + intra_n @ v_new
        return S * cd[..., None, None] + jnp.swapaxes(kw, -1, -2) @ v_new, out

    xs = tuple(jnp.moveaxis(a, 2, 0) for a in (new_values, k_cumdecay, q_read, intra, k_write,
                                               chunk_decay))  # fmt: skip
    _, out = jax.lax.scan(step, jnp.zeros((B, H, dk, dv), jnp.float32), xs)
    out = jnp.moveaxis(out, 0, 2).reshape(B, H, N * C, dv)[:, :, :T]
    return jnp.moveaxis(out, 1, 2).astype(dtype)


def _unit_lower_inverse(a: jax.Array) -> jax.Array:
    """``(I + tril₋₁(a))⁻¹`` of ``a [..., C, C]`` by forward substitution, one row at a time
    (transformers' export path for the same solve): row i of ``M = −(I + L)⁻¹ + I`` is
    ``m_i = −l_i + m_i M`` over the rows above it. Matmuls only: XLA:CPU's batched
    ``triangular_solve`` deadlocked intermittently here (2 of 8 runs of a jitted step)."""
    C = a.shape[-1]
    m = -jnp.tril(a, -1)

    def row(i, m):
        r = jax.lax.dynamic_index_in_dim(m, i, axis=-2, keepdims=False)  # zeros from column i
        r = r + jnp.einsum("...j,...jc->...c", r, m)
        return jax.lax.dynamic_update_index_in_dim(m, r, i, axis=-2)

    return jax.lax.fori_loop(1, C, row, m) + jnp.eye(C, dtype=a.dtype)


def causal_conv1d(x: jax.Array, weight: jax.Array, segments: jax.Array | None = None):
    """Depthwise causal convolution then SiLU: ``out_t = silu(Σ_j w[:, j] x_{t−K+1+j})`` for
    ``x: [B, T, D]``, ``weight: [D, K]`` (torch's ``conv1d(groups=D, padding=K−1)[:T]``); a
    token from another sequence of a packed row counts as zero."""
    K, T = weight.shape[-1], x.shape[1]
    w = weight.astype(x.dtype)
    out = jnp.zeros_like(x)
    for j in range(K):
        shift = K - 1 - j
        xs = jnp.pad(x, ((0, 0), (shift, 0), (0, 0)))[:, :T]
        if segments is not None and shift:
            back = jnp.pad(segments, ((0, 0), (shift, 0)), constant_values=-1)[:, :T]
            xs = xs * (back == segments)[..., None].astype(x.dtype)
        out = out + xs * w[:, j]
    return jax.nn.silu(out)


class Conv1d(nnx.Module):
    """HF's ``nn.Conv1d(D, D, K, groups=D, bias=False)``: ``weight [D, 1, K]``."""

    def __init__(self, dim: int, kernel: int, *, rngs: nnx.Rngs):
        self.weight = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (dim, 1, kernel)))


class GatedRMSNorm(RMSNorm):
    """``w ⊙ norm(x) · silu(z)`` (norm in float32, the gate in float32: ``Qwen3NextRMSNormGated``)."""

    def __init__(self, dim: int, eps: float):
        super().__init__(dim, eps)

    def __call__(self, x: jax.Array, z: jax.Array) -> jax.Array:  # type: ignore[override]
        return (super().__call__(x) * jax.nn.silu(z.astype(jnp.float32))).astype(x.dtype)


class GatedDeltaNet(nnx.Module):
    """Qwen3-Next's linear-attention mixer (``Qwen3NextGatedDeltaNet``), HF attribute names.

    ``in_proj_qkvz`` emits, per key head, ``[q (d_k) | k (d_k) | v (r·d_v) | z (r·d_v)]`` and
    ``in_proj_ba`` ``[b (r) | a (r)]`` (r = value heads per key head); q, k, v go through the
    causal conv, q and k are repeated to the value heads, the rule runs per value head, and
    ``out_proj(GatedRMSNorm(o, z))`` is the layer's output. ``chunk_size`` None: the recurrent
    form (the chunked one, 64, by default)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, chunk_size: int | None = 64):
        nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        dk, dv, h = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.hidden_size
        self.cfg = cfg
        self.in_proj_qkvz = Linear(h, 2 * nk * dk + 2 * nv * dv, bias=False, rngs=rngs)
        self.in_proj_ba = Linear(h, 2 * nv, bias=False, rngs=rngs)
        self.conv1d = Conv1d(2 * nk * dk + nv * dv, cfg.linear_conv_kernel_dim, rngs=rngs)
        self.dt_bias = nnx.Param(jnp.ones((nv,), jnp.float32))
        self.A_log = nnx.Param(jnp.zeros((nv,), jnp.float32))
        self.norm = GatedRMSNorm(dv, cfg.rms_norm_eps)
        self.out_proj = Linear(nv * dv, h, bias=False, rngs=rngs)
        self.chunk_size = chunk_size

    def __call__(
        self, x: jax.Array, valid: jax.Array | None = None, segments: jax.Array | None = None
    ) -> jax.Array:
        """``x: [B, T, H]``, ``valid: [B, T]`` bool (padding is zeroed first, as HF does)."""
        cfg = self.cfg
        B, T, _ = x.shape
        nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        dk, dv, r = cfg.linear_key_head_dim, cfg.linear_value_head_dim, nv // nk
        if valid is not None:
            x = x * valid[..., None].astype(x.dtype)
        qkvz = self.in_proj_qkvz(x).reshape(B, T, nk, 2 * dk + 2 * r * dv)
        q, k, v, z = jnp.split(qkvz, [dk, 2 * dk, 2 * dk + r * dv], axis=-1)
        b, a = jnp.split(self.in_proj_ba(x).reshape(B, T, nk, 2 * r), 2, axis=-1)
        mixed = jnp.concatenate(
            [q.reshape(B, T, -1), k.reshape(B, T, -1), v.reshape(B, T, -1)], axis=-1
        )
        mixed = causal_conv1d(mixed, self.conv1d.weight[...][:, 0], segments)
        q, k, v = jnp.split(mixed, [nk * dk, 2 * nk * dk], axis=-1)
        q, k = (jnp.repeat(t.reshape(B, T, nk, dk), r, axis=2) for t in (q, k))
        beta = jax.nn.sigmoid(b.reshape(B, T, nv))
        dt = a.reshape(B, T, nv).astype(jnp.float32) + self.dt_bias[...].astype(jnp.float32)
        g = -jnp.exp(self.A_log[...].astype(jnp.float32)) * jax.nn.softplus(dt)
        v = v.reshape(B, T, nv, dv)
        if self.chunk_size is None:
            o = gated_delta_recurrent(q, k, v, g, beta, segments)
        else:
            o = gated_delta_chunked(q, k, v, g, beta, segments, self.chunk_size)
        o = self.norm(o, z.reshape(B, T, nv, dv))
        return self.out_proj(o.reshape(B, T, nv * dv))
