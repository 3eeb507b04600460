"""Flax NNX decoder-only transformer covering Qwen2, Qwen3, Llama, Gemma 2 / 3 (text),
Qwen3-MoE (its sparse layers: :class:`SparseMoE`) and Qwen3-Next (its Gated DeltaNet layers:
:mod:`dockyard.jax.models.gated_delta`).

Attribute names mirror the Hugging Face modules (``model.layers[i].self_attn.q_proj`` …) so the
name map in :mod:`dockyard.jax.models.name_map` is a plain table. Linear kernels are stored
``[in, out]`` (HF stores ``weight [out, in]``); embeddings ``[vocab, hidden]``.

One layer, with h the residual stream:

    a = Attn(RMSNorm(h));  h = h + a;  h = h + W_down(silu(W_gate x) ⊙ W_up x),  x = RMSNorm(h)

``RMSNorm(x) = w ⊙ x / sqrt(mean(x²) + ε)`` (computed in float32). Attention is causal,
grouped-query (each of the ``num_key_value_heads`` K/V heads serves ``num_kv_groups`` query
heads), scaled by ``head_dim^-1/2``, with RoPE on q and k (after the per-head q/k RMSNorm in
Qwen3) and optional q/k/v biases (Qwen2; Llama's ``attention_bias``).

Gemma's layer (``ModelConfig.gemma``) norms before and after each block,

    h = h + N₂(Attn(N₁(h)));  h = h + N₄(W_down(gelu_tanh(W_gate x) ⊙ W_up x)),  x = N₃(h)

with ``N(x) = (1 + w) ⊙ x / sqrt(mean(x²) + ε)`` in float32, the embedding times √hidden,
scores scaled by ``query_pre_attn_scalar^-½`` and soft-capped (``c·tanh(s/c)``) where configured,
a sliding layer's key s visible to query t only if ``t − s < sliding_window``, and the final
logits soft-capped where configured.

Qwen3-Next's layer has Qwen3's pre-norm shape with ``1 + w`` norms; its token mixer is either
Gated DeltaNet (``linear_attn``) or attention whose queries carry a gate per head
(``o = (softmax(q kᵀ) v) ⊙ σ(gate)``) and whose RoPE turns a part of each head.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from dockyard.jax.models.config import ModelConfig
from dockyard.jax.models.gated_delta import GatedDeltaNet
from dockyard.jax.models.layers import INIT, Embed, Linear, RMSNorm
from dockyard.jax.models.moe import (
    RouterOptions,
    Routing,
    experts_dense,
    experts_grouped,
    experts_parallel,
    route,
    router_stats,
)
from dockyard.jax.models.rope import apply_rope, rope_cos_sin


def _softcap(x: jax.Array, cap: float | None) -> jax.Array:
    return x if cap is None else jnp.tanh(x / cap) * cap


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        h, hd = cfg.hidden_size, cfg.head_dim
        self.cfg = cfg
        q_out = cfg.num_attention_heads * hd * (2 if cfg.attn_output_gate else 1)
        self.q_proj = Linear(h, q_out, bias=cfg.qkv_bias, rngs=rngs)
        self.k_proj = Linear(h, cfg.num_key_value_heads * hd, bias=cfg.qkv_bias, rngs=rngs)
        self.v_proj = Linear(h, cfg.num_key_value_heads * hd, bias=cfg.qkv_bias, rngs=rngs)
        self.o_proj = Linear(cfg.num_attention_heads * hd, h, bias=cfg.o_bias, rngs=rngs)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.rms_norm_eps, cfg.unit_offset_norm)
            self.k_norm = RMSNorm(hd, cfg.rms_norm_eps, cfg.unit_offset_norm)
        else:
            self.q_norm = self.k_norm = None

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array) -> jax.Array:
        """``x: [B, T, H]``, ``mask: [B, 1, T, T]`` bool (True = may attend) → ``[B, T, H]``."""
        cfg = self.cfg
        B, T, _ = x.shape
        hd, nq, nkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        q, gate = self.q_proj(x), None
        if cfg.attn_output_gate:  # per head [q | gate] (Qwen3-Next)
            q, gate = jnp.split(q.reshape(B, T, nq, 2 * hd), 2, axis=-1)
        q = q.reshape(B, T, nq, hd)
        k = self.k_proj(x).reshape(B, T, nkv, hd)
        v = self.v_proj(x).reshape(B, T, nkv, hd)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # GQA: query head n uses K/V head n // groups.
        q = q.reshape(B, T, nkv, cfg.num_kv_groups, hd)
        scale = (cfg.query_pre_attn_scalar or hd) ** -0.5
        scores = jnp.einsum("bqkgd,bskd->bkgqs", q, k).astype(jnp.float32) * scale
        scores = _softcap(scores, cfg.attn_logit_softcapping)
        scores = jnp.where(mask[:, :, None], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bkgqs,bskd->bqkgd", probs, v).reshape(B, T, nq * hd)
        if gate is not None:
            out = out * jax.nn.sigmoid(gate.reshape(B, T, nq * hd))
        return self.o_proj(out)


class MLP(nnx.Module):
    """SwiGLU: ``W_down(silu(W_gate x) ⊙ W_up x)``; Gemma's GeGLU: tanh-approximated GELU."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, intermediate: int | None = None):
        h, i, b = cfg.hidden_size, intermediate or cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = Linear(h, i, bias=b, rngs=rngs)
        self.up_proj = Linear(h, i, bias=b, rngs=rngs)
        self.down_proj = Linear(i, h, bias=b, rngs=rngs)
        self.gelu = cfg.gemma

    def __call__(self, x: jax.Array) -> jax.Array:
        g = self.gate_proj(x)
        act = jax.nn.gelu(g, approximate=True) if self.gelu else jax.nn.silu(g)
        return self.down_proj(act * self.up_proj(x))


class Experts(nnx.Module):
    """Qwen3-MoE's experts, stacked: ``gate_proj, up_proj: [E, H, I]``, ``down_proj: [E, I, H]``
    (expert e's SwiGLU is ``W_down[e](silu(x W_gate[e]) ⊙ x W_up[e])``)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.gate_proj = nnx.Param(INIT(rngs.params(), (e, h, i), jnp.float32))
        self.up_proj = nnx.Param(INIT(rngs.params(), (e, h, i), jnp.float32))
        self.down_proj = nnx.Param(INIT(rngs.params(), (e, i, h), jnp.float32))


class SparseMoE(nnx.Module):
    """Qwen3-MoE's sparse MLP, as transformers computes it: router logits ``x W_r`` (``gate``),
    probabilities in float32, the top ``k`` experts per token with their probabilities as
    gates (renormalised to sum 1 with ``norm_topk_prob``), ``y = Σ_k g_k · expert_k(x)``.
    Routing and experts: :mod:`dockyard.jax.models.moe`.

    ``options.grouped`` (the default): the N·k (token, expert) assignments sorted by expert and
    cut into tiles of one expert's rows, one GEMM per tile
    (:func:`~dockyard.jax.models.moe.experts_grouped`); otherwise every expert on every token,
    gated by a dense [N, E] matrix that is zero off the top k (``E/k`` times the FLOPs). Equal,
    tested. ``options.mesh``: the experts split over its ``fsdp`` axis (expert
    parallelism).

    Qwen3-Next adds a shared expert every token goes through, behind a sigmoid gate:
    ``y += σ(x w_s) · shared_expert(x)``.

    What the worker sets on a merged model before a call (:func:`~dockyard.jax.models.hf.apply`):
    ``options`` (:class:`~dockyard.jax.models.moe.RouterOptions`), ``bias [E]`` (the
    aux-loss-free bias; None: 0) and ``record_load``: each call then sows
    ``router_stats [E + 2]`` (:func:`~dockyard.jax.models.moe.router_stats`: loads, drops, aux
    loss of the real tokens, ``valid``) as an ``nnx.Intermediate``, which
    :func:`~dockyard.jax.models.hf.apply_with_router_load` captures."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.gate = Linear(cfg.hidden_size, cfg.num_experts, bias=False, rngs=rngs)
        self.experts = Experts(cfg, rngs=rngs)
        self.options = RouterOptions()
        self.bias: jax.Array | None = None
        self.record_load = False
        shared = cfg.shared_expert_intermediate_size
        self.shared_expert = MLP(cfg, rngs=rngs, intermediate=shared) if shared else None
        self.shared_expert_gate = (
            Linear(cfg.hidden_size, 1, bias=False, rngs=rngs) if shared else None
        )

    def route(self, x: jax.Array, valid: jax.Array | None = None) -> Routing:
        """The routing of the tokens ``x: [N, H]`` (``valid [N]``: the real ones)."""
        cfg = self.cfg
        return route(self.gate(x), cfg.num_experts_per_tok, cfg.norm_topk_prob, self.bias,
                     self.options.capacity_factor, valid)  # fmt: skip

    def __call__(self, x: jax.Array, valid: jax.Array | None = None) -> jax.Array:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        real = None if valid is None else valid.reshape(-1)
        r = self.route(x, real)
        if self.record_load:
            self.sow(nnx.Intermediate, "router_stats", router_stats(r, self.cfg.num_experts, real))
        w = tuple(getattr(self.experts, n)[...].astype(x.dtype)
                  for n in ("gate_proj", "up_proj", "down_proj"))  # fmt: skip
        opts = self.options
        if opts.mesh is not None and opts.mesh.shape[opts.axis] > 1:
            y = experts_parallel(x, r.experts, r.gates, w, opts)
        else:
            run = experts_grouped if opts.grouped else experts_dense
            y = run(x, r.experts, r.gates, w, self.cfg.num_experts)
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            y = y + jax.nn.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return y.reshape(shape)


class DecoderLayer(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, layer: int = 0):
        h, eps, gemma = cfg.hidden_size, cfg.rms_norm_eps, cfg.gemma
        self.input_layernorm = RMSNorm(h, eps, cfg.unit_offset_norm)
        linear = cfg.is_linear(layer)
        self.self_attn = None if linear else Attention(cfg, rngs=rngs)
        self.linear_attn = GatedDeltaNet(cfg, rngs=rngs) if linear else None
        self.post_attention_layernorm = RMSNorm(h, eps, cfg.unit_offset_norm)
        self.mlp = SparseMoE(cfg, rngs=rngs) if cfg.is_moe(layer) else MLP(cfg, rngs=rngs)
        if gemma:
            self.pre_feedforward_layernorm = RMSNorm(h, eps, True)
            self.post_feedforward_layernorm = RMSNorm(h, eps, True)
        else:
            self.pre_feedforward_layernorm = self.post_feedforward_layernorm = None

    def mix(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array, ctx) -> jax.Array:
        """The token mixer: attention, or Gated DeltaNet with ``ctx = (valid, segments)``."""
        if self.linear_attn is not None:
            return self.linear_attn(x, *ctx)
        assert self.self_attn is not None
        return self.self_attn(x, cos, sin, mask)

    def __call__(
        self, h: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array, ctx=(None, None)
    ):
        if self.pre_feedforward_layernorm is None or self.post_feedforward_layernorm is None:
            h = h + self.mix(self.input_layernorm(h), cos, sin, mask, ctx)
            x = self.post_attention_layernorm(h)
            return h + (self.mlp(x, ctx[0]) if isinstance(self.mlp, SparseMoE) else self.mlp(x))
        a = self.mix(self.input_layernorm(h), cos, sin, mask, ctx)
        h = h + self.post_attention_layernorm(a)
        m = self.mlp(self.pre_feedforward_layernorm(h))
        return h + self.post_feedforward_layernorm(m)


class Backbone(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.embed_tokens = Embed(cfg.vocab_size, cfg.hidden_size, rngs=rngs)
        self.layers = nnx.List(
            [DecoderLayer(cfg, rngs=rngs, layer=i) for i in range(cfg.num_hidden_layers)]
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, cfg.unit_offset_norm)


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
        0 for each packed sequence: a key is visible iff ``s > t - 1 - position_ids[b, t]``;
        Gated DeltaNet layers restart their state and convolution where a position is 0).
        """
        B, T = input_ids.shape
        if attention_mask is None:
            attention_mask = jnp.ones((B, T), bool)
        causal = jnp.tril(jnp.ones((T, T), bool))[None]
        mask = causal & attention_mask[:, None, :].astype(bool)
        segments = None
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        else:
            segments = jnp.cumsum(position_ids == 0, axis=1)
            start = jnp.arange(T)[None, :] - position_ids  # index where each token's segment begins
            mask = mask & (jnp.arange(T)[None, None, :] >= start[:, :, None])
        mask = mask[:, None]  # [B, 1, T, T]
        cfg, valid = self.cfg, attention_mask.astype(bool)
        rope = rope_cos_sin(cfg, position_ids, valid)
        local, window_mask = rope, mask
        if cfg.sliding_window is not None:  # key s visible to query t only if t - s < window
            t = jnp.arange(T)
            window_mask = mask & (
                t[None, None, :, None] - t[None, None, None, :] < cfg.sliding_window
            )
        if cfg.rope_local is not None:
            local = rope_cos_sin(dataclasses.replace(cfg, rope=cfg.rope_local), position_ids, valid)
        h = self.model.embed_tokens(input_ids, self.dtype)
        if cfg.gemma:  # the normaliser in the activations' dtype, as transformers rounds it
            h = h * jnp.asarray(cfg.hidden_size**0.5, h.dtype)
        ctx = (valid, segments)
        for i, layer in enumerate(self.model.layers):
            sliding = cfg.is_sliding(i)
            h = layer(h, *(local if sliding else rope), window_mask if sliding else mask, ctx)
        h = self.model.norm(h)
        if self.lm_head is None:
            logits = h @ self.model.embed_tokens.embedding[...].astype(h.dtype).T
        else:
            logits = self.lm_head(h)
        return _softcap(logits.astype(jnp.float32), cfg.final_logit_softcapping)
