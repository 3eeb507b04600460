"""Configuration of the JAX policy worker (pydantic; keys follow the torch worker's and NeMo-RL's).

``JaxPolicyConfig(**d)`` from a dict (what a Ray actor receives) or
:meth:`JaxPolicyConfig.from_sections` from the run config's ``policy`` and ``loss_fn`` sections
and the loop values (seed, steps) that the driver's split (``dockyard.train.algorithms.configs``)
passes. Unknown keys are errors naming the key. The optimizer and the schedule are the run
config's own models (``dockyard.core.config.optim``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dockyard.core.config.loss import LossConfig
from dockyard.core.config.optim import OptimizerConfig, SchedulerConfig
from dockyard.core.config.policy import MoEConfig, PolicyConfig, read_chat_template


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MeshConfig(_Strict):
    """The device mesh ``(fsdp, tensor)``: parameters are sharded FSDP-style over ``fsdp`` (the
    batch is split over it too) and Megatron-style over ``tensor``."""

    fsdp_size: int = Field(-1, ge=-1, description="-1: all devices left after tensor_parallel_size")
    tensor_parallel_size: int = Field(1, ge=1)


class JaxPolicyConfig(_Strict):
    """The JAX policy worker's configuration."""

    model_name: str = Field(
        description="local folder of a Hugging Face Qwen2/Qwen3/Llama/Gemma 2/Gemma 3 (text) model"
    )
    tokenizer_name: str | None = Field(
        None, description="tokenizer folder that checkpoints carry (default: model_name)"
    )
    chat_template: str | None = Field(
        None,
        description="policy.tokenizer.chat_template, for the tokenizer checkpoints carry: None "
        "keeps the tokenizer's own; Jinja text (or a path to a .jinja file) becomes its "
        "chat_template.jinja; 'plain': no chat template",
    )
    precision: Literal["float32", "bfloat16", "auto"] = Field(
        "auto",
        description="compute dtype (parameters and optimizer state stay float32); "
        "auto: bfloat16 on GPU/TPU, float32 on CPU",
    )
    train_micro_batch_size: int = Field(4, ge=1, description="sequences per training micro-batch")
    logprob_batch_size: int = Field(8, ge=1, description="sequences per inference micro-batch")
    max_grad_norm: float | None = Field(1.0, description="clip the global grad norm (None: off)")
    generation_temperature: float = Field(
        1.0, gt=0, description="τ: logprobs use log softmax(z/τ), as the engine samples"
    )
    reference_policy: bool = Field(True, description="keep the initial weights as the reference")
    pad_to_multiple: int = Field(
        32, ge=1, description="pad micro-batch lengths up to a multiple of this (fewer compiles)"
    )
    seed: int = 0
    optimizer: OptimizerConfig = Field(
        default_factory=OptimizerConfig, description="adamw / adam / sgd (policy.optimizer)"
    )
    scheduler: SchedulerConfig = Field(
        default_factory=SchedulerConfig,
        description="constant / linear / cosine after warm-up (policy.scheduler; linear and "
        "cosine need total_steps)",
    )
    mesh: MeshConfig = Field(default_factory=MeshConfig)
    moe: MoEConfig = Field(
        default_factory=MoEConfig,
        description="Mixture-of-Experts models (Qwen3-MoE, Qwen3-Next) only (core policy.moe); "
        "expert_parallel_size: 1 or the fsdp axis",
    )

    @classmethod
    def from_sections(
        cls,
        policy: PolicyConfig,
        loss_fn: LossConfig | None = None,
        *,
        seed: int,
        max_steps: int,
    ) -> JaxPolicyConfig:
        """From the run config's ``policy`` (``policy.jax_cfg.enabled``) and ``loss_fn``
        sections.

        Every ``policy`` key the JAX worker can honour is mapped (the table in
        ``docs/packages/jax.md``); ``reference_policy`` is on when
        ``loss_fn.reference_policy_kl_penalty`` β > 0, ``seed`` is the run's seed
        (``grpo.seed``) and an unset ``scheduler.total_steps`` is ``max_steps``
        (``grpo.max_num_steps``); a ``.jinja`` file named by ``policy.tokenizer.chat_template``
        is read here (the worker need not see it). Keys it cannot honour are errors naming the
        key and the fix: ``precision: float16``, ``lora.enabled``. (A mesh larger than the
        devices JAX sees is refused when the worker builds it.)"""
        p = policy
        if p.precision == "float16":
            raise ValueError("policy.precision=float16 is not supported by the JAX worker: "
                             "use bfloat16 or float32")  # fmt: skip
        if p.lora.enabled:
            raise ValueError("policy.lora.enabled is not supported by the JAX worker: set "
                             "policy.lora.enabled=false or train with policy.dtensor_cfg")  # fmt: skip
        beta = float(getattr(loss_fn, "reference_policy_kl_penalty", 0.0) or 0.0)
        return cls(
            model_name=p.model_name,
            tokenizer_name=p.tokenizer.name,
            chat_template=read_chat_template(p.tokenizer.chat_template),
            precision=p.precision,
            train_micro_batch_size=p.train_micro_batch_size,
            logprob_batch_size=p.logprob_batch_size or p.train_micro_batch_size,
            max_grad_norm=p.max_grad_norm,
            generation_temperature=p.generation.temperature or 1.0,
            reference_policy=beta > 0.0,
            seed=int(seed),
            optimizer=p.optimizer,
            scheduler=p.scheduler.model_copy(
                update={"total_steps": p.scheduler.total_steps or max(int(max_steps), 1)}
            ),
            mesh=MeshConfig(
                fsdp_size=p.jax_cfg.fsdp_size,
                tensor_parallel_size=p.jax_cfg.tensor_parallel_size,
            ),
            moe=p.moe,
        )

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (what a Ray actor receives); ``JaxPolicyConfig(**d)`` rebuilds it."""
        return self.model_dump(mode="json")
