"""Preference losses over (chosen, rejected) pairs, and the Bradley–Terry reward-model loss.

Inputs are per-sequence *summed* response logprobs ``[B]``: π_c = Σ_t log π(y_c,t), π_r for the
rejected response, ρ_c / ρ_r the same under the frozen reference; |y_c|, |y_r| the response
lengths. h = (π_c − ρ_c) − (π_r − ρ_r) and σ the logistic function. Each variant returns the
per-pair loss and its preference *logit* z (a pair is "won" when z > 0):

* ``dpo``   z = β·h,  ℓ = −log σ(z)                        (Rafailov et al. 2023, arXiv:2305.18290)
* ``cdpo``  ℓ = −(1−ε)·log σ(z) − ε·log σ(−z), z = β·h      (Mitchell 2023, "conservative DPO")
* ``ipo``   z = h,  ℓ = (h − 1/(2β))²                      (Azar et al. 2023, arXiv:2310.12036)
* ``dpop``  z = β·(h − λ·max(0, ρ_c − π_c)), ℓ = −log σ(z)  (Pal et al. 2024, "Smaug", arXiv:2402.13228)
* ``rdpo``  z = β·h − α·(|y_c| − |y_r|), ℓ = −log σ(z)     (Park et al. 2024, arXiv:2403.19159)
* ``simpo`` z = β·(π_c/|y_c| − π_r/|y_r|) − γ, ℓ = −log σ(z), reference-free
                                                           (Meng et al. 2024, arXiv:2405.14734)
* ``orpo``  with ℓ̄ = π/|y| and log odds o(y) = ℓ̄ − log(1 − e^ℓ̄): z = o(y_c) − o(y_r),
            ℓ = −ℓ̄_c − λ·log σ(z), reference-free    (Hong et al. 2024, arXiv:2403.07691)

:func:`preference_loss` averages over pairs and adds an optional SFT blend
``sft_weight · (−π_c/|y_c|)`` (NLL of the chosen response per token; RPO, Pang et al. 2024).

Bradley–Terry (reward models; Ouyang et al. 2022): ℓ = −log σ(r_c − r_r − m), m an optional margin.

:class:`PreferenceLoss` and :class:`BradleyTerryLoss` bind these to a config's options
(``PreferenceLoss.from_config(cfg.loss_fn)``); they take per-pair arrays, not the trainer's
``LossFn`` batch. :class:`PreferencePairsLoss` is the ``LossFn`` a DPO driver trains with: each
pair is two adjacent rows of the batch (chosen at 2i, rejected at 2i + 1), it sums each row's
logprobs over its ``loss_mask`` (π, and ρ from ``ref_logprobs``; |y| is the row's mask count)
and asks the trainer to keep the two rows of a pair in one micro-batch
(``rows_per_group = 2``). :class:`BradleyTerryPairsLoss` is the same for a reward model: its
trainer passes each row's scalar score instead of token logprobs.

Adding a variant: write ``def _my(pc, pr, rc, rr, lc, lr, o) -> (loss [B], z [B])`` below, with
its formula in this docstring, and register it in :data:`PREFERENCE_LOSSES` (and in
:data:`REFERENCE_FREE` when it reads no ρ); add it to the config's ``loss_fn.type`` choices and
a float64 reference test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dockyard.core.registry import Registry
from dockyard.core.rl._xp import Array, namespace


@dataclass(frozen=True)
class PreferenceOptions:
    """Hyper-parameters: β (``beta``), ε (``label_smoothing``, cdpo), λ (``dpop_lambda``),
    α (``rdpo_alpha``), γ (``simpo_gamma``), λ (``orpo_lambda``)."""

    beta: float = 0.1
    label_smoothing: float = 0.0
    dpop_lambda: float = 50.0
    rdpo_alpha: float = 0.01
    simpo_gamma: float = 0.5
    orpo_lambda: float = 0.1


PrefFn = Callable[[Any, Array, Array, Any, Any, Any, Any, PreferenceOptions], tuple[Array, Array]]
PREFERENCE_LOSSES: Registry[PrefFn] = Registry("preference loss", "dockyard.preference_losses")
REFERENCE_FREE = frozenset({"simpo", "orpo"})
"""The variants that read no reference logprobs (ρ): a driver skips the reference pass."""


def _need(x: Any, what: str, variant: str) -> Any:
    if x is None:
        raise ValueError(f"preference loss {variant!r} needs {what}")
    return x


def _h(pc: Array, pr: Array, rc: Any, rr: Any, variant: str) -> Array:
    rc = _need(rc, "ref_chosen_logps", variant)
    rr = _need(rr, "ref_rejected_logps", variant)
    return (pc - rc) - (pr - rr)


@PREFERENCE_LOSSES.register("dpo")
def _dpo(xp, pc, pr, rc, rr, lc, lr, o):  # type: ignore[no-untyped-def]
    z = o.beta * _h(pc, pr, rc, rr, "dpo")
    return -xp.log_sigmoid(z), z


@PREFERENCE_LOSSES.register("cdpo")
def _cdpo(xp, pc, pr, rc, rr, lc, lr, o):  # type: ignore[no-untyped-def]
    z = o.beta * _h(pc, pr, rc, rr, "cdpo")
    eps = o.label_smoothing
    return -(1.0 - eps) * xp.log_sigmoid(z) - eps * xp.log_sigmoid(-z), z


@PREFERENCE_LOSSES.register("ipo")
def _ipo(xp, pc, pr, rc, rr, lc, lr, o):  # type: ignore[no-untyped-def]
    h = _h(pc, pr, rc, rr, "ipo")
    return (h - 1.0 / (2.0 * o.beta)) ** 2, h


@PREFERENCE_LOSSES.register("dpop")
def _dpop(xp, pc, pr, rc, rr, lc, lr, o):  # type: ignore[no-untyped-def]
    h = _h(pc, pr, rc, rr, "dpop")
    z = o.beta * (h - o.dpop_lambda * xp.maximum(rc - pc, 0.0))
    return -xp.log_sigmoid(z), z


@PREFERENCE_LOSSES.register("rdpo")
def _rdpo(xp, pc, pr, rc, rr, lc, lr, o):  # type: ignore[no-untyped-def]
    lc = _need(lc, "chosen_lengths", "rdpo")
    lr = _need(lr, "rejected_lengths", "rdpo")
    z = o.beta * _h(pc, pr, rc, rr, "rdpo") - o.rdpo_alpha * (lc - lr)
    return -xp.log_sigmoid(z), z


@PREFERENCE_LOSSES.register("simpo")
def _simpo(xp, pc, pr, rc, rr, lc, lr, o):  # type: ignore[no-untyped-def]
    lc = _need(lc, "chosen_lengths", "simpo")
    lr = _need(lr, "rejected_lengths", "simpo")
    z = o.beta * (pc / lc - pr / lr) - o.simpo_gamma
    return -xp.log_sigmoid(z), z


def _log_odds(xp: Any, mean_logp: Array) -> Array:
    lp = xp.minimum(mean_logp, -1e-6)  # log(1 - e^0) = -inf: keep strictly below 0
    return lp - xp.log(-xp.expm1(lp))


@PREFERENCE_LOSSES.register("orpo")
def _orpo(xp, pc, pr, rc, rr, lc, lr, o):  # type: ignore[no-untyped-def]
    lc = _need(lc, "chosen_lengths", "orpo")
    lr = _need(lr, "rejected_lengths", "orpo")
    mc, mr = pc / lc, pr / lr
    z = _log_odds(xp, mc) - _log_odds(xp, mr)
    return -mc - o.orpo_lambda * xp.log_sigmoid(z), z


def preference_loss(
    variant: str,
    chosen_logps: Array,
    rejected_logps: Array,
    ref_chosen_logps: Any = None,
    ref_rejected_logps: Any = None,
    *,
    chosen_lengths: Any = None,
    rejected_lengths: Any = None,
    sft_weight: float = 0.0,
    **options: float,
) -> tuple[Array, dict[str, Array]]:
    """Mean preference loss over B pairs (formulas in the module docstring).

    Args:
        variant: ``dpo``, ``cdpo``, ``ipo``, ``dpop``, ``rdpo``, ``simpo`` or ``orpo``.
        chosen_logps, rejected_logps: ``[B]`` summed response logprobs under the policy.
        ref_chosen_logps, ref_rejected_logps: ``[B]`` the same under the reference (not used by
            simpo / orpo).
        chosen_lengths, rejected_lengths: ``[B]`` response token counts (rdpo, simpo, orpo,
            SFT blend).
        sft_weight: weight of the chosen response's per-token NLL added to the loss.
        **options: fields of :class:`PreferenceOptions` (``beta``, ``label_smoothing``...).

    Returns:
        ``(loss, metrics)``: 0-d loss; metrics ``preference_accuracy`` (share of pairs with
        z > 0), ``preference_margin`` (mean z), ``loss``.
    """
    fn = PREFERENCE_LOSSES.get(variant)
    o = PreferenceOptions(**options)
    xp = namespace(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps)
    lc = None if chosen_lengths is None else xp.to_float(chosen_lengths, chosen_logps)
    lr = None if rejected_lengths is None else xp.to_float(rejected_lengths, chosen_logps)
    per_pair, z = fn(
        xp, chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, lc, lr, o
    )
    n = per_pair.shape[0]
    loss = xp.sum(per_pair) / max(n, 1)
    if sft_weight:
        lc = _need(lc, "chosen_lengths", "sft blend")
        loss = loss + sft_weight * xp.sum(-chosen_logps / lc) / max(n, 1)
    zs = xp.stop_gradient(z)
    metrics = {
        "preference_accuracy": xp.sum(xp.to_float(zs > 0, zs)) / max(n, 1),
        "preference_margin": xp.sum(zs) / max(n, 1),
        "loss": xp.stop_gradient(loss),
    }
    return loss, metrics


def bradley_terry_loss(
    chosen_rewards: Array, rejected_rewards: Array, margin: Any = None
) -> tuple[Array, dict[str, Array]]:
    """Reward-model loss mean(−log σ(r_c − r_r − m)) over ``[B]`` pairs; metrics
    ``rm_accuracy`` (share with r_c > r_r) and ``rm_margin`` (mean r_c − r_r)."""
    xp = namespace(chosen_rewards, rejected_rewards, margin)
    d = chosen_rewards - rejected_rewards
    z = d if margin is None else d - margin
    n = max(d.shape[0], 1)
    loss = -xp.sum(xp.log_sigmoid(z)) / n
    ds = xp.stop_gradient(d)
    return loss, {
        "rm_accuracy": xp.sum(xp.to_float(ds > 0, ds)) / n,
        "rm_margin": xp.sum(ds) / n,
        "loss": xp.stop_gradient(loss),
    }


@dataclass(frozen=True)
class PreferenceLoss:
    """:func:`preference_loss` with its variant and options bound (``loss_fn.type`` ``dpo`` ...
    ``orpo`` and the keys of ``PreferenceLossConfig``).

    Attributes:
        variant: a name in :data:`PREFERENCE_LOSSES`.
        options: keyword options of :func:`preference_loss` (``beta``, ``sft_weight``...).
    """

    variant: str = "dpo"
    options: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        PREFERENCE_LOSSES.get(self.variant)  # fail early on an unknown name

    def __call__(
        self,
        chosen_logps: Array,
        rejected_logps: Array,
        ref_chosen_logps: Any = None,
        ref_rejected_logps: Any = None,
        *,
        chosen_lengths: Any = None,
        rejected_lengths: Any = None,
    ) -> tuple[Array, dict[str, Array]]:
        """Arrays as in :func:`preference_loss` (``[B]`` each) -> ``(loss, metrics)``."""
        return preference_loss(
            self.variant,
            chosen_logps,
            rejected_logps,
            ref_chosen_logps,
            ref_rejected_logps,
            chosen_lengths=chosen_lengths,
            rejected_lengths=rejected_lengths,
            **dict(self.options or {}),
        )

    @classmethod
    def from_config(cls, loss_cfg: Any) -> PreferenceLoss:
        """Build from ``MasterConfig.loss_fn`` (a ``PreferenceLossConfig``)."""
        return cls(variant=loss_cfg.type, options=loss_cfg.loss_options())


@dataclass(frozen=True)
class BradleyTerryLoss:
    """:func:`bradley_terry_loss` with ``use_margin`` bound: with it false, a dataset's margin
    is ignored (m = 0); with it true, the margin passed (if any) is subtracted."""

    use_margin: bool = False

    def __call__(
        self, chosen_rewards: Array, rejected_rewards: Array, margin: Any = None
    ) -> tuple[Array, dict[str, Array]]:
        """``[B]`` rewards of the chosen / rejected responses, ``[B]`` margins or None."""
        return bradley_terry_loss(
            chosen_rewards, rejected_rewards, margin if self.use_margin else None
        )

    @classmethod
    def from_config(cls, loss_cfg: Any) -> BradleyTerryLoss:
        """Build from ``MasterConfig.loss_fn`` (a ``BradleyTerryLossConfig``)."""
        return cls(**loss_cfg.loss_options())


@dataclass(frozen=True)
class PreferencePairsLoss:
    """The trainer's ``LossFn`` for a preference loss over a batch of adjacent (chosen,
    rejected) rows: row 2i is pair i's chosen response, row 2i + 1 its rejected one.

    Per row: π = Σ_t m_t·log π_t over ``loss_mask`` m (the response tokens), |y| = Σ_t m_t, and
    ρ = Σ_t m_t·ref_logprobs_t when the batch has ``ref_logprobs`` (the reference-free simpo and
    orpo need none). The micro-batch's mean over its b/2 pairs is rescaled by (b/2) / N_pairs,
    N_pairs = ``num_sequences`` / 2 (the step's rows with a loss token: every row has one), so
    the micro-batches' losses sum to the step's mean. ``rows_per_group = 2`` asks the trainer to
    keep each pair in one micro-batch and on one rank (the torch worker does); a micro-batch with
    an odd number of rows is an error, never a silently mixed pair.

    Metrics: those of :func:`preference_loss` (``preference_accuracy``, ``preference_margin``:
    of the variant's z), ``logps_chosen`` / ``logps_rejected`` (mean π_c, π_r) and ``loss``.
    """

    loss: PreferenceLoss = field(default_factory=PreferenceLoss)
    rows_per_group: ClassVar[int] = 2

    def __call__(self, logprobs: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        xp = namespace(logprobs)
        lp = xp.promote_half(logprobs)
        b = lp.shape[0]
        if b % 2:
            raise ValueError(
                f"a preference loss needs whole (chosen, rejected) pairs in each micro-batch, got "
                f"{b} rows: the trainer must honour rows_per_group = 2 (the torch worker does; "
                "elsewhere, an even train_micro_batch_size over adjacent pairs)"
            )
        m = xp.to_float(batch["loss_mask"], lp)
        seq = xp.sum(xp.where(m > 0, lp, 0.0), axis=1)
        n = xp.sum(m, axis=1)
        ref = batch.get("ref_logprobs")
        rs = None if ref is None else xp.sum(xp.where(m > 0, xp.to_float(ref, lp), 0.0), axis=1)
        loss, metrics = self.loss(
            seq[0::2],
            seq[1::2],
            None if rs is None else rs[0::2],
            None if rs is None else rs[1::2],
            chosen_lengths=n[0::2],
            rejected_lengths=n[1::2],
        )
        total = batch.get("num_sequences")
        if total is not None:  # this micro-batch's share of the step's pairs
            loss = loss * (b / xp.maximum(total, 1.0))
        pairs = max(b // 2, 1)
        kept = xp.stop_gradient(seq)
        metrics = {
            **metrics,
            "logps_chosen": xp.sum(kept[0::2]) / pairs,
            "logps_rejected": xp.sum(kept[1::2]) / pairs,
            "loss": xp.stop_gradient(loss),
        }
        return loss, metrics

    @classmethod
    def from_config(cls, loss_cfg: Any) -> PreferencePairsLoss:
        """Build from ``MasterConfig.loss_fn`` (a ``PreferenceLossConfig``)."""
        return cls(PreferenceLoss.from_config(loss_cfg))


@dataclass(frozen=True)
class BradleyTerryPairsLoss:
    """The reward-model trainer's loss over a batch of adjacent (chosen, rejected) rows: row
    2i is pair i's chosen response, row 2i + 1 its rejected one, and the trainer passes each
    row's scalar score r (``scores [b]``), not token logprobs.

    ℓ = mean over the micro-batch's b/2 pairs of −log σ(r_c − r_r − m), m the pair's margin
    (the batch's per-row ``margin`` ``[b]``, read at the chosen row, only with
    ``use_margin``), rescaled by b / ``num_sequences`` (the step's rows) so that the
    micro-batches' losses sum to the step's mean. ``rows_per_group = 2``: each pair stays in
    one micro-batch; an odd micro-batch is an error.

    Metrics: those of :func:`bradley_terry_loss` (``rm_accuracy``, ``rm_margin``: of
    r_c − r_r), ``reward_chosen`` / ``reward_rejected`` (mean r_c, r_r) and ``loss``.
    """

    loss: BradleyTerryLoss = field(default_factory=BradleyTerryLoss)
    rows_per_group: ClassVar[int] = 2

    def __call__(self, scores: Any, batch: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        xp = namespace(scores)
        r = xp.promote_half(scores)
        b = r.shape[0]
        if b % 2:
            raise ValueError(
                f"a reward-model loss needs whole (chosen, rejected) pairs in each micro-batch, "
                f"got {b} rows: the trainer must honour rows_per_group = 2"
            )
        margin = batch.get("margin")
        m = None if margin is None else xp.to_float(margin, r)[0::2]
        loss, metrics = self.loss(r[0::2], r[1::2], m)
        total = batch.get("num_sequences")
        if total is not None:  # this micro-batch's share of the step's pairs
            loss = loss * (b / xp.maximum(total, 1.0))
        pairs = max(b // 2, 1)
        kept = xp.stop_gradient(r)
        return loss, {
            **metrics,
            "reward_chosen": xp.sum(kept[0::2]) / pairs,
            "reward_rejected": xp.sum(kept[1::2]) / pairs,
            "loss": xp.stop_gradient(loss),
        }

    @classmethod
    def from_config(cls, loss_cfg: Any) -> BradleyTerryPairsLoss:
        """Build from ``MasterConfig.loss_fn`` (a ``BradleyTerryLossConfig``)."""
        return cls(BradleyTerryLoss.from_config(loss_cfg))
