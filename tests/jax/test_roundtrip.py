"""HF → NNX → HF is the identity, through the one name map, for every family."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from dockyard.jax.models import ModelConfig, iter_hf_weights, load_hf_model, name_map, save_hf

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("family", "overrides"),
    [("qwen2", {}), ("qwen3", {"tie_word_embeddings": True}),
     ("llama", {"attention_bias": True, "mlp_bias": True}),
     ("gemma2", {"tie_word_embeddings": False}), ("gemma3_text", {}), ("qwen3_moe", {}),
     ("qwen3_next", {})],
)  # fmt: skip
def test_hf_nnx_hf_identical(family, overrides, hf_model_factory, tmp_path) -> None:
    path, _ = hf_model_factory(family, **overrides)
    original = load_file(str(path / "model.safetensors"))
    cfg, _, params = load_hf_model(path)
    exported = dict(iter_hf_weights(cfg, params))
    assert list(exported) == [e.hf_name for e in name_map(cfg)]
    assert set(exported) == set(original)
    for name, array in original.items():
        assert exported[name].dtype == array.dtype, name
        assert exported[name].shape == array.shape, name
        assert exported[name].tobytes() == array.tobytes(), name


@pytest.mark.parametrize("family", ["qwen2", "qwen3_next"])
def test_save_hf_loads_in_transformers(family, hf_model_factory, make_batch, tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    path, hf = hf_model_factory(family)
    cfg, _, params = load_hf_model(path)
    save_hf(cfg, params, tmp_path / "out")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids, _ = make_batch(96, [9, 5], T=9)
    with torch.no_grad():
        a = hf(input_ids=torch.from_numpy(ids)).logits.numpy()
        b = reloaded(input_ids=torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_array_equal(a, b)
    assert ModelConfig.from_pretrained(tmp_path / "out") == cfg


def test_bad_checkpoint_names_the_tensor(hf_model_factory, tmp_path) -> None:
    from safetensors.numpy import save_file

    path, _ = hf_model_factory("llama")
    tensors = load_file(str(path / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_hf_model(path)


def test_unsupported_model_type_is_named() -> None:
    with pytest.raises(ValueError, match="model_type='gpt2'"):
        ModelConfig.from_hf_dict({"model_type": "gpt2"})


NEXT = {"model_type": "qwen3_next", "vocab_size": 96, "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
        "partial_rotary_factor": 0.25, "full_attention_interval": 3}  # fmt: skip


def test_qwen3_next_config_is_read_as_published_and_bad_ones_are_named() -> None:
    cfg = ModelConfig.from_hf_dict(NEXT)  # no layer_types: every 3rd layer full, no experts
    assert cfg.layer_types == ("linear_attention", "linear_attention", "full_attention")
    assert (cfg.rotary_dim, cfg.num_experts, cfg.attn_output_gate) == (4, 0, True)
    with pytest.raises(ValueError, match="layer_types must name 3 layers"):
        ModelConfig.from_hf_dict({**NEXT, "layer_types": ["linear_attention", "sliding_attention",
                                                          "full_attention"]})  # fmt: skip
    with pytest.raises(ValueError, match="linear_num_value_heads=3 is not a multiple"):
        ModelConfig.from_hf_dict({**NEXT, "linear_num_value_heads": 3})
    with pytest.raises(ValueError, match="partial_rotary_factor != 1 is supported for qwen3_next"):
        ModelConfig.from_hf_dict({**NEXT, "model_type": "qwen3"})


def test_dtype_export_bf16(hf_model_factory) -> None:
    path, _ = hf_model_factory("llama")
    cfg, _, params = load_hf_model(path)
    name, arr = next(iter_hf_weights(cfg, params, dtype=jnp.bfloat16))
    assert name == "model.embed_tokens.weight"
    assert arr.dtype == jnp.bfloat16
