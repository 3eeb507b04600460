"""Flax NNX decoder-only transformer covering Qwen2, Qwen3 and Llama.

Attribute names mirror the Hugging Face modules (``model.layers[i].self_attn.q_proj`` …) so the
name map in :mod:`dockyard.jax.models.name_map` is a plain table. Linear kernels are stored
``[in, out]`` (HF stores ``weight [out, in]``); embeddings ``[vocab, hidden]``.

One layer, with h the residual stream:

    a = Attn(RMSNorm(h));  h = h + a;  h = h + W_down(silu(W_gate x) ⊙ W_up x),  x = RMSNorm(h)

``RMSNorm(x) = w ⊙ x / sqrt(mean(x²) + ε)`` (computed in float32). Attention is causal,
grouped-query (each of the ``num_key_value_heads`` K/V heads serves ``num_kv_groups`` query
heads), scaled by ``head_dim^-1/2``, with RoPE on q and k (after the per-head q/k RMSNorm in
Qwen3) and optional q/k/v biases (Qwen2; Llama's ``attention_bias``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from dockyard.jax.models.config import ModelConfig
from dockyard.jax.models.rope import apply_rope, rope_cos_sin

_INIT = nnx.initializers.normal(0.02)


class Linear(nnx.Module):
    """``y = x @ kernel + bias``; ``kernel: [in, out]``."""

    def __init__(self, d_in: int, d_out: int, *, bias: bool, rngs: nnx.Rngs):
        self.kernel = nnx.Param(_INIT(rngs.params(), (d_in, d_out), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((d_out,), jnp.float32)) if bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        y = x @ self.kernel[...].astype(x.dtype)
        if self.bias is not None:
            y = y + self.bias[...].astype(x.dtype)
        return y


class Embed(nnx.Module):
    """Token embedding ``[vocab, hidden]``."""

    def __init__(self, vocab: int, dim: int, *, rngs: nnx.Rngs):
        self.embedding = nnx.Param(_INIT(rngs.params(), (vocab, dim), jnp.float32))

    def __call__(self, ids: jax.Array, dtype: jnp.dtype) -> jax.Array:
        return jnp.take(self.embedding[...].astype(dtype), ids, axis=0)


class RMSNorm(nnx.Module):
    """``w ⊙ x / sqrt(mean(x²) + ε)`` over the last axis, normalised in float32."""

    def __init__(self, dim: int, eps: float):
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        var = jnp.mean(x32 * x32, axis=-1, keepdims=True)
        normed = (x32 * jax.lax.rsqrt(var + self.eps)).astype(x.dtype)
        return self.scale[...].astype(x.dtype) * normed


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        h, hd = cfg.hidden_size, cfg.head_dim
        self.cfg = cfg
        self.q_proj = Linear(h, cfg.num_attention_heads * hd, bias=cfg.qkv_bias, rngs=rngs)
        self.k_proj = Linear(h, cfg.num_key_value_heads * hd, bias=cfg.qkv_bias, rngs=rngs)
        self.v_proj = Linear(h, cfg.num_key_value_heads * hd, bias=cfg.qkv_bias, rngs=rngs)
        self.o_proj = Linear(cfg.num_attention_heads * hd, h, bias=cfg.o_bias, rngs=rngs)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array) -> jax.Array:
        """``x: [B, T, H]``, ``mask: [B, 1, T, T]`` bool (True = may attend) → ``[B, T, H]``."""
        cfg = self.cfg
        B, T, _ = x.shape
        hd, nq, nkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        q = self.q_proj(x).reshape(B, T, nq, hd)
        k = self.k_proj(x).reshape(B, T, nkv, hd)
        v = self.v_proj(x).reshape(B, T, nkv, hd)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # GQA: query head n uses K/V head n // groups.
        q = q.reshape(B, T, nkv, cfg.num_kv_groups, hd)
        scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k).astype(jnp.float32) * (hd**-0.5)
        scores = jnp.where(mask[:, :, None], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bkgqs,bskd->bqkgd", probs, v).reshape(B, T, nq * hd)
        return self.o_proj(out)


class MLP(nnx.Module):
    """SwiGLU: ``W_down(silu(W_gate x) ⊙ W_up x)``."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        h, i, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = Linear(h, i, bias=b, rngs=rngs)
        self.up_proj = Linear(h, i, bias=b, rngs=rngs)
        self.down_proj = Linear(i, h, bias=b, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg, rngs=rngs)

    def __call__(self, h: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Backbone(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.embed_tokens = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs)
        self.layers = nnx.List([DecoderLayer(cfg, rngs=rngs) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class CausalLM(nnx.Module):
    """``CausalLM(cfg)(input_ids, attention_mask) -> logits [B, T, V] float32``."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, dtype: jnp.dtype = jnp.float32):
        self.cfg = cfg
        self.dtype = dtype
        self.model = Backbone(cfg, rngs=rngs)
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else Linear(cfg.hidden_size, cfg.vocab_size, bias=False, rngs=rngs)
        )

    def __call__(
        self,
        input_ids: jax.Array,
        attention_mask: jax.Array | None = None,
        position_ids: jax.Array | None = None,
    ) -> jax.Array:
        """``input_ids: [B, T]`` int, ``attention_mask: [B, T]`` bool (False = padding),
        ``position_ids: [B, T]`` (default ``0..T-1``) → ``logits: [B, T, V] float32``.

        Query t attends to key s iff ``s <= t`` and ``attention_mask[b, s]``; with
        ``position_ids`` given, additionally only within the same segment (positions restart at
        0 for each packed sequence: a key is visible iff ``s > t - 1 - position_ids[b, t]``).
        """
        B, T = input_ids.shape
        if attention_mask is None:
            attention_mask = jnp.ones((B, T), bool)
        causal = jnp.tril(jnp.ones((T, T), bool))[None]
        mask = causal & attention_mask[:, None, :].astype(bool)
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        else:
            start = jnp.arange(T)[None, :] - position_ids  # index where each token's segment begins
            mask = mask & (jnp.arange(T)[None, None, :] >= start[:, :, None])
        mask = mask[:, None]  # [B, 1, T, T]
        cos, sin = rope_cos_sin(self.cfg, position_ids, attention_mask.astype(bool))
        h = self.model.embed_tokens(input_ids, self.dtype)
        for layer in self.model.layers:
            h = layer(h, cos, sin, mask)
        h = self.model.norm(h)
        if self.lm_head is None:
            logits = h @ self.model.embed_tokens.embedding[...].astype(h.dtype).T
        else:
            logits = self.lm_head(h)
        return logits.astype(jnp.float32)
