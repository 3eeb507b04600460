"""Rotary position embeddings, numerically as transformers computes them.

For head dimension d and base θ the default inverse frequencies are
``inv_freq_i = 1 / θ^(2i/d)``, i = 0 … d/2−1, and a position p rotates the pair
(x_i, x_{i+d/2}) by the angle ``p · inv_freq_i`` (the "rotate half" layout of HF checkpoints):

    q' = q · cos(p·f) + rotate_half(q) · sin(p·f),   rotate_half([a, b]) = [−b, a]

Scaled variants (transformers ``modeling_rope_utils``):

* ``linear``: ``inv_freq / factor`` (position interpolation, kaiokendev).
* ``dynamic`` (NTK): with L = max(position)+1 of the batch and L₀ = max_position_embeddings,
  ``θ' = θ · (factor·max(L, L₀)/L₀ − (factor − 1))^(d/(d−2))``. HF keeps a cache of the grown
  frequencies between calls; here they are computed from the current batch alone, which equals
  HF's result for any single forward pass.
* ``llama3``: wavelengths λ_i = 2π/inv_freq_i longer than L₀/low_freq_factor are divided by
  ``factor``, shorter than L₀/high_freq_factor kept, and the band between interpolated with
  s = (L₀/λ − low)/(high − low): ``(1−s)·f/factor + s·f`` (L₀ = original_max_position_embeddings).
* ``yarn`` (Peng et al. 2023, arXiv:2309.00071): per-dimension blend of interpolated and
  extrapolated frequencies by a linear ramp between the β_fast/β_slow correction dimensions;
  cos and sin are multiplied by the attention factor 0.1·ln(factor)+1 (or as configured).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from dockyard.jax.models.config import ModelConfig


def _default_inv_freq(theta: float, dim: int) -> np.ndarray:
    exps = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    return (np.float32(1.0) / (np.float32(theta) ** exps)).astype(np.float32)


def _llama3(cfg: ModelConfig, inv_freq: np.ndarray) -> np.ndarray:
    r = cfg.rope
    old = float(r.original_max_position_embeddings or cfg.max_position_embeddings)
    low_wavelen = old / r.low_freq_factor
    high_wavelen = old / r.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / r.factor, inv_freq)
    smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor)
    smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _yarn(cfg: ModelConfig, dim: int) -> tuple[np.ndarray, float]:
    r = cfg.rope
    base, factor = r.theta, r.factor
    orig = float(r.original_max_position_embeddings or cfg.max_position_embeddings)

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = r.attention_factor
    if attention_factor is None:
        if r.mscale and r.mscale_all_dim:
            attention_factor = get_mscale(factor, r.mscale) / get_mscale(factor, r.mscale_all_dim)
        else:
            attention_factor = get_mscale(factor)
    beta_fast = r.beta_fast or 32
    beta_slow = r.beta_slow or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if r.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))
    extrap = np.float32(1.0) / pos_freqs
    interp = np.float32(1.0) / (np.float32(factor) * pos_freqs)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1)
    extrap_factor = (1 - ramp).astype(np.float32)
    inv_freq = interp * (1 - extrap_factor) + extrap * extrap_factor
    return inv_freq.astype(np.float32), float(attention_factor)


def rope_frequencies(
    cfg: ModelConfig, positions: jnp.ndarray, valid: jnp.ndarray | None = None
) -> tuple[jnp.ndarray, float]:
    """``(inv_freq [d/2] float32, attention_scaling)`` for the batch's ``positions [B, T]``.

    ``valid [B, T]`` (bool): only these positions count towards the dynamic-NTK length L, so
    right-padding a batch does not change its frequencies (HF counts padding too; the two agree
    whenever the longest sequence fills the batch, as in the trainers' trimmed micro-batches).
    """
    r, dim = cfg.rope, cfg.rotary_dim
    if r.rope_type == "default":
        return jnp.asarray(_default_inv_freq(r.theta, dim)), 1.0
    if r.rope_type == "linear":
        return jnp.asarray(_default_inv_freq(r.theta, dim) / np.float32(r.factor)), 1.0
    if r.rope_type == "llama3":
        return jnp.asarray(_llama3(cfg, _default_inv_freq(r.theta, dim))), 1.0
    if r.rope_type == "yarn":
        inv, scale = _yarn(cfg, dim)
        return jnp.asarray(inv), scale
    if r.rope_type == "dynamic":
        max_pos = float(cfg.max_position_embeddings)
        pos = positions if valid is None else jnp.where(valid, positions, 0)
        seq_len = jnp.maximum(jnp.max(pos).astype(jnp.float32) + 1.0, max_pos)
        base = r.theta * ((r.factor * seq_len / max_pos) - (r.factor - 1)) ** (dim / (dim - 2))
        exps = jnp.arange(0, dim, 2, dtype=jnp.float32) / dim
        return (1.0 / (base**exps)).astype(jnp.float32), 1.0
    raise ValueError(f"rope_type={r.rope_type!r} is not supported")


def rope_cos_sin(
    cfg: ModelConfig, positions: jnp.ndarray, valid: jnp.ndarray | None = None
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """``cos, sin: [B, T, rotary_dim] float32`` for ``positions: [B, T]`` int (``rotary_dim``
    is ``head_dim`` but in Qwen3-Next, whose RoPE turns a part of each head)."""
    inv_freq, scaling = rope_frequencies(cfg, positions, valid)
    freqs = positions[..., None].astype(jnp.float32) * inv_freq
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb) * scaling, jnp.sin(emb) * scaling


def rotate_half(x: jnp.ndarray) -> jnp.ndarray:
    half = x.shape[-1] // 2
    return jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray) -> jnp.ndarray:
    """Rotate ``x: [B, T, heads, head_dim]`` by ``cos, sin: [B, T, d]``: its first ``d``
    dimensions (all of them but with a partial rotary factor); the rest pass through."""
    cos = cos[:, :, None, :].astype(x.dtype)
    sin = sin[:, :, None, :].astype(x.dtype)
    d = cos.shape[-1]
    if d == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    turned = x[..., :d] * cos + rotate_half(x[..., :d]) * sin
    return jnp.concatenate([turned, x[..., d:]], axis=-1)
