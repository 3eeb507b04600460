"""Model configuration read from a Hugging Face ``config.json`` (Qwen2, Qwen3, Llama, Gemma 2,
Gemma 3's text model, Qwen3-MoE, Qwen3-Next).

Only what the forward pass needs is kept; the raw dict is kept too so that an exported model
writes back the very ``config.json`` it was loaded from. RoPE parameters are read in both the
transformers-5 form (``rope_parameters: {rope_type, rope_theta, ...}``) and the older one
(top-level ``rope_theta`` plus ``rope_scaling: {type|rope_type, factor, ...}``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAMILIES = ("qwen2", "qwen3", "llama", "gemma2", "gemma3_text", "qwen3_moe", "qwen3_next")
GEMMA = ("gemma2", "gemma3_text")
LAYER_TYPES = ("full_attention", "sliding_attention")
NEXT_LAYER_TYPES = ("full_attention", "linear_attention")
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")


@dataclass(frozen=True)
class RopeConfig:
    """RoPE as transformers defines it (``modeling_rope_utils.ROPE_INIT_FUNCTIONS``).

    Attributes:
        rope_type: ``default``, ``linear`` (θ_i / factor), ``dynamic`` (NTK base growth past
            ``max_position_embeddings``), ``llama3`` (banded wavelength scaling) or ``yarn``.
        theta: the base θ of ``inv_freq_i = θ^(-2i/d)``.
        factor: the scaling factor (all scaled types).
        low_freq_factor, high_freq_factor: llama3 band edges.
        original_max_position_embeddings: the pre-training context (llama3, yarn).
        attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim, truncate: yarn.
    """

    rope_type: str = "default"
    theta: float = 10000.0
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    attention_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True


@dataclass(frozen=True)
class ModelConfig:
    """The decoder-only transformer shared by Qwen2, Qwen3, Llama and Gemma 2 / 3.

    Family differences are flags: Qwen2 has q/k/v biases (``qkv_bias``), Qwen3 RMS-normalises
    q and k per head (``qk_norm``), Llama may have ``attention_bias`` (q/k/v/o) and ``mlp_bias``.
    Gemma (``gemma``): norms scale by ``1 + w`` in float32 and wrap attention and the MLP
    before and after (``pre/post_feedforward_layernorm``), embeddings are multiplied by
    √hidden, the MLP is GeGLU (tanh GELU), attention is scaled by ``query_pre_attn_scalar^-½``,
    ``layer_types`` makes some layers attend within a ``sliding_window`` (with their own RoPE,
    ``rope_local``, in Gemma 3), and attention scores / final logits may be soft-capped
    (``c · tanh(x / c)``: Gemma 2). Gemma 3 has Qwen3's per-head q/k norm.
    Qwen3-MoE (``num_experts`` > 0): Qwen3's attention, and in its sparse layers
    (``is_moe``) a router choosing ``num_experts_per_tok`` of the experts per token.
    Qwen3-Next: ``layer_types`` mixes ``linear_attention`` (Gated DeltaNet: ``linear_*``
    sizes, a causal depthwise conv of ``linear_conv_kernel_dim``) with ``full_attention``
    layers whose queries carry an output gate (``attn_output_gate``) and whose RoPE turns only
    the first ``partial_rotary_factor`` of each head; every norm is the ``(1 + w)`` kind
    (``unit_offset_norm``), and its experts sit beside a gated ``shared_expert``.
    """

    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = field(default_factory=RopeConfig)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    gemma: bool = False
    query_pre_attn_scalar: float | None = None  # None: head_dim
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()  # () : every layer full_attention
    rope_local: RopeConfig | None = None  # sliding layers' RoPE where it differs (Gemma 3)
    num_experts: int = 0  # Qwen3-MoE: 0 for a dense model
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    shared_expert_intermediate_size: int = 0  # Qwen3-Next: 0 without a shared expert
    partial_rotary_factor: float = 1.0
    attn_output_gate: bool = False
    linear_num_key_heads: int = 0  # Qwen3-Next's Gated DeltaNet layers
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    hf_config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def is_moe(self, layer: int) -> bool:
        """Whether ``layer``'s MLP is the experts (as transformers' Qwen3-MoE decides)."""
        return (
            self.num_experts > 0
            and layer not in self.mlp_only_layers
            and (layer + 1) % self.decoder_sparse_step == 0
        )

    def is_sliding(self, layer: int) -> bool:
        return bool(self.layer_types) and self.layer_types[layer] == "sliding_attention"

    def is_linear(self, layer: int) -> bool:
        """Whether ``layer`` mixes tokens with Gated DeltaNet (Qwen3-Next)."""
        return bool(self.layer_types) and self.layer_types[layer] == "linear_attention"

    @property
    def unit_offset_norm(self) -> bool:
        """Norms scale by ``1 + w`` in float32 (Gemma, Qwen3-Next)."""
        return self.gemma or self.family == "qwen3_next"

    @property
    def rotary_dim(self) -> int:
        """How many of each head's dimensions RoPE turns (the rest pass through)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def num_kv_groups(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Build from a parsed ``config.json``; unsupported features fail naming the key."""
        family = d.get("model_type")
        if family not in FAMILIES:
            raise ValueError(
                f"config.json: model_type={family!r} is not supported by dockyard.jax; "
                f"supported: {', '.join(FAMILIES)}"
            )
        gemma = family in GEMMA
        act = d.get("hidden_activation") or d.get("hidden_act") if gemma else d.get("hidden_act")
        want = "gelu_pytorch_tanh" if gemma else "silu"
        if (act or want) != want:
            raise ValueError(f"config.json: hidden_act={act!r} is not supported (only {want!r})")
        if family in ("qwen2", "qwen3", "qwen3_moe", "qwen3_next") and d.get("use_sliding_window"):
            raise ValueError(
                "config.json: use_sliding_window=true is not supported by dockyard.jax; "
                "set it to false (Qwen2/Qwen3 checkpoints train with full attention)"
            )
        if family == "llama" and d.get("pretraining_tp", 1) not in (1, None):
            raise ValueError("config.json: pretraining_tp must be 1 for dockyard.jax")
        heads = int(d["num_attention_heads"])
        kv_heads = int(d.get("num_key_value_heads") or heads)
        if heads % kv_heads:
            raise ValueError(
                f"config.json: num_attention_heads={heads} is not a multiple of "
                f"num_key_value_heads={kv_heads}"
            )
        hidden = int(d["hidden_size"])
        head_dim = int(d.get("head_dim") or hidden // heads)
        attn_bias = bool(d.get("attention_bias", False))
        layers = int(d["num_hidden_layers"])
        gemma_keys = _gemma_from_hf(d, layers) if gemma else {}
        sparse = family == "qwen3_moe" or (family == "qwen3_next" and d.get("num_experts"))
        moe_keys = _moe_from_hf(d) if sparse else {}
        next_keys = _next_from_hf(d, layers) if family == "qwen3_next" else {}
        return cls(
            family=family,
            vocab_size=int(d["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(d["intermediate_size"]),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            rope=_rope_from_hf(d, gemma_keys.pop("rope_full", None), family == "qwen3_next"),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", gemma)),
            qkv_bias=True if family == "qwen2" else attn_bias,
            o_bias=False if family == "qwen2" else attn_bias,
            mlp_bias=bool(d.get("mlp_bias", False)) if family == "llama" else False,
            qk_norm=family in ("qwen3", "gemma3_text", "qwen3_moe", "qwen3_next"),
            **gemma_keys,
            **moe_keys,
            **next_keys,
            hf_config=dict(d),
        )

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ModelConfig:
        """Read ``<path>/config.json``."""
        p = Path(path) / "config.json"
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found: point the model path at a Hugging Face folder")
        return cls.from_hf_dict(json.loads(p.read_text()))


def _next_from_hf(d: dict[str, Any], layers: int) -> dict[str, Any]:
    """Qwen3-Next's fields of :class:`ModelConfig` (its MoE fields: :func:`_moe_from_hf`)."""
    types = tuple(d.get("layer_types") or ())
    if not types:  # as transformers' Qwen3NextConfig: every full_attention_interval-th is full
        interval = int(d.get("full_attention_interval") or 4)
        types = tuple(
            "linear_attention" if (i + 1) % interval else "full_attention" for i in range(layers)
        )
    if len(types) != layers or set(types) - set(NEXT_LAYER_TYPES):
        raise ValueError(
            f"config.json: layer_types must name {layers} layers, each one of "
            f"{', '.join(NEXT_LAYER_TYPES)}"
        )
    k_heads, v_heads = int(d["linear_num_key_heads"]), int(d["linear_num_value_heads"])
    if v_heads % k_heads:
        raise ValueError(
            f"config.json: linear_num_value_heads={v_heads} is not a multiple of "
            f"linear_num_key_heads={k_heads}"
        )
    params = d.get("rope_parameters") or {}
    partial = params.get("partial_rotary_factor", d.get("partial_rotary_factor", 0.25))
    return {
        "layer_types": types,
        "attn_output_gate": True,
        "partial_rotary_factor": float(partial),
        "shared_expert_intermediate_size": int(d.get("shared_expert_intermediate_size") or 0),
        "linear_num_key_heads": k_heads,
        "linear_num_value_heads": v_heads,
        "linear_key_head_dim": int(d["linear_key_head_dim"]),
        "linear_value_head_dim": int(d["linear_value_head_dim"]),
        "linear_conv_kernel_dim": int(d.get("linear_conv_kernel_dim") or 4),
    }


def _moe_from_hf(d: dict[str, Any]) -> dict[str, Any]:
    """Qwen3-MoE's (and Qwen3-Next's) fields of :class:`ModelConfig`."""
    experts = int(d.get("num_experts") or d.get("num_local_experts") or 0)  # (transformers 5)
    k = int(d.get("num_experts_per_tok") or 0)
    if experts < 1 or not 1 <= k <= experts:
        raise ValueError(
            f"config.json: num_experts={experts}, num_experts_per_tok={k}: need "
            "1 <= num_experts_per_tok <= num_experts"
        )
    return {
        "num_experts": experts,
        "num_experts_per_tok": k,
        "moe_intermediate_size": int(d["moe_intermediate_size"]),
        "norm_topk_prob": bool(d.get("norm_topk_prob", False)),
        "decoder_sparse_step": int(d.get("decoder_sparse_step") or 1),
        "mlp_only_layers": tuple(int(i) for i in d.get("mlp_only_layers") or ()),
    }


def _gemma_from_hf(d: dict[str, Any], layers: int) -> dict[str, Any]:
    """Gemma's fields of :class:`ModelConfig` (+ ``rope_full``: the full layers' RoPE
    parameters where Gemma 3 gives one set per layer type)."""
    types = tuple(d.get("layer_types") or ())
    if not types:  # older configs: Gemma 2 alternates from a sliding first layer
        pattern = int(d.get("sliding_window_pattern") or 2)
        types = tuple(
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
            for i in range(layers)
        )
    if len(types) != layers or set(types) - set(LAYER_TYPES):
        raise ValueError(
            f"config.json: layer_types must name {layers} layers, each one of "
            f"{', '.join(LAYER_TYPES)}"
        )
    window = d.get("sliding_window")
    if "sliding_attention" in types and not window:
        raise ValueError("config.json: sliding layers need sliding_window")
    out: dict[str, Any] = {
        "gemma": True,
        "query_pre_attn_scalar": float(d.get("query_pre_attn_scalar") or d["head_dim"]),
        "attn_logit_softcapping": d.get("attn_logit_softcapping"),
        "final_logit_softcapping": d.get("final_logit_softcapping"),
        "sliding_window": int(window) if window else None,
        "layer_types": types,
    }
    params = d.get("rope_parameters")
    if isinstance(params, dict) and any(isinstance(v, dict) for v in params.values()):
        if set(params) - set(LAYER_TYPES):
            raise ValueError(
                f"config.json: rope_parameters per layer type names {sorted(params)}; "
                f"known: {', '.join(LAYER_TYPES)}"
            )
        full, local = params.get("full_attention"), params.get("sliding_attention")
        out["rope_full"] = full or {"rope_type": "default", "rope_theta": 10000.0}
        if local is not None:
            out["rope_local"] = _rope_from_hf({**d, "rope_parameters": local})
    elif d.get("rope_local_base_freq") is not None:  # transformers 4's Gemma 3
        out["rope_local"] = RopeConfig(theta=float(d["rope_local_base_freq"]))
    return out


def _rope_from_hf(
    d: dict[str, Any], params_override: dict[str, Any] | None = None, partial_ok: bool = False
) -> RopeConfig:
    if params_override is not None:
        d = {**d, "rope_parameters": params_override}
    params = dict(d.get("rope_parameters") or d.get("rope_scaling") or {})
    if params and any(isinstance(v, dict) for v in params.values()):
        raise ValueError("config.json: per-layer-type rope_parameters are not supported")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"config.json: rope_type={rope_type!r} is not supported; supported: "
            f"{', '.join(ROPE_TYPES)}"
        )
    theta = params.get("rope_theta", d.get("rope_theta", 10000.0))
    orig = params.get("original_max_position_embeddings")
    if rope_type in ("llama3", "yarn") and orig is None:
        orig = d.get("original_max_position_embeddings", d.get("max_position_embeddings"))
    if rope_type != "default" and params.get("factor") is None and rope_type != "yarn":
        raise ValueError(
            f"config.json: rope_parameters.factor is required for rope_type={rope_type!r}"
        )
    partial = float(params.get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0)))
    if partial != 1.0 and not partial_ok:
        raise ValueError("config.json: partial_rotary_factor != 1 is supported for qwen3_next only")
    factor = params.get("factor")
    if factor is None:  # yarn without factor: max_position_embeddings / original
        factor = d.get("max_position_embeddings", 1) / orig if orig else 1.0
    return RopeConfig(
        rope_type=rope_type,
        theta=float(theta),
        factor=float(factor),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(orig) if orig is not None else None,
        attention_factor=params.get("attention_factor"),
        beta_fast=params.get("beta_fast"),
        beta_slow=params.get("beta_slow"),
        mscale=params.get("mscale"),
        mscale_all_dim=params.get("mscale_all_dim"),
        truncate=bool(params.get("truncate", True)),
    )
