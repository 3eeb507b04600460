"""NNX Qwen2 / Qwen3 / Llama / Gemma 2 / Gemma 3 / Qwen3-MoE / Qwen3-Next logits equal
transformers' on random tiny models (fp32)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from dockyard.jax.models import apply, load_hf_model

torch = pytest.importorskip("torch")

CASES = {
    "qwen2-untied": ("qwen2", {}),
    "qwen2-tied": ("qwen2", {"tie_word_embeddings": True}),
    "qwen3-qknorm": ("qwen3", {}),
    "qwen3-tied": ("qwen3", {"tie_word_embeddings": True}),
    "llama-default": ("llama", {}),
    "llama-bias": ("llama", {"attention_bias": True, "mlp_bias": True}),
    "llama-llama3": (
        "llama",
        {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8}},
    ),
    "llama-linear": ("llama", {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0,
                                                   "factor": 2.0}}),
    # max_position_embeddings < T: the dynamic NTK base actually grows in this forward.
    "llama-dynamic": ("llama", {"max_position_embeddings": 12,
                                "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0,
                                                    "factor": 2.0}}),
    "qwen2-yarn": ("qwen2", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0,
                                                 "factor": 4.0,
                                                 "original_max_position_embeddings": 16}}),
    # Gemma 2's soft-caps low enough to bend these tiny models' scores and logits
    "gemma2": ("gemma2", {"attn_logit_softcapping": 0.5, "final_logit_softcapping": 1.5}),
    "gemma2-untied": ("gemma2", {"tie_word_embeddings": False}),
    # Gemma 3: a RoPE per layer type, the full layers' scaled (as its 4B+ checkpoints)
    "gemma3": ("gemma3_text", {}),
    "gemma3-linear": ("gemma3_text", {"rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0}}}),
    "qwen3_moe": ("qwen3_moe", {}),
    "qwen3_moe-norm-topk": ("qwen3_moe", {"norm_topk_prob": True, "mlp_only_layers": []}),
    # Gated DeltaNet + gated attention, experts with the shared expert (conftest's config)
    "qwen3_next": ("qwen3_next", {}),
    # dense, one value head per key head, the published schedule (every 4th layer full), all
    # of each head rotated
    "qwen3_next-dense": ("qwen3_next", {"num_experts": 0, "layer_types": None,
                                        "linear_num_value_heads": 2, "partial_rotary_factor": 1.0,
                                        "linear_conv_kernel_dim": 2}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_transformers(case: str, hf_model_factory, make_batch) -> None:
    family, overrides = CASES[case]
    path, hf = hf_model_factory(family, **overrides)
    ids, mask = make_batch(96, [20, 13, 1], T=20, seed=1)
    with torch.no_grad():
        want = hf(
            input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask).long()
        ).logits.numpy()
    cfg, graphdef, params = load_hf_model(path)
    assert cfg.family == family
    got = np.asarray(apply(graphdef, params, jnp.asarray(ids), jnp.asarray(mask)))
    assert got.shape == want.shape
    assert np.abs(want[mask]).max() > 0.1  # a real signal, not all zeros
    if family != "qwen3_next":
        np.testing.assert_allclose(got[mask], want[mask], rtol=1e-5, atol=2e-5)
        return
    # Qwen3-Next's float32 forward (a triangular solve per chunk, 4 mixers deep) rounds more:
    # both float32 results are held to the float64 forward, ours to within 2x transformers' own
    # float32 error (its error here: ~2e-5).
    for module in hf.modules():
        if hasattr(module, "config"):  # torch's grouped_mm has no float64 kernel
            module.config._experts_implementation = "eager"
    with torch.no_grad():
        exact = hf.double()(
            input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask).long()
        ).logits.numpy()
    theirs = np.abs(want[mask] - exact[mask]).max()
    ours = np.abs(got[mask] - exact[mask]).max()
    assert ours <= 2 * theirs + 1e-6, (ours, theirs)
    assert theirs < 1e-4


def test_rope_scaling_changes_logits(hf_model_factory, make_batch) -> None:
    """The scaled-RoPE cases are not vacuous: the same weights give other logits by default."""
    path, _ = hf_model_factory(
        "llama", rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0}
    )
    cfg, graphdef, params = load_hf_model(path)
    ids, mask = make_batch(96, [20], T=20)
    scaled = apply(graphdef, params, jnp.asarray(ids), jnp.asarray(mask))
    import dataclasses

    from dockyard.jax.models import RopeConfig, abstract_model

    plain = dataclasses.replace(cfg, rope=RopeConfig(theta=1e4))
    graphdef2, _ = abstract_model(plain)
    unscaled = apply(graphdef2, params, jnp.asarray(ids), jnp.asarray(mask))
    assert float(jnp.abs(scaled - unscaled).max()) > 1e-3
