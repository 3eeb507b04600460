"""``loss_fn``: the training loss, a union keyed on ``type`` (default ``clipped_pg``).

Policy-gradient losses (``clipped_pg``, ``cispo``) share the KL and importance-sampling keys
and use NeMo-RL's key names; preference (``dpo`` ... ``orpo``), ``nll`` (SFT),
``distillation`` and ``bradley_terry`` (reward models) have their own. Formulas:
docs/algorithms.md and ``dockyard.core.rl``.

Both loss families are open: a policy-gradient loss another package registers under the
entry-point group ``dockyard.losses`` is a ``type`` of :class:`PluginPGLossConfig` (the shared
keys, plus its ``options``); a preference loss registered under ``dockyard.preference_losses``
is a ``type`` of :class:`PreferenceLossConfig`. An unknown ``type`` names the closest known one.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator, model_validator

from dockyard.core.config._base import ConfigModel, tagged
from dockyard.core.registry import closest
from dockyard.core.rl.losses import POLICY_LOSSES
from dockyard.core.rl.preference import PREFERENCE_LOSSES


class _PGLossBase(ConfigModel):
    reference_policy_kl_penalty: float = Field(default=0.0, ge=0)
    """β: weight of the per-token KL(π ‖ π_ref) penalty in the loss (0: no reference model needed)."""
    reference_policy_kl_type: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator, with x = log π_ref − log π: k1 = −x, k2 = x²/2, k3 = eˣ − x − 1."""
    token_level_loss: bool = True
    """Aggregate over all loss tokens of the step (true, DAPO) or mean per sequence then over sequences (false, GRPO paper)."""
    loss_agg_mode: (
        Literal[
            "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
        ]
        | None
    ) = None
    """Explicit aggregation mode overriding ``token_level_loss`` (``seq-mean-token-sum-norm`` is Dr.GRPO's, with L = ``policy.generation.max_new_tokens``)."""
    use_importance_sampling_correction: bool = False
    """Multiply each token's loss by w = exp(log π_prev − log π_gen) (engine/trainer mismatch and staleness)."""
    truncated_importance_sampling_type: Literal["tis", "icepop", "seq-mask-tis"] = "tis"
    """How w is bounded: ``tis`` clamps to [w_min, w_max], ``icepop`` masks tokens outside, ``seq-mask-tis`` masks sequences whose geometric-mean w is outside."""
    truncated_importance_sampling_ratio: float | None = Field(default=None, gt=0)
    """w_max, the upper bound on the IS weight (null: none; required by icepop / seq-mask-tis)."""
    truncated_importance_sampling_ratio_min: float | None = Field(default=None, ge=0)
    """w_min, the lower bound on the IS weight (null: 0)."""

    @model_validator(mode="after")
    def _is_checks(self) -> _PGLossBase:
        errors = []
        if not self.use_importance_sampling_correction:
            set_keys = self.explicitly_set(
                "truncated_importance_sampling_type",
                "truncated_importance_sampling_ratio",
                "truncated_importance_sampling_ratio_min",
            )
            if set_keys:
                errors.append(
                    f"loss_fn.{set_keys[0]} is set but loss_fn.use_importance_sampling_correction "
                    "is false, so it would be ignored: enable the correction or remove the key"
                )
        elif (
            self.truncated_importance_sampling_type in ("icepop", "seq-mask-tis")
            and self.truncated_importance_sampling_ratio is None
        ):
            errors.append(
                f"loss_fn.truncated_importance_sampling_type {self.truncated_importance_sampling_type!r} "
                "needs loss_fn.truncated_importance_sampling_ratio (w_max)"
            )
        lo, hi = (
            self.truncated_importance_sampling_ratio_min,
            self.truncated_importance_sampling_ratio,
        )
        if lo is not None and hi is not None and lo >= hi:
            errors.append(
                "loss_fn.truncated_importance_sampling_ratio_min must be smaller than "
                "loss_fn.truncated_importance_sampling_ratio"
            )
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def agg_mode(self) -> str:
        """The aggregation mode: ``loss_agg_mode`` or the one ``token_level_loss`` implies."""
        if self.loss_agg_mode is not None:
            return self.loss_agg_mode
        return "token-mean" if self.token_level_loss else "seq-mean-token-mean"

    def _common_options(self, norm_length: float | None) -> dict[str, Any]:
        return {
            "kl_beta": self.reference_policy_kl_penalty,
            "kl_type": self.reference_policy_kl_type,
            "is_correction": self.use_importance_sampling_correction,
            "is_type": self.truncated_importance_sampling_type,
            "is_ratio_max": self.truncated_importance_sampling_ratio,
            "is_ratio_min": self.truncated_importance_sampling_ratio_min,
            "agg": self.agg_mode(),
            "norm_length": norm_length,
        }


class ClippedPGLossConfig(_PGLossBase):
    """PPO / GRPO / DAPO / GSPO clipped policy gradient."""

    type: Literal["clipped_pg"] = "clipped_pg"
    """Loss variant."""
    ratio_clip_min: float = Field(default=0.2, ge=0, le=1)
    """ε_low: the ratio is clipped below at 1 − ε_low."""
    ratio_clip_max: float = Field(default=0.2, ge=0)
    """ε_high: the ratio is clipped above at 1 + ε_high (ε_high > ε_low is DAPO's clip-higher, e.g. 0.28)."""
    ratio_clip_c: float | None = Field(default=None, gt=1)
    """c: dual-clip constant (> 1) bounding the loss of negative-advantage tokens at c·|A|; null: off."""
    sequence_level_importance_ratios: bool = False
    """GSPO: one ratio per sequence, the geometric mean of its token ratios (use with token_level_loss: false)."""

    @model_validator(mode="after")
    def _gspo_checks(self) -> ClippedPGLossConfig:
        if self.sequence_level_importance_ratios and self.agg_mode() == "token-mean":
            raise ValueError(
                "loss_fn.sequence_level_importance_ratios (GSPO) needs a sequence-level "
                "aggregation: set loss_fn.token_level_loss: false"
            )
        return self

    def loss_options(self, norm_length: float | None = None) -> dict[str, Any]:
        """Keyword options for ``dockyard.core.rl.clipped_pg_loss``."""
        return {
            "eps_low": self.ratio_clip_min,
            "eps_high": self.ratio_clip_max,
            "dual_clip_c": self.ratio_clip_c,
            "sequence_level_ratio": self.sequence_level_importance_ratios,
            **self._common_options(norm_length),
        }


class CISPOLossConfig(_PGLossBase):
    """CISPO: clip the importance weight, keep every token's gradient (MiniMax-M1)."""

    type: Literal["cispo"] = "cispo"
    """Loss variant."""
    ratio_clip_min: float = Field(default=1.0, ge=0, le=1)
    """ε_low of the weight clip (1.0: no lower bound, as in the paper)."""
    ratio_clip_max: float = Field(default=0.28, ge=0)
    """ε_high: the weight is clipped above at 1 + ε_high."""

    def loss_options(self, norm_length: float | None = None) -> dict[str, Any]:
        """Keyword options for ``dockyard.core.rl.cispo_loss``."""
        return {
            "eps_low": self.ratio_clip_min,
            "eps_high": self.ratio_clip_max,
            **self._common_options(norm_length),
        }


class PluginPGLossConfig(_PGLossBase):
    """A policy-gradient loss another package registers under the entry-point group ``dockyard.losses`` (``dockyard.core.rl.POLICY_LOSSES``): ``fn(logprobs, advantages, mask, *, prev_logprobs, gen_logprobs, ref_logprobs, num_loss_tokens, num_sequences, **options) -> (loss, metrics)``; the GRPO driver trains it like ``clipped_pg``."""

    type: str
    """Its registered name."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Its own keyword options, after the shared ones (``kl_beta``, ``kl_type``, ``is_correction``, ``is_type``, ``is_ratio_max``, ``is_ratio_min``, ``agg``, ``norm_length``)."""

    @field_validator("type")
    @classmethod
    def _registered(cls, v: str) -> str:
        if v not in POLICY_LOSSES:
            raise ValueError(f"loss_fn.type: {unknown_loss(v)}")
        return v

    def loss_options(self, norm_length: float | None = None) -> dict[str, Any]:
        """The shared options, then its own."""
        return {**self._common_options(norm_length), **self.options}


PG_LOSS_TYPES = ("clipped_pg", "cispo")
PREFERENCE_LOSS_TYPES = ("dpo", "cdpo", "ipo", "dpop", "rdpo", "simpo", "orpo")
"""The built-in ``loss_fn.type`` values of :class:`PreferenceLossConfig` (the DPO driver's)."""


class PreferenceLossConfig(ConfigModel):
    """DPO and its variants over (chosen, rejected) pairs."""

    BUILTIN_TAGS: ClassVar[tuple[str, ...]] = PREFERENCE_LOSS_TYPES  # and registered ones

    type: str
    """Preference loss variant: ``dpo``, ``cdpo``, ``ipo``, ``dpop``, ``rdpo``, ``simpo``, ``orpo``, or one registered under the entry-point group ``dockyard.preference_losses`` (called with the keys below)."""
    beta: float = Field(default=0.1, gt=0)
    """β: inverse temperature of the implicit reward (SimPO: reward scale, typically 2.0)."""
    label_smoothing: float = Field(default=0.0, ge=0, lt=0.5)
    """ε: assumed label-flip probability (cdpo)."""
    dpop_lambda: float = Field(default=50.0, ge=0)
    """λ: weight of DPOP's penalty on lowering the chosen response's likelihood."""
    rdpo_alpha: float = Field(default=0.01, ge=0)
    """α: R-DPO's length regulariser on |y_c| − |y_r|."""
    simpo_gamma: float = Field(default=0.5, ge=0)
    """γ: SimPO's target reward margin."""
    orpo_lambda: float = Field(default=0.1, ge=0)
    """λ: weight of ORPO's odds-ratio term."""
    sft_weight: float = Field(default=0.0, ge=0)
    """Weight of the chosen response's per-token NLL added to the loss (SFT blend / RPO)."""

    @field_validator("type")
    @classmethod
    def _registered(cls, v: str) -> str:
        if v not in PREFERENCE_LOSSES:
            raise ValueError(f"loss_fn.type: {unknown_loss(v)}")
        return v

    def loss_options(self) -> dict[str, Any]:
        """Keyword options for ``dockyard.core.rl.preference_loss`` (after the variant)."""
        return {
            "beta": self.beta,
            "label_smoothing": self.label_smoothing,
            "dpop_lambda": self.dpop_lambda,
            "rdpo_alpha": self.rdpo_alpha,
            "simpo_gamma": self.simpo_gamma,
            "orpo_lambda": self.orpo_lambda,
            "sft_weight": self.sft_weight,
        }


class NLLLossConfig(ConfigModel):
    """Supervised fine-tuning: masked negative log-likelihood."""

    type: Literal["nll"] = "nll"
    """Loss variant."""
    token_level_loss: bool = True
    """Mean over all loss tokens (true) or per sequence then over sequences (false)."""

    def loss_options(self) -> dict[str, Any]:
        """Keyword options for ``dockyard.core.rl.masked_nll``."""
        return {"agg": "token-mean" if self.token_level_loss else "seq-mean-token-mean"}


class TeacherConfig(ConfigModel):
    """One frozen teacher of a multi-teacher distillation (``loss_fn.teachers``) or of the OPD advantage (``grpo.adv_estimator.teachers``)."""

    model_name: str
    """Teacher model name or folder: a causal LM with its tokenizer, loaded frozen by the torch trainer beside the student. Its tokenizer may differ from the student's: the trainer then aligns it to the student's tokens through the text (``dockyard.core.rl.cross_tokenizer``)."""
    weight: float = Field(default=1.0, gt=0)
    """w_k: the teacher's weight (normalised over the teachers that score a token; ``select_teacher``: its prior)."""


class DistillationLossConfig(ConfigModel):
    """On-policy top-k distillation: KL(p_teacher ‖ q_student) (or reverse) on the student's samples (``dockyard distill``), from one teacher of the student's vocabulary or several of any tokenizer."""

    type: Literal["distillation"] = "distillation"
    """Loss variant."""
    teacher_model_name: str | None = None
    """One teacher, name or folder: a frozen causal LM with the student's vocabulary, loaded by the torch trainer beside the student (``dockyard distill``; the GRPO driver refuses this loss). Set this or ``teachers``."""
    teachers: list[TeacherConfig] | None = Field(default=None, min_length=1)
    """Several teachers (or one with another tokenizer), each ``{model_name, weight}``: their distributions are aligned to the student's tokens through the text and combined by ``teacher_combination``. Set this or ``teacher_model_name``."""
    teacher_combination: Literal["weighted_sum", "average_logits", "select_teacher"] = (
        "weighted_sum"
    )
    """How ``teachers`` make one target p̄ per token: ``weighted_sum`` p̄ = Σ_k w̃_k p_k (the mixture), ``average_logits`` p̄ ∝ exp(Σ_k w̃_k log p_k), ``select_teacher`` per sample the teacher of highest w_k·P_Tk(response)."""
    topk: int = Field(default=64, ge=1)
    """k: teacher logits kept per position."""
    temperature: float = Field(default=1.0, gt=0)
    """τ applied to teacher and student logits."""
    kl_type: Literal["forward", "reverse"] = "forward"
    """KL direction: forward KL(p_T ‖ q_S) over the teacher's top-k (mass-covering), or reverse KL(q_S ‖ p_T) with both renormalised over the teacher's top-k ids (mode-seeking)."""

    @model_validator(mode="after")
    def _one_kind_of_teacher(self) -> DistillationLossConfig:
        if (self.teacher_model_name is None) == (self.teachers is None):
            raise ValueError(
                "set exactly one of loss_fn.teacher_model_name (one teacher of the "
                "student's vocabulary) and loss_fn.teachers (a list of {model_name, weight}: "
                "several teachers, or teachers with other tokenizers)"
            )
        if self.teachers is None and "teacher_combination" in self.model_fields_set:
            raise ValueError(
                "loss_fn.teacher_combination is set but loss_fn.teachers is not, so it would "
                "be ignored: list the teachers in loss_fn.teachers or remove the key"
            )
        return self

    def teacher_list(self) -> list[TeacherConfig]:
        """The teachers, ``teacher_model_name`` as a list of one."""
        if self.teachers is not None:
            return list(self.teachers)
        return [TeacherConfig(model_name=str(self.teacher_model_name))]

    def loss_options(self) -> dict[str, Any]:
        """Keyword options for ``dockyard.core.rl.DistillationLoss``."""
        return {"topk": self.topk, "temperature": self.temperature, "kl_type": self.kl_type}


class BradleyTerryLossConfig(ConfigModel):
    """Reward-model training: −log σ(r_chosen − r_rejected − margin)."""

    type: Literal["bradley_terry"] = "bradley_terry"
    """Loss variant."""
    use_margin: bool = False
    """Subtract the dataset's per-pair margin m (if it has one)."""

    def loss_options(self) -> dict[str, Any]:
        """Options of ``dockyard.core.rl.BradleyTerryLoss``."""
        return {"use_margin": self.use_margin}


_OWN_MEMBERS = ("clipped_pg", "cispo", "nll", "distillation", "bradley_terry")


def is_policy_gradient(loss_cfg: Any) -> bool:
    """``loss_fn`` is a policy-gradient loss (built-in or registered): the GRPO driver's."""
    return isinstance(loss_cfg, _PGLossBase)


def unknown_loss(name: str) -> str:
    """The message for a ``loss_fn.type`` no family knows: every known type, the closest first."""
    known = sorted({*_OWN_MEMBERS, *POLICY_LOSSES.names(), *PREFERENCE_LOSSES.names()})
    return (
        f"unknown loss {name!r}{closest(name, known)}; known: {', '.join(known)} (a package adds "
        "a policy-gradient loss under the entry-point group 'dockyard.losses', a preference "
        "loss under 'dockyard.preference_losses')"
    )


def _loss_tag(v: Any) -> str:
    """The union member of a ``loss_fn`` value: a built-in's own; a preference loss's (built-in
    or registered) ``dpo``; else the plugin policy-gradient loss's (whose check names what is known)."""
    name = v.get("type") if isinstance(v, dict) else getattr(v, "type", None)
    if name in _OWN_MEMBERS:
        return name
    if isinstance(name, str) and name in PREFERENCE_LOSSES:
        return "dpo"  # the preference member's tag (errors inside it are located by it)
    return "plugin"


LossConfig = Annotated[
    Annotated[
        Annotated[ClippedPGLossConfig, Tag("clipped_pg")]
        | Annotated[CISPOLossConfig, Tag("cispo")]
        | Annotated[PreferenceLossConfig, Tag("dpo")]
        | Annotated[NLLLossConfig, Tag("nll")]
        | Annotated[DistillationLossConfig, Tag("distillation")]
        | Annotated[BradleyTerryLossConfig, Tag("bradley_terry")]
        | Annotated[PluginPGLossConfig, Tag("plugin")],
        Discriminator(_loss_tag),
    ],
    BeforeValidator(tagged("clipped_pg")),
]
