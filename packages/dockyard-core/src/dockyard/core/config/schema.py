"""``MasterConfig``: the whole run's configuration, validated in one place.

Sections: ``policy, loss_fn, grpo, env, data, cluster, logger, checkpointing, data_plane``.
Every model forbids unknown keys; every field's docstring is its description in
docs/configuration.md (``python -m dockyard.core.config.docs``). Rules that involve two
sections live in :meth:`MasterConfig._cross_checks`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from dockyard.core.config._base import ConfigModel
from dockyard.core.config.grpo import GRPOConfig
from dockyard.core.config.loss import PG_LOSS_TYPES, ClippedPGLossConfig, LossConfig
from dockyard.core.config.policy import PolicyConfig
from dockyard.core.config.sections import (
    CheckpointingConfig,
    ClusterConfig,
    DataConfig,
    DataPlaneConfig,
    EnvConfig,
    LoggerConfig,
)


class MasterConfig(ConfigModel):
    """A dockyard run."""

    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """The policy model, its trainer and its generation settings."""
    loss_fn: LossConfig = Field(default_factory=ClippedPGLossConfig)
    """The training loss (union keyed on ``type``; default ``clipped_pg``)."""
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    """The GRPO loop."""
    env: dict[str, EnvConfig] = Field(default_factory=dict)
    """Named environments (``env.<name>``)."""
    data: DataConfig = Field(default_factory=DataConfig)
    """Training and validation data."""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    """The Ray cluster."""
    logger: LoggerConfig = Field(default_factory=LoggerConfig)
    """Metrics logging."""
    checkpointing: CheckpointingConfig = Field(default_factory=CheckpointingConfig)
    """Checkpoints and resumption."""
    data_plane: DataPlaneConfig = Field(default_factory=DataPlaneConfig)
    """How weights and experience move between fleets."""

    @model_validator(mode="after")
    def _cross_checks(self) -> MasterConfig:
        errors = []
        g, p = self.grpo, self.policy
        if self.loss_fn.type in PG_LOSS_TYPES:
            per_step = g.num_prompts_per_step * g.num_generations_per_prompt
            if per_step % p.train_global_batch_size:
                errors.append(
                    f"grpo.num_prompts_per_step × grpo.num_generations_per_prompt ({per_step}) "
                    f"must be a multiple of policy.train_global_batch_size ({p.train_global_batch_size})"
                )
        if g.reward_shaping.enabled:
            l_max = g.reward_shaping.max_response_length or p.generation.max_new_tokens
            if g.reward_shaping.overlong_buffer_length > l_max:
                errors.append(
                    f"grpo.reward_shaping.overlong_buffer_length ({g.reward_shaping.overlong_buffer_length}) "
                    f"exceeds the maximum response length L_max ({l_max})"
                )
        if self.data.env_name is not None and self.env and self.data.env_name not in self.env:
            errors.append(
                f"data.env_name {self.data.env_name!r} is not an entry of env "
                f"(known: {', '.join(sorted(self.env))})"
            )
        if p.jax_cfg.enabled and p.lora.enabled:
            errors.append(
                "policy.lora.enabled is supported by the torch trainer only (policy.dtensor_cfg)"
            )
        world, tp = self.cluster.trainer_ranks, p.dtensor_cfg.tensor_parallel_size
        if p.jax_cfg.enabled and world > 1:
            errors.append(
                f"cluster.trainer_ranks={world} with policy.jax_cfg.enabled: the JAX trainer is "
                "one process that shards over its devices (policy.jax_cfg.fsdp_size / "
                "tensor_parallel_size); set cluster.trainer_ranks=1"
            )
        elif p.dtensor_cfg.enabled and world % tp:
            errors.append(
                f"policy.dtensor_cfg.tensor_parallel_size={tp} must divide "
                f"cluster.trainer_ranks={world} (the ranks form a data × tensor mesh): set "
                f"cluster.trainer_ranks to a multiple of {tp}"
            )
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def env_for_data(self) -> str | None:
        """The ``env`` entry that scores ``data`` (``data.env_name`` or the only entry)."""
        if self.data.env_name is not None:
            return self.data.env_name
        return next(iter(self.env)) if len(self.env) == 1 else None
