"""NVFP4 (W4A16) weights in ModelOpt's export layout (dockyard.torch.nvfp4), quantised by
ModelOpt on CPU: every element within e2m1's bound, a dequantiser written from the format agrees
with ModelOpt's own, the nibble order and the scales are the format's, the MoE experts are
quantised and the router is not, and a model rebuilt from the folder drifts by what 4-bit
rounding explains. Serving the folder needs CUDA kernels: tests/gpu/test_nvfp4.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from dockyard.torch import nvfp4
from dockyard.torch.testing import build_tiny_model

pytest.importorskip("modelopt", reason="the nvfp4 extra (nvidia-modelopt) is not installed")


def _weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = {
        "square": torch.randn(128, 128, generator=g) * 0.02,
        "wide": torch.randn(48, 400, generator=g),
        "tall": torch.randn(600, 32, generator=g) * 3.0,
    }
    w["outliers"] = torch.randn(64, 256, generator=g) * 0.01
    w["outliers"][7, 9], w["outliers"][40, 200] = 40.0, -3.0  # the tensor scale dominated
    w["zero_block"] = torch.randn(32, 64, generator=g)
    w["zero_block"][:, :16] = 0.0
    w["tiny"] = torch.randn(64, 64, generator=g) * 1e-6
    return w


@pytest.mark.parametrize("name", sorted(_weights()))
def test_every_element_within_the_e2m1_bound(name: str) -> None:
    w = _weights()[name]
    codes, scale, scale_2 = nvfp4.quantize_nvfp4(w)
    out, inn = w.shape
    assert (codes.dtype, codes.shape) == (torch.uint8, (out, inn // 2))
    assert (scale.dtype, scale.shape) == (torch.float8_e4m3fn, (out, inn // 16))
    assert (scale_2.dtype, scale_2.shape) == (torch.float32, ())
    assert scale_2.item() == pytest.approx(w.abs().max().item() / (6 * 448), rel=1e-6)
    err = (nvfp4.dequantize_nvfp4(codes, scale, scale_2) - w).abs()
    bound = nvfp4.error_bound(w, scale, scale_2)
    assert (err <= bound).all(), (err - bound).max()
    # the bound is not loose: the worst element uses a good part of it
    assert (err / bound).max() > 0.5


def test_the_format_dequantiser_agrees_with_modelopts() -> None:
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    for name, w in _weights(1).items():
        codes, scale, scale_2 = nvfp4.quantize_nvfp4(w)
        qt = NVFP4QTensor(w.shape, torch.float32, codes)
        theirs = qt.dequantize(dtype=torch.float32, scale=scale, double_scale=scale_2,
                               block_sizes={-1: 16})  # fmt: skip
        assert torch.equal(nvfp4.dequantize_nvfp4(codes, scale, scale_2), theirs), name


def test_the_nibbles_and_scales_are_the_formats() -> None:
    """A block holding e2m1's grid times a power of two comes back exactly, with the codes the
    format gives each value (sign bit 8 over the index into E2M1; the even column in the low
    nibble)."""
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    row = torch.cat([grid, -grid]) * 0.25  # one 16-element block
    w = torch.stack([row, row.flip(0)])
    codes, scale, scale_2 = nvfp4.quantize_nvfp4(w)
    back = nvfp4.dequantize_nvfp4(codes, scale, scale_2)
    assert torch.equal(back, w)
    want = list(range(8)) + [0] + [8 + i for i in range(1, 8)]  # -0.0 has no sign bit
    assert codes[0].tolist() == [want[2 * i] | (want[2 * i + 1] << 4) for i in range(8)]
    assert (scale.float() * scale_2).flatten().tolist() == [0.25, 0.25]


def test_the_experts_are_quantised_not_the_router(tmp_path) -> None:
    path = build_tiny_model(tmp_path / "moe", family="qwen3_moe", hidden_size=128, num_heads=2)
    sd = load_file(str(path / "model.safetensors"))
    out = dict(nvfp4.nvfp4_weights(sd.items()))
    experts = [n for n in sd if ".experts." in n]
    assert experts
    for n in experts:
        module = n.removesuffix(".weight")
        assert out[n].dtype == torch.uint8, n
        assert out[f"{module}.weight_scale"].dtype == torch.float8_e4m3fn, n
    routers = [n for n in sd if n.endswith("mlp.gate.weight")]
    assert routers
    for n in [*routers, "model.embed_tokens.weight", "lm_head.weight"]:
        assert out[n].dtype == sd[n].dtype, n
    exclude = nvfp4.excluded_modules((n, tuple(t.shape)) for n, t in sd.items())
    assert "lm_head" in exclude
    assert all(r.removesuffix(".weight") in exclude for r in routers)
    assert not any("embed_tokens" in e or "experts" in e for e in exclude)


def test_a_saved_folder_holds_modelopts_layout(tmp_path) -> None:
    src = build_tiny_model(tmp_path / "m", hidden_size=128, num_heads=2)
    dst = nvfp4.save_nvfp4_checkpoint(src, tmp_path / "nvfp4")
    qc = json.loads((dst / "config.json").read_text())["quantization_config"]
    assert qc["quant_method"] == "modelopt"
    assert (qc["quant_algo"], qc["group_size"]) == ("W4A16_NVFP4", 16)
    assert qc["exclude_modules"] == ["lm_head"]
    hf = json.loads((dst / "hf_quant_config.json").read_text())
    assert hf["producer"]["name"] == "modelopt"
    assert hf["quantization"]["quant_algo"] == "W4A16_NVFP4"
    saved = load_file(str(dst / "model.safetensors"))
    sd = load_file(str(src / "model.safetensors"))
    out, inn = sd["model.layers.0.self_attn.q_proj.weight"].shape
    q = "model.layers.0.self_attn.q_proj"
    assert saved[f"{q}.weight"].shape == (out, inn // 2)
    assert saved[f"{q}.weight_scale_2"].shape == ()
    assert torch.equal(saved["lm_head.weight"], sd["lm_head.weight"])
    assert (dst / "tokenizer.json").is_file()


def test_a_model_rebuilt_from_its_nvfp4_folder_predicts_close(tmp_path) -> None:
    """Dense and MoE: the dequantised weights' logprobs drift from the trainer's by no more than
    4-bit rounding explains — e2m1's relative step (2⁻¹ at worst) is 64× bfloat16's (2⁻⁷), so at
    most 64× the drift of the same tensors rounded to bfloat16, with a factor 2 of slack; and
    more than FP8 (3 mantissa bits) drifts."""
    from transformers import AutoModelForCausalLM

    from dockyard.torch import fp8

    for family in ("qwen2", "qwen3_moe"):
        path = build_tiny_model(tmp_path / family, family=family, hidden_size=128, num_heads=2)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        sd = load_file(str(path / "model.safetensors"))
        out = dict(nvfp4.nvfp4_weights(sd.items()))
        names = [n for n in sd if out[n].dtype == torch.uint8]
        assert len(names) >= 4
        as_fp4 = {}
        for n in names:
            m = n.removesuffix(".weight")
            as_fp4[n] = nvfp4.dequantize_nvfp4(
                out[n], out[f"{m}.weight_scale"], out[f"{m}.weight_scale_2"]
            )
        as_fp8 = {n: fp8.dequantize_block_fp8(*fp8.quantize_block_fp8(sd[n])) for n in names}
        as_bf16 = {n: sd[n].bfloat16().float() for n in names}
        ids = torch.randint(4, 1000, (4, 32), generator=torch.Generator().manual_seed(0))
        drift = {}
        with torch.no_grad():
            ref = model(ids).logits.log_softmax(-1)
            for kind, weights in (("bf16", as_bf16), ("fp8", as_fp8), ("nvfp4", as_fp4)):
                model.load_state_dict(weights, strict=False)
                drift[kind] = (model(ids).logits.log_softmax(-1) - ref).abs().mean().item()
        print(f"{family}: mean |Δ logprob| " + ", ".join(f"{k} {v:.2e}" for k, v in drift.items()))
        assert drift["fp8"] < drift["nvfp4"] <= 128 * drift["bf16"], (family, drift)


def test_without_modelopt_the_error_names_the_extra(monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_modelopt(name, *args, **kwargs):
        if name.startswith("modelopt"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_modelopt)
    with pytest.raises(RuntimeError, match=r"dockyard-torch\[nvfp4\]"):
        nvfp4.quantize_nvfp4(torch.ones(2, 16))
