"""Supervised losses: masked negative log-likelihood and top-k forward-KL distillation.

* NLL:  L = Σ_bt m_bt · (−log π(y_bt)) / N_tok   (N_tok: global loss-token count)
* Top-k forward KL (distillation; Hinton et al. 2015, arXiv:1503.02531; the top-k restriction as
  in NeMo-RL / Agarwal et al. 2024, arXiv:2306.13649): the teacher keeps its k largest logits
  per position, p_T = softmax(z_T,topk / τ) renormalised over those k ids, and

      KL_t = Σ_{i ∈ topk} p_T,i · (log p_T,i − log q_S,i),   log q_S = log_softmax(z_S / τ)

  over the student's *full* vocabulary, gathered at the teacher's ids; L = Σ m·KL_t / N_tok.
  (Student mass outside the teacher's top-k is not penalised directly; it is lost from the
  gathered log q_S.) No τ² factor is applied. With ``topk`` set, only the teacher's first k
  entries are kept (its top-k arrays come sorted, largest first, as ``get_topk_logits`` gives them).

:class:`MaskedNLLLoss` is the SFT ``LossFn``; :class:`DistillationLoss` binds k and τ
(``DistillationLoss.from_config(cfg.loss_fn)``) and takes logits, not the ``LossFn`` batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dockyard.core.rl._xp import Array, namespace
from dockyard.core.rl.aggregate import aggregate


def masked_nll(
    logprobs: Array,
    mask: Any = None,
    *,
    num_loss_tokens: Any = None,
    num_sequences: Any = None,
    agg: str = "token-mean",
) -> tuple[Array, dict[str, Array]]:
    """Masked NLL of ``logprobs [B, T]`` (log π of the target tokens) over ``mask [B, T]``;
    ``agg`` and the global counts as in :func:`dockyard.core.rl.aggregate`.

    Returns ``(loss, {"nll": loss, "num_tokens": N})``.
    """
    xp = namespace(logprobs, mask)
    logprobs = xp.promote_half(logprobs)
    m = logprobs * 0.0 + 1.0 if mask is None else xp.to_float(mask, logprobs)
    nll = xp.where(m > 0, -logprobs, 0.0)
    loss = aggregate(xp, nll, m, agg, num_loss_tokens, num_sequences)
    return loss, {
        "nll": xp.stop_gradient(loss),
        "num_tokens": xp.sum(m),
        "loss": xp.stop_gradient(loss),
    }


@dataclass(frozen=True)
class MaskedNLLLoss:
    """``LossFn`` for SFT: reads ``loss_mask``, ``num_loss_tokens`` and ``num_sequences``
    from the batch."""

    agg: str = "token-mean"

    def __call__(self, logprobs: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        return masked_nll(
            logprobs,
            batch.get("loss_mask"),
            num_loss_tokens=batch.get("num_loss_tokens"),
            num_sequences=batch.get("num_sequences"),
            agg=self.agg,
        )

    @classmethod
    def from_config(cls, loss_cfg: Any) -> MaskedNLLLoss:
        """Build from ``MasterConfig.loss_fn`` (an ``NLLLossConfig``)."""
        return cls(**loss_cfg.loss_options())


def topk_forward_kl(
    student_logits: Array,
    teacher_topk_logits: Array,
    teacher_topk_indices: Array,
    mask: Any = None,
    *,
    topk: int | None = None,
    temperature: float = 1.0,
    num_loss_tokens: Any = None,
) -> tuple[Array, dict[str, Array]]:
    """Top-k forward KL(p_T ‖ q_S) distillation loss.

    Args:
        student_logits: ``[B, T, V]`` student logits.
        teacher_topk_logits: ``[B, T, k]`` the teacher's k largest logits per position.
        teacher_topk_indices: ``[B, T, k]`` int, their vocabulary ids.
        mask: ``[B, T]`` bool loss mask.
        topk: keep the teacher's first ``topk`` ≤ k entries (None: all k).
        temperature: τ applied to both.
        num_loss_tokens: global token count (None: this batch's).

    Returns:
        ``(loss, {"distill_kl": loss, "loss": loss})``.
    """
    if topk is not None:
        k = teacher_topk_logits.shape[-1]
        if topk > k:
            raise ValueError(f"distillation topk={topk} but the teacher gave only {k} logits")
        teacher_topk_logits = teacher_topk_logits[..., :topk]
        teacher_topk_indices = teacher_topk_indices[..., :topk]
    xp = namespace(student_logits, teacher_topk_logits, mask)
    zs = xp.promote_half(student_logits) / temperature
    log_q = zs - xp.logsumexp(zs, axis=-1, keepdims=True)
    log_q_k = xp.take_along_axis(log_q, teacher_topk_indices, axis=-1)
    zt = xp.promote_half(xp.stop_gradient(teacher_topk_logits)) / temperature
    log_p = zt - xp.logsumexp(zt, axis=-1, keepdims=True)
    kl = xp.sum(xp.exp(log_p) * (log_p - log_q_k), axis=-1)  # [B, T]
    m = kl * 0.0 + 1.0 if mask is None else xp.to_float(mask, kl)
    loss = aggregate(xp, xp.where(m > 0, kl, 0.0), m, "token-mean", num_loss_tokens)
    return loss, {"distill_kl": xp.stop_gradient(loss), "loss": xp.stop_gradient(loss)}


@dataclass(frozen=True)
class DistillationLoss:
    """:func:`topk_forward_kl` with k (``topk``, also what a driver asks the teacher's
    ``get_topk_logits`` for) and τ (``temperature``) bound."""

    topk: int = 64
    temperature: float = 1.0

    def __call__(
        self,
        student_logits: Array,
        teacher_topk_logits: Array,
        teacher_topk_indices: Array,
        mask: Any = None,
        *,
        num_loss_tokens: Any = None,
    ) -> tuple[Array, dict[str, Array]]:
        """Arrays as in :func:`topk_forward_kl` -> ``(loss, metrics)``."""
        return topk_forward_kl(
            student_logits,
            teacher_topk_logits,
            teacher_topk_indices,
            mask,
            topk=self.topk,
            temperature=self.temperature,
            num_loss_tokens=num_loss_tokens,
        )

    @classmethod
    def from_config(cls, loss_cfg: Any) -> DistillationLoss:
        """Build from ``MasterConfig.loss_fn`` (a ``DistillationLossConfig``)."""
        return cls(**loss_cfg.loss_options())
