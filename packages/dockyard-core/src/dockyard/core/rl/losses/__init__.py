"""Policy-gradient losses, by name (the config's ``loss_fn.type``).

=============== =====================================================================
name            per-token loss ℓ_t (before IS weight, KL term and aggregation)
=============== =====================================================================
``clipped_pg``  −min(r·A, clip(r, 1−ε_low, 1+ε_high)·A) [dual clip c; GSPO sequence ratio]
``cispo``       −sg(clip(r, 1−ε_low, 1+ε_high))·A·log π
=============== =====================================================================

Every loss has the signature of :func:`clipped_pg_loss`:
``fn(logprobs [B, T], advantages [B, T] | [B], mask [B, T], *, prev_logprobs, gen_logprobs,
ref_logprobs, ..., agg, num_loss_tokens, num_sequences) -> (loss, metrics)``.

:class:`PolicyLoss` binds a loss and its options into the trainer's ``LossFn`` protocol
(``dockyard.core.interfaces.policy.LossFn``): ``loss_fn(logprobs, batch)`` reads the batch's
``advantages``, ``loss_mask``, ``prev_logprobs``, ``gen_logprobs``, ``ref_logprobs``,
``num_loss_tokens`` and ``num_sequences`` (the last two: global counts over the whole step).

:func:`loss_from_config` builds the loss of any ``loss_fn.type`` from its config: a
:class:`PolicyLoss` (``clipped_pg``, ``cispo``), ``MaskedNLLLoss`` (``nll``), ``PreferenceLoss``
(``dpo`` ... ``orpo``), ``DistillationLoss`` or ``BradleyTerryLoss``; only the first two are
``LossFn`` objects (the others take per-pair arrays or logits: their drivers shape the batch).

Adding a loss here: write ``losses/my_loss.py`` with a function of that signature whose
docstring states the formula and cites the paper, register it below with
``POLICY_LOSSES.register("my_loss")``, give it a config member with its keys
(``dockyard.core.config.loss``), and add a float64 reference test. Another package registers
one under the entry-point group ``dockyard.losses`` instead: ``loss_fn: {type: my_loss,
options: {...}}`` then selects it (``PluginPGLossConfig``), and ``dockyard train`` trains it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dockyard.core.registry import Registry
from dockyard.core.rl.losses.cispo import cispo_loss
from dockyard.core.rl.losses.clipped_pg import clipped_pg_loss
from dockyard.core.rl.preference import PREFERENCE_LOSSES, BradleyTerryLoss, PreferenceLoss
from dockyard.core.rl.supervised import DistillationLoss, MaskedNLLLoss

POLICY_LOSSES: Registry[Callable[..., Any]] = Registry("policy loss", "dockyard.losses")
POLICY_LOSSES.register("clipped_pg")(clipped_pg_loss)
POLICY_LOSSES.register("cispo")(cispo_loss)

grpo_loss = clipped_pg_loss
"""Alias: GRPO's loss is the clipped policy gradient (with β·KL, ``seq-mean-token-mean``)."""


@dataclass(frozen=True)
class PolicyLoss:
    """A policy loss with its options bound: satisfies the ``LossFn`` protocol.

    Attributes:
        name: a name in :data:`POLICY_LOSSES`.
        options: keyword options of that loss (``eps_low``, ``kl_beta``, ``agg``...).
    """

    name: str = "clipped_pg"
    options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        POLICY_LOSSES.get(self.name)  # fail early on an unknown name

    def __call__(self, logprobs: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``logprobs [b, T]`` and the micro-batch's arrays -> ``(scalar loss, metrics)``."""
        if "advantages" not in batch:
            raise KeyError("loss batch needs 'advantages' ([b, T] or [b])")
        fn = POLICY_LOSSES.get(self.name)
        return fn(
            logprobs,
            batch["advantages"],
            batch.get("loss_mask"),
            prev_logprobs=batch.get("prev_logprobs"),
            gen_logprobs=batch.get("gen_logprobs"),
            ref_logprobs=batch.get("ref_logprobs"),
            num_loss_tokens=batch.get("num_loss_tokens"),
            num_sequences=batch.get("num_sequences"),
            **dict(self.options or {}),
        )

    @classmethod
    def from_config(cls, loss_cfg: Any, *, norm_length: float | None = None) -> PolicyLoss:
        """Build from ``MasterConfig.loss_fn`` (a ``ClippedPGLossConfig``/``CISPOLossConfig``).

        ``norm_length`` is the constant L for ``loss_agg_mode: seq-mean-token-sum-norm``
        (typically ``policy.generation.max_new_tokens``).
        """
        return cls(name=loss_cfg.type, options=loss_cfg.loss_options(norm_length=norm_length))


ClippedPGLoss = PolicyLoss


def loss_from_config(loss_cfg: Any, *, norm_length: float | None = None) -> Any:
    """The loss ``MasterConfig.loss_fn`` configures, its options bound (see the module doc);
    ``norm_length`` as in :meth:`PolicyLoss.from_config`."""
    kind = loss_cfg.type
    if kind in POLICY_LOSSES:
        return PolicyLoss.from_config(loss_cfg, norm_length=norm_length)
    if kind in PREFERENCE_LOSSES:
        return PreferenceLoss.from_config(loss_cfg)
    builders = {
        "nll": MaskedNLLLoss,
        "distillation": DistillationLoss,
        "bradley_terry": BradleyTerryLoss,
    }
    if kind not in builders:
        raise ValueError(f"loss_fn.type {kind!r} has no loss in dockyard.core.rl")
    return builders[kind].from_config(loss_cfg)


__all__ = [
    "POLICY_LOSSES",
    "ClippedPGLoss",
    "PolicyLoss",
    "cispo_loss",
    "clipped_pg_loss",
    "grpo_loss",
    "loss_from_config",
]
