"""Block-wise FP8 weights for the rollout engine, produced from the trainer's at a push.

The layout is the one vLLM reads from block-quantised checkpoints (DeepSeek-V3's, and every
``quantization_config = {"quant_method": "fp8", "weight_block_size": [128, 128]}`` model): each
quantised linear weight ``W [out, in]`` travels as

* ``<name>``            ``float8_e4m3fn [out, in]``: ``round_e4m3(W / s)``, and
* ``<name>_scale_inv``  ``float32 [⌈out/128⌉, ⌈in/128⌉]``: ``s`` per 128 × 128 block, the block's
  ``max |W| / 448`` (448: e4m3's largest finite value), so ``W ≈ q · s`` block by block.

Which weights: the 2-D ``*.weight`` of the attention and MLP projections, MoE experts included
(``…experts.<e>.{gate,up,down}_proj.weight``); embeddings, the LM head, norms and MoE routers
(``mlp.gate.weight``) stay in the trainer's dtype, as in the published FP8 checkpoints.

Error bound (tests/torch/test_fp8.py): e4m3 keeps 3 mantissa bits, so a value in the normal
range (``|W / s| ≥ 2⁻⁶``) is off by at most half a unit in the last place, ``2⁻⁴ |W|``; below it the
spacing is ``2⁻⁹ s``, so at most ``2⁻¹⁰ s``:  ``|W − q·s| ≤ max(2⁻⁴ |W|, 2⁻¹⁰ s)``.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

E4M3_MAX = 448.0
BLOCK = (128, 128)
SCALE_SUFFIX = "_scale_inv"
_KEEP = ("embed_tokens", "lm_head", "norm", "mlp.gate.weight", "shared_expert_gate")


def quantizable(name: str, shape: tuple[int, ...]) -> bool:
    """Whether the HF tensor ``name`` of ``shape`` is sent as block FP8 (module docstring)."""
    return len(shape) == 2 and name.endswith("_proj.weight") and not any(k in name for k in _KEEP)


def quantize_block_fp8(
    w: torch.Tensor, block: tuple[int, int] = BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """``W [out, in]`` -> ``(q float8_e4m3fn [out, in], s float32 [⌈out/bo⌉, ⌈in/bi⌉])``."""
    if w.dim() != 2:
        raise ValueError(f"block FP8 quantises 2-D weights, got shape {tuple(w.shape)}")
    out, inn = w.shape
    bo, bi = block
    po, pi = -out % bo, -inn % bi
    x = torch.nn.functional.pad(w.float(), (0, pi, 0, po))
    x = x.view((out + po) // bo, bo, (inn + pi) // bi, bi)
    amax = x.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4)  # as vLLM's quantiser
    scale = amax / E4M3_MAX
    q = (x * (1.0 / scale)).to(torch.float8_e4m3fn)
    q = q.view(out + po, inn + pi)[:out, :inn].contiguous()
    return q, scale.view(x.shape[0], x.shape[2])


def dequantize_block_fp8(
    q: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = BLOCK
) -> torch.Tensor:
    """``q · s`` block by block, as float32 ``[out, in]``."""
    return q.float() * _per_element(scale, q.shape, block)


def _per_element(scale: torch.Tensor, shape: Any, block: tuple[int, int]) -> torch.Tensor:
    """Each block's scale repeated over its elements: ``[out, in]``."""
    out, inn = shape
    return scale.repeat_interleave(block[0], 0)[:out].repeat_interleave(block[1], 1)[:, :inn]


def fp8_weights(
    named: Iterable[tuple[str, Any]], block: tuple[int, int] = BLOCK
) -> Iterator[tuple[str, torch.Tensor]]:
    """The HF-named tensors of a push as the engine's block-FP8 checkpoint has them: each
    :func:`quantizable` weight as ``(name, q)`` then ``(name + "_scale_inv", s)``; the rest as
    they are."""
    for name, t in named:
        t = torch.as_tensor(t)
        if quantizable(name, tuple(t.shape)):
            q, s = quantize_block_fp8(t, block)
            yield name, q
            yield name + SCALE_SUFFIX, s
        else:
            yield name, t


def quantization_config(block: tuple[int, int] = BLOCK) -> dict[str, Any]:
    """The ``config.json`` entry that makes vLLM build block-FP8 linear layers for the push."""
    return {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": list(block),
        "modules_to_not_convert": ["lm_head"],
    }


def error_bound(w: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = BLOCK):
    """The elementwise bound ``max(2⁻⁴ |W|, 2⁻¹⁰ s)`` of the module docstring."""
    s = _per_element(scale, w.shape, block)
    return torch.maximum(w.float().abs() * 2.0**-4, s * 2.0**-10) * (1 + 1e-6)


def compression(shapes: Iterable[tuple[str, tuple[int, ...]]], itemsize: int = 2) -> float:
    """Bytes of a push as block FP8 over its bytes in a dtype of ``itemsize`` bytes."""
    before = after = 0
    for name, shape in shapes:
        n = math.prod(shape)
        before += n * itemsize
        if quantizable(name, shape):
            nb = math.ceil(shape[0] / BLOCK[0]) * math.ceil(shape[1] / BLOCK[1])
            after += n + 4 * nb
        else:
            after += n * itemsize
    return after / before if before else 1.0


def save_fp8_checkpoint(src: str | Path, dst: str | Path, block: tuple[int, int] = BLOCK) -> Path:
    """Write the HF model folder ``src`` as a block-FP8 folder ``dst`` that vLLM serves
    (``config.json`` gains :func:`quantization_config`; tokenizer and generation files are
    copied): the engine's starting weights when every push is :func:`fp8_weights`."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    weights: dict[str, torch.Tensor] = {}
    for f in sorted(src.glob("*.safetensors")):
        weights.update(fp8_weights(load_file(str(f)).items(), block))
    save_file({n: t.contiguous() for n, t in weights.items()}, str(dst / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = quantization_config(block)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    for f in src.iterdir():
        if (
            f.is_file()
            and f.suffix != ".safetensors"
            and f.name
            not in (
                "config.json",
                "model.safetensors.index.json",
            )
        ):
            shutil.copy2(f, dst / f.name)
    return dst
