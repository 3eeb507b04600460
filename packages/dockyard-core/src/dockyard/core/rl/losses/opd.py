"""The trainer's ``LossFn`` of ``adv_estimator: opd``: a policy loss on OPD's per-token advantages.

The batch builder puts λ · A^r (:func:`dockyard.core.rl.advantages.opd.opd_advantages`) into
``advantages``; the trainer, seeing ``teacher_logprobs = N`` on this loss, adds per micro-batch
``teacher_logprobs [N, b, T]`` (each frozen teacher's log-probability of the sampled tokens;
for a teacher with another tokenizer, of the student's token through the text alignment of
:mod:`dockyard.core.rl.cross_tokenizer`) and ``teacher_logprob_mask [N, b, T]`` (where it
scores one). The loss then trains the wrapped policy loss (``clipped_pg`` / ``cispo``) with

    A_t = Σ_k w̃_k log π_Tk(y_t) − log π_θ(y_t) + λ · A^r      (:func:`opd_token_advantages`)

where log π_θ is ``prev_logprobs`` when the driver computed them (several optimizer steps per
batch), else the step's own logprobs, stop-gradient (= π_prev with one step per batch).
Metrics add ``opd/teacher_logprob``, ``opd/student_logprob`` (token means over the loss mask),
``opd/reverse_kl`` (their difference: the per-token reverse-KL estimate Σ_k w̃_k
(log π_θ − log π_Tk)) and ``opd/advantage`` (the mean per-token advantage).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dockyard.core.rl._xp import namespace
from dockyard.core.rl.advantages.opd import opd_token_advantages
from dockyard.core.rl.losses import PolicyLoss


@dataclass(frozen=True)
class OPDPolicyLoss:
    """``policy`` trained on OPD advantages from ``len(weights)`` teachers (module docstring)."""

    policy: PolicyLoss = field(default_factory=PolicyLoss)
    weights: tuple[float, ...] = (1.0,)
    clip: float | None = None
    """Clip the per-token advantages to [−clip, clip] (``grpo.adv_estimator.advantage_clip``)."""

    @property
    def teacher_logprobs(self) -> int:
        """N: the teachers whose log-probabilities of the sampled tokens the trainer adds."""
        return len(self.weights)

    def __call__(self, logprobs: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``(loss, metrics)`` of the policy loss on the OPD advantages."""
        xp = namespace(logprobs)
        student = batch.get("prev_logprobs")
        student = xp.stop_gradient(logprobs) if student is None else student
        mask = batch.get("loss_mask")
        teachers = batch["teacher_logprobs"]
        tmask = batch.get("teacher_logprob_mask")
        adv = opd_token_advantages(
            student, teachers, self.weights, batch.get("advantages"),
            teacher_mask=tmask, mask=mask,
        )  # fmt: skip
        if self.clip is not None:
            adv = xp.clip(adv, -self.clip, self.clip)
        loss, metrics = self.policy(logprobs, {**batch, "advantages": adv})
        s = xp.stop_gradient(xp.promote_half(student))
        m = s * 0.0 + 1.0 if mask is None else xp.to_float(mask, s)
        zero = opd_token_advantages(s, teachers, self.weights, None, teacher_mask=tmask) + s
        scored = zero * 0.0 + 1.0 if tmask is None else xp.to_float(xp.sum(tmask, axis=0) > 0, s)
        ms = m * scored
        n, ns = xp.maximum(xp.sum(m), 1.0), xp.maximum(xp.sum(ms), 1.0)
        metrics["opd/teacher_logprob"] = xp.sum(zero * ms) / ns
        metrics["opd/student_logprob"] = xp.sum(s * ms) / ns
        metrics["opd/reverse_kl"] = xp.sum((s - zero) * ms) / ns
        metrics["opd/advantage"] = xp.sum(adv * m) / n
        return loss, metrics

    @classmethod
    def from_config(
        cls, loss_cfg: Any, estimator: Any, *, norm_length: float | None = None
    ) -> OPDPolicyLoss:
        """From the run's ``loss_fn`` (a policy loss: ``clipped_pg`` / ``cispo``) and its
        ``grpo.adv_estimator`` (an ``OPDAdvConfig``: the teachers' weights, ``advantage_clip``);
        ``norm_length`` as in :meth:`PolicyLoss.from_config`."""
        policy = PolicyLoss.from_config(loss_cfg, norm_length=norm_length)
        weights = tuple(t.weight for t in estimator.teachers)
        return cls(policy, weights, estimator.advantage_clip)
