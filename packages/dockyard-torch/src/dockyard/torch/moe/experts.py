"""The experts' SwiGLU FFN over tokens already sorted by expert: one grouped GEMM, or a loop.

Rows ``x [M, H]`` come grouped by expert (``counts [E]`` rows each, in expert order). Expert
``e`` computes ``y = W_down[e] · (act(W_gate[e]·x) ⊙ W_up[e]·x)`` with Hugging Face's fused
layout: ``gate_up [E, 2I, H]`` (gate rows first), ``down [E, H, I]``.

* :func:`grouped_ffn`: two ``torch.nn.functional.grouped_mm`` calls (one GEMM each over all
  experts, ``offs`` = the cumulative counts: no padding, no per-expert launch). PyTorch 2.13 has
  CPU kernels (forward and backward, float32 and bfloat16); its strides must be multiples of 16
  bytes, so ``H`` and ``I`` must be multiples of 8.
* :func:`loop_ffn`: one ``F.linear`` pair per expert with rows (the reference; any shape).

Both take the weights in the dtype the caller computes in (autocast does not reach
``grouped_mm``: the caller casts).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

Act = Callable[[torch.Tensor], torch.Tensor]


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the incoming gradient contiguous (``grouped_mm``'s
    backward rejects the expanded, stride-0 gradient of e.g. ``y.sum()``)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad.contiguous()


def grouped_ffn(
    x: torch.Tensor, counts: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, act: Act
) -> torch.Tensor:
    """``[M, H]`` outputs of rows ``x [M, H]`` sorted by expert (``counts [E]`` int)."""
    offs = torch.cumsum(counts, 0).to(torch.int32)
    h = F.grouped_mm(x, gate_up.transpose(1, 2), offs=offs)  # [M, 2I]
    gate, up = _ContiguousGrad.apply(h).chunk(2, dim=-1)
    a = (act(gate) * up).contiguous()
    return _ContiguousGrad.apply(F.grouped_mm(a, down.transpose(1, 2), offs=offs))  # [M, H]


def loop_ffn(
    x: torch.Tensor, counts: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, act: Act
) -> torch.Tensor:
    """As :func:`grouped_ffn`, one expert at a time."""
    outs = []
    for e, rows in enumerate(torch.split(x, counts.tolist())):
        if rows.shape[0] == 0:
            continue
        gate, up = F.linear(rows, gate_up[e]).chunk(2, dim=-1)
        outs.append(F.linear(act(gate) * up, down[e]))
    return torch.cat(outs) if outs else x.new_zeros(0, down.shape[1])


def check_grouped_shapes(hidden: int, intermediate: int) -> None:
    """``grouped_mm`` needs 16-byte strides: raise naming the fix unless ``H``, ``I`` % 8 == 0."""
    if hidden % 8 or intermediate % 8:
        raise ValueError(
            f"moe.grouped_gemm needs hidden_size ({hidden}) and moe_intermediate_size "
            f"({intermediate}) to be multiples of 8 (grouped_mm's 16-byte strides): set "
            "moe.grouped_gemm=false for this model"
        )


def expert_ffn(grouped: bool) -> Callable[..., torch.Tensor]:
    """:func:`grouped_ffn` or :func:`loop_ffn`."""
    return grouped_ffn if grouped else loop_ffn
