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
* Top-k reverse KL (``kl_type: reverse``; the mode-seeking direction of on-policy distillation,
  Gu et al. 2024 MiniLLM, arXiv:2306.08543; Agarwal et al. 2024): both distributions restricted
  to the teacher's top-k ids and renormalised there, p̃_T = softmax(z_T,topk / τ) and
  q̃_S = softmax(z_S,topk / τ) (the student's logits gathered at those ids), and

      KL_t = Σ_{i ∈ topk} q̃_S,i · (log q̃_S,i − log p̃_T,i).

  Departure: the papers take the reverse KL over the full vocabulary (or estimate it from
  samples); with only the teacher's top-k known, the student's mass is renormalised onto them.

:class:`MaskedNLLLoss` is the SFT ``LossFn``; :class:`DistillationLoss` binds k, τ and the
direction (``DistillationLoss.from_config(cfg.loss_fn)``) and takes logits, not the ``LossFn``
batch; :class:`OnPolicyDistillationLoss` is its ``LossFn``: the trainer hands it the student's
logits and the teacher's top-k on the same tokens (its ``teacher_topk`` asks for them).
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
        """``(loss, {"loss", "nll", "num_tokens"})``: the loss normalised by the batch's global
        counts (its gradient sums over micro-batches); ``nll`` this micro-batch's own mean
        token NLL, so that the trainer's loss-token-weighted mean of it is the batch's,
        whatever the micro-batching."""
        mask = batch.get("loss_mask")
        loss, metrics = masked_nll(
            logprobs,
            mask,
            num_loss_tokens=batch.get("num_loss_tokens"),
            num_sequences=batch.get("num_sequences"),
            agg=self.agg,
        )
        if mask is not None:
            xp = namespace(logprobs, mask)
            lp = xp.promote_half(logprobs)
            m = xp.to_float(mask, lp)
            n = xp.sum(m)
            mean = xp.sum(xp.where(m > 0, -lp, 0.0)) / xp.maximum(n, 1.0)
            metrics["nll"] = xp.stop_gradient(mean)
        return loss, metrics

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
    teacher_topk_logits, teacher_topk_indices = _first_k(
        teacher_topk_logits, teacher_topk_indices, topk
    )
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


def topk_reverse_kl(
    student_logits: Array,
    teacher_topk_logits: Array,
    teacher_topk_indices: Array,
    mask: Any = None,
    *,
    topk: int | None = None,
    temperature: float = 1.0,
    num_loss_tokens: Any = None,
) -> tuple[Array, dict[str, Array]]:
    """Top-k reverse KL(q̃_S ‖ p̃_T) over the teacher's top-k ids (module docstring); the
    arguments and the return as in :func:`topk_forward_kl`."""
    teacher_topk_logits, teacher_topk_indices = _first_k(
        teacher_topk_logits, teacher_topk_indices, topk
    )
    xp = namespace(student_logits, teacher_topk_logits, mask)
    zs = xp.take_along_axis(xp.promote_half(student_logits), teacher_topk_indices, axis=-1)
    zs = zs / temperature
    log_q = zs - xp.logsumexp(zs, axis=-1, keepdims=True)
    zt = xp.promote_half(xp.stop_gradient(teacher_topk_logits)) / temperature
    log_p = zt - xp.logsumexp(zt, axis=-1, keepdims=True)
    kl = xp.sum(xp.exp(log_q) * (log_q - log_p), axis=-1)  # [B, T]
    m = kl * 0.0 + 1.0 if mask is None else xp.to_float(mask, kl)
    loss = aggregate(xp, xp.where(m > 0, kl, 0.0), m, "token-mean", num_loss_tokens)
    return loss, {"distill_kl": xp.stop_gradient(loss), "loss": xp.stop_gradient(loss)}


def _first_k(values: Array, indices: Array, topk: int | None) -> tuple[Array, Array]:
    if topk is None:
        return values, indices
    k = values.shape[-1]
    if topk > k:
        raise ValueError(f"distillation topk={topk} but the teacher gave only {k} logits")
    return values[..., :topk], indices[..., :topk]


KL_TYPES = {"forward": topk_forward_kl, "reverse": topk_reverse_kl}
"""``loss_fn.kl_type`` -> its function (same arguments)."""


@dataclass(frozen=True)
class DistillationLoss:
    """:func:`topk_forward_kl` (or :func:`topk_reverse_kl`, ``kl_type="reverse"``) with k
    (``topk``, also what a driver asks the teacher's ``get_topk_logits`` for) and τ
    (``temperature``) bound."""

    topk: int = 64
    temperature: float = 1.0
    kl_type: str = "forward"

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
        if self.kl_type not in KL_TYPES:
            raise ValueError(f"kl_type {self.kl_type!r}: use one of {', '.join(KL_TYPES)}")
        return KL_TYPES[self.kl_type](
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


@dataclass(frozen=True)
class OnPolicyDistillationLoss:
    """The trainer's ``LossFn`` of :class:`DistillationLoss` on the policy's own samples.

    ``teacher_topk`` (= k) tells the trainer to put, beside the usual fields, into each
    micro-batch it hands the loss: ``student_logits [b, T, V]`` (aligned like the logprobs:
    position t is the student's distribution of token t, 0 at t = 0) and the frozen teacher's
    ``teacher_topk_logits [b, T, k]`` / ``teacher_topk_indices [b, T, k]`` on the same tokens.
    The loss is the KL over ``loss_mask`` (the sampled response tokens), normalised by the
    batch's global ``num_loss_tokens``; the logprobs argument is unused. With several teachers
    (or one of another tokenizer, :mod:`dockyard.core.rl.cross_tokenizer`) the trainer also
    hands ``teacher_mask [b, T]``, where a teacher is aligned: a token without one adds 0 to
    the KL (still counted in ``num_loss_tokens``), and ``distill_aligned`` reports the aligned
    fraction of the loss tokens.
    """

    loss: DistillationLoss = DistillationLoss()

    @property
    def teacher_topk(self) -> int:
        return self.loss.topk

    def __call__(self, logprobs: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``(loss, {"loss", "distill_kl"})``: the loss normalised by the batch's global token
        count (its gradient sums over micro-batches), ``distill_kl`` this micro-batch's own
        token mean (the trainer's loss-token-weighted mean of it is the batch's)."""
        n = batch.get("num_loss_tokens")
        mask = batch.get("loss_mask")
        aligned = batch.get("teacher_mask")  # several / cross-tokenizer teachers: where any is
        here_all = None if mask is None else mask.sum()
        if aligned is not None and mask is not None:
            mask = mask * aligned
        loss, metrics = self.loss(
            batch["student_logits"],
            batch["teacher_topk_logits"],
            batch["teacher_topk_indices"],
            mask,
            num_loss_tokens=n,
        )
        if n is not None and here_all is not None:
            here = here_all
            metrics["distill_kl"] = metrics["distill_kl"] * n / (here + (here == 0))
        if aligned is not None and mask is not None and here_all is not None:
            metrics["distill_aligned"] = mask.sum() / (here_all + (here_all == 0))
        return loss, metrics

    @classmethod
    def from_config(cls, loss_cfg: Any) -> OnPolicyDistillationLoss:
        """Build from ``MasterConfig.loss_fn`` (a ``DistillationLossConfig``)."""
        return cls(DistillationLoss.from_config(loss_cfg))
