"""Block-wise FP8 weights for the engine (dockyard.torch.fp8): vLLM's own quantiser agrees
bit for bit, the quantise → dequantise error stays within e4m3's bound on every element, the
MoE experts are quantised and the router is not, and a model rebuilt from its FP8 push drifts
from the trainer's logprobs by what e4m3's rounding explains."""

from __future__ import annotations

import pytest
import torch

from dockyard.torch import fp8
from dockyard.torch.testing import build_tiny_model


def _weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = {
        "square": torch.randn(256, 256, generator=g) * 0.02,
        "ragged": torch.randn(300, 200, generator=g),  # blocks cut at both edges
        "tall": torch.randn(1000, 64, generator=g) * 3.0,
    }
    w["outliers"] = torch.randn(256, 384, generator=g) * 0.01
    w["outliers"][7, 9], w["outliers"][200, 300] = 40.0, -3.0  # one block's scale dominated
    w["zero_block"] = torch.randn(256, 256, generator=g)
    w["zero_block"][:128, :128] = 0.0
    w["tiny"] = torch.randn(128, 128, generator=g) * 1e-6
    return w


@pytest.mark.parametrize("name", sorted(_weights()))
def test_every_element_within_the_e4m3_bound(name: str) -> None:
    w = _weights()[name]
    q, s = fp8.quantize_block_fp8(w)
    assert q.dtype == torch.float8_e4m3fn
    assert q.shape == w.shape
    assert s.shape == (-(-w.shape[0] // 128), -(-w.shape[1] // 128))
    assert s.dtype == torch.float32
    back = fp8.dequantize_block_fp8(q, s)
    err = (back - w).abs()
    bound = fp8.error_bound(w, s)
    assert (err <= bound).all(), (err - bound).max()
    # the bound is not loose: the worst element uses a good part of it
    assert (err / bound).max() > 0.25
    assert q.float().abs().max() <= fp8.E4M3_MAX


def test_vllm_quantiser_agrees_bit_for_bit() -> None:
    deep_gemm = pytest.importorskip("vllm.utils.deep_gemm")
    for name, w in _weights(1).items():
        q, s = fp8.quantize_block_fp8(w)
        vq, vs = deep_gemm.per_block_cast_to_fp8(w, [128, 128])
        assert torch.equal(q.view(torch.uint8), vq.view(torch.uint8)), name
        torch.testing.assert_close(s, vs, rtol=0, atol=0, msg=name)


def test_a_push_quantises_the_experts_not_the_router(tmp_path) -> None:
    from safetensors.torch import load_file

    path = build_tiny_model(tmp_path / "moe", family="qwen3_moe", hidden_size=128, num_heads=2)
    sd = load_file(str(path / "model.safetensors"))
    out = dict(fp8.fp8_weights(sd.items()))
    experts = [n for n in sd if ".experts." in n]
    assert experts
    for n in experts:
        assert out[n].dtype == torch.float8_e4m3fn, n
        assert out[n + fp8.SCALE_SUFFIX].dtype == torch.float32, n
    routers = [n for n in sd if n.endswith("mlp.gate.weight")]
    assert routers
    for n in [*routers, "model.embed_tokens.weight", "lm_head.weight"]:
        assert out[n].dtype == sd[n].dtype, n
        assert n + fp8.SCALE_SUFFIX not in out
    for n in sd:
        if "norm" in n:
            assert out[n].dtype == sd[n].dtype, n
    assert any(
        n.endswith("self_attn.q_proj.weight") and out[n].dtype == torch.float8_e4m3fn for n in out
    )


def test_a_model_rebuilt_from_its_fp8_push_predicts_the_same(tmp_path) -> None:
    """Dense and MoE: the logprobs of the dequantised push drift from the trainer's by no more
    than e4m3's coarser rounding explains — 16× (3 mantissa bits against 7) the drift of the
    same tensors rounded to bfloat16, with a factor 2 of slack."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    for family in ("qwen2", "qwen3_moe"):
        path = build_tiny_model(tmp_path / family, family=family, hidden_size=128, num_heads=2)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        sd = load_file(str(path / "model.safetensors"))
        pushed = dict(fp8.fp8_weights(sd.items()))
        scales = {n.removesuffix(fp8.SCALE_SUFFIX): t for n, t in pushed.items()
                  if n.endswith(fp8.SCALE_SUFFIX)}  # fmt: skip
        assert len(scales) >= 4  # the projections are quantised
        as_fp8 = {n: fp8.dequantize_block_fp8(pushed[n], s) for n, s in scales.items()}
        as_bf16 = {n: sd[n].bfloat16().float() for n in scales}
        ids = torch.randint(4, 1000, (4, 32), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            ref = model(ids).logits.log_softmax(-1)
            model.load_state_dict(as_bf16, strict=False)
            bf16 = model(ids).logits.log_softmax(-1)
            model.load_state_dict(as_fp8, strict=False)
            got = model(ids).logits.log_softmax(-1)
        drift, base = (got - ref).abs().mean().item(), (bf16 - ref).abs().mean().item()
        print(f"{family}: mean |Δ logprob| fp8 {drift:.2e}, bf16 {base:.2e}")
        assert 0 < drift <= 32 * base, (family, drift, base)


def test_a_push_is_about_half_the_bytes_of_bf16() -> None:
    shapes = [("model.layers.0.mlp.up_proj.weight", (4096, 1024)),
              ("model.layers.0.input_layernorm.weight", (1024,)),
              ("model.embed_tokens.weight", (1000, 1024))]  # fmt: skip
    ratio = fp8.compression(shapes)
    want = (4096 * 1024 + 4 * 32 * 8 + 2 * 1024 + 2 * 1000 * 1024) / (
        2 * (4096 * 1024 + 1024 + 1000 * 1024)
    )
    assert ratio == pytest.approx(want)
    assert 0.5 < ratio < 0.62


def test_a_saved_fp8_folder_holds_the_push_and_the_config(tmp_path) -> None:
    import json

    from safetensors.torch import load_file

    src = build_tiny_model(tmp_path / "m", hidden_size=128, num_heads=2)
    dst = fp8.save_fp8_checkpoint(src, tmp_path / "fp8")
    cfg = json.loads((dst / "config.json").read_text())
    assert cfg["quantization_config"]["weight_block_size"] == [128, 128]
    assert cfg["quantization_config"]["quant_method"] == "fp8"
    saved = load_file(str(dst / "model.safetensors"))
    pushed = dict(fp8.fp8_weights(load_file(str(src / "model.safetensors")).items()))
    assert saved.keys() == pushed.keys()
    for n, t in pushed.items():
        assert torch.equal(saved[n].view(torch.uint8), t.contiguous().view(torch.uint8)), n
    assert (dst / "tokenizer.json").is_file()


def test_an_fp8_push_travels_bit_exact_through_the_shm_transport(tmp_path) -> None:
    """The trainer side converts the push to numpy (float8 via ml_dtypes), the real shm
    transport carries it, the engine side gets torch float8 tensors with the same bytes."""
    from dockyard.serve.testing import shm_push
    from dockyard.serve.transports.torch_dtypes import from_numpy, to_numpy

    w = _weights(2)
    named = [(f"model.layers.0.mlp.{k}_proj.weight", t) for k, t in w.items()]
    pushed = dict(fp8.fp8_weights(named))
    bucket = {n: to_numpy(t) for n, t in pushed.items()}
    assert {a.dtype.name for a in bucket.values()} == {"float8_e4m3fn", "float32"}
    got: dict[str, torch.Tensor] = {}
    with shm_push(str(tmp_path / "fp8.sock"), [bucket], 1, bucket_bytes=64 << 10) as rx:
        for b in rx.receive():
            assert b.version == 1
            got.update({n: from_numpy(a).clone() for n, a in b.tensors.items()})
        rx.close()
    assert got.keys() == pushed.keys()
    for n, t in pushed.items():
        assert got[n].dtype == t.dtype, n
        assert torch.equal(got[n].view(torch.uint8), t.contiguous().view(torch.uint8)), n
