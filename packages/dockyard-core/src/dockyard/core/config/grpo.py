"""``grpo``: the GRPO loop — batch shape (P prompts × G samples), advantage estimator,
asynchrony bound, DAPO's overlong shaping / filtering and dynamic sampling, validation."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)

from dockyard.core.config._base import ConfigModel, tagged
from dockyard.core.config.loss import TeacherConfig
from dockyard.core.rl.advantages import ADVANTAGE_ESTIMATORS


class _AdvBase(ConfigModel):
    advantage_clip: float | None = Field(default=None, gt=0)
    """Clip advantages to [−c, c] after estimation (null: no clipping)."""

    def estimator_options(self) -> dict[str, Any]:
        """Keyword options for ``dockyard.core.rl.compute_advantages``."""
        return {}


class GRPOAdvConfig(_AdvBase):
    """GRPO: A_i = (r_i − mean_group r) / (σ_group + eps)."""

    name: Literal["grpo"] = "grpo"
    """Advantage estimator."""
    normalize_rewards: bool = True
    """Divide by the group's reward standard deviation σ (false: Dr.GRPO-style, no σ)."""
    use_leave_one_out_baseline: bool = False
    """Baseline b_i = mean of the *other* samples of the group (RLOO-style)."""

    def estimator_options(self) -> dict[str, Any]:
        return {
            "normalize_std": self.normalize_rewards,
            "leave_one_out": self.use_leave_one_out_baseline,
        }


class DrGRPOAdvConfig(_AdvBase):
    """Dr.GRPO: A_i = r_i − mean_group r."""

    name: Literal["dr_grpo"] = "dr_grpo"
    """Advantage estimator."""


class RLOOAdvConfig(_AdvBase):
    """RLOO: A_i = r_i − mean_{j≠i} r_j."""

    name: Literal["rloo"] = "rloo"
    """Advantage estimator."""


class ReinforcePPAdvConfig(_AdvBase):
    """REINFORCE++: rewards (minus the group mean) whitened over the batch's valid tokens."""

    name: Literal["reinforce_plus_plus"] = "reinforce_plus_plus"
    """Advantage estimator."""
    minus_baseline: bool = True
    """Subtract the group mean before whitening (REINFORCE++-baseline)."""

    def estimator_options(self) -> dict[str, Any]:
        return {"group_baseline": self.minus_baseline}


class GDPOAdvConfig(_AdvBase):
    """GDPO: per-component group-normalised advantages, summed, whitened over the batch."""

    name: Literal["gdpo"] = "gdpo"
    """Advantage estimator."""
    reward_components: list[str] | None = Field(default=None, min_length=1)
    """Reward component names to use (e.g. ``[reward/tests, reward/format]``); null: all the environment reports."""

    def estimator_options(self) -> dict[str, Any]:
        return {"components": self.reward_components}


class OPDAdvConfig(_AdvBase):
    """On-policy distillation advantage: A_t = Σ_k w̃_k log π_Tk(y_t) − log π_θ(y_t) + λ·A_grpo, from several frozen teachers on the trainer (``dockyard train``, torch trainer, a policy-gradient ``loss_fn``)."""

    name: Literal["opd"] = "opd"
    """Advantage estimator."""
    teachers: list[TeacherConfig] = Field(min_length=1)
    """The teachers T_k, each ``{model_name, weight}`` (w_k, normalised per token); a teacher with another tokenizer is aligned to the student's tokens through the text."""
    reward_weight: float = Field(default=0.0, ge=0)
    """λ: weight of the environment reward's GRPO group advantage added to every token's (0: pure distillation)."""
    normalize_rewards: bool = True
    """Divide the reward part by the group's reward standard deviation σ (GRPO; false: Dr.GRPO-style)."""

    def estimator_options(self) -> dict[str, Any]:
        return {"reward_weight": self.reward_weight, "normalize_std": self.normalize_rewards}


class PluginAdvConfig(_AdvBase):
    """An advantage estimator another package registers under the entry-point group ``dockyard.advantages`` (``dockyard.core.registry``): ``fn(rewards [P, G], valid [P, G], **options) -> [P, G]``."""

    name: str
    """Its registered name."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Its keyword options."""

    @field_validator("name")
    @classmethod
    def _registered(cls, v: str) -> str:
        if v not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"grpo.adv_estimator.name: {ADVANTAGE_ESTIMATORS.unknown(v)}")
        return v

    def estimator_options(self) -> dict[str, Any]:
        return dict(self.options)


_BUILTIN_ADV = {"grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "gdpo", "opd"}


def _adv_tag(v: Any) -> str:
    """The union member of an ``adv_estimator`` value: a built-in's own, else the plugin's."""
    name = v.get("name") if isinstance(v, dict) else getattr(v, "name", None)
    return name if name in _BUILTIN_ADV else "plugin"


AdvEstimatorConfig = Annotated[
    Annotated[
        Annotated[GRPOAdvConfig, Tag("grpo")]
        | Annotated[DrGRPOAdvConfig, Tag("dr_grpo")]
        | Annotated[RLOOAdvConfig, Tag("rloo")]
        | Annotated[ReinforcePPAdvConfig, Tag("reinforce_plus_plus")]
        | Annotated[GDPOAdvConfig, Tag("gdpo")]
        | Annotated[OPDAdvConfig, Tag("opd")]
        | Annotated[PluginAdvConfig, Tag("plugin")],
        Discriminator(_adv_tag),
    ],
    BeforeValidator(tagged("grpo", key="name")),
]


class AsyncGRPOConfig(ConfigModel):
    enabled: bool = False
    """Generate and train concurrently (false: synchronous GRPO, same code path with age bound 0)."""
    max_trajectory_age_steps: int = Field(default=1, ge=0)
    """Train on a trajectory only if its oldest token's policy version is at most this many steps behind the trainer."""
    in_flight_weight_updates: bool = False
    """Update engine weights mid-generation (a trajectory may then span several policy versions)."""

    @model_validator(mode="after")
    def _only_when_enabled(self) -> AsyncGRPOConfig:
        if not self.enabled:
            bad = [
                k
                for k in self.explicitly_set("max_trajectory_age_steps", "in_flight_weight_updates")
                if getattr(self, k) not in (0, False)
            ]
            if bad:
                raise ValueError(
                    f"grpo.async_grpo.{bad[0]} is set but grpo.async_grpo.enabled is false, so "
                    "it would be ignored: set grpo.async_grpo.enabled: true or remove it"
                )
        return self

    def age_bound(self) -> int:
        """The staleness bound the loop enforces (0 when asynchrony is off)."""
        return self.max_trajectory_age_steps if self.enabled else 0


class RewardShapingConfig(ConfigModel):
    enabled: bool = False
    """Add DAPO's soft overlong penalty to the reward."""
    overlong_buffer_length: PositiveInt = 128
    """L_cache: responses longer than L_max − L_cache are penalised linearly, down to −1 at L_max."""
    overlong_buffer_penalty: float = Field(default=1.0, ge=0)
    """Scale of the overlong penalty."""
    max_response_length: PositiveInt | None = None
    """L_max; null uses ``policy.generation.max_new_tokens``."""


class GRPOConfig(ConfigModel):
    num_prompts_per_step: PositiveInt = 32
    """P: prompts (groups) per training step."""
    num_generations_per_prompt: PositiveInt = 16
    """G: samples per prompt (the group size)."""
    max_num_steps: PositiveInt = 1000
    """Training steps to run."""
    max_num_epochs: PositiveInt = 1
    """Passes over the training data (the run stops at whichever limit comes first)."""
    max_rollout_turns: PositiveInt = 1
    """Turns per episode for multi-turn environments (1: single-turn)."""
    seed: int = 42
    """Seed for data order and sampling."""
    adv_estimator: AdvEstimatorConfig = Field(default_factory=GRPOAdvConfig)
    """Advantage estimator (union keyed on ``name``)."""
    async_grpo: AsyncGRPOConfig = Field(default_factory=AsyncGRPOConfig)
    """Asynchronous GRPO."""
    overlong_filtering: bool = False
    """Mask truncated responses (finish reason ``length``) out of the loss (DAPO)."""
    reward_shaping: RewardShapingConfig = Field(default_factory=RewardShapingConfig)
    """DAPO's soft overlong punishment."""
    use_dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal and sample more until P informative groups are collected (DAPO)."""
    dynamic_sampling_max_gen_batches: PositiveInt = 10
    """Give up (error) after this many generation batches without P informative groups."""
    val_period: int = Field(default=0, ge=0)
    """Validate every this many steps (0: never; the last step only with ``val_at_end``)."""
    val_at_start: bool = False
    """Validate before the first step (logged as step 0)."""
    val_at_end: bool = False
    """Validate after the last step (also when ``val_period`` does not divide it)."""
    max_val_samples: PositiveInt = 256
    """Validation prompts per validation run."""
    val_temperature: float | None = Field(default=None, ge=0)
    """Sampling temperature of validation (null: ``policy.generation.temperature``; 0: greedy)."""
    val_samples_per_prompt: PositiveInt = 4
    """Samples per validation prompt; the reported pass rate is their mean (1 with greedy decoding)."""

    @model_validator(mode="after")
    def _checks(self) -> GRPOConfig:
        if (
            "dynamic_sampling_max_gen_batches" in self.model_fields_set
            and not self.use_dynamic_sampling
        ):
            raise ValueError(
                "grpo.dynamic_sampling_max_gen_batches is set but grpo.use_dynamic_sampling is "
                "false, so it would be ignored: enable dynamic sampling or remove the key"
            )
        if self.val_temperature == 0 and self.val_samples_per_prompt > 1:
            raise ValueError(
                f"grpo.val_samples_per_prompt={self.val_samples_per_prompt} with "
                "grpo.val_temperature=0: greedy decoding gives the same sample every time, so "
                "set grpo.val_samples_per_prompt: 1 (or a temperature above 0)"
            )
        return self
