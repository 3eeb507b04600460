"""Configuration of the torch policy worker (pydantic; key names follow NeMo-RL's ``policy``).

Build it from a dict (what a Ray actor receives): ``TorchPolicyConfig.model_validate(d)`` or
``TorchPolicyConfig(**d)``, or with :meth:`TorchPolicyConfig.from_sections` from the run
config's ``policy`` and ``loss_fn`` sections and the loop values (seed, steps, the OPD teachers)
that the driver's split (``dockyard.train.algorithms.configs``) passes; this package owns that
mapping. Unknown keys are errors naming the key. The optimizer and the schedule are the run
config's own models (``dockyard.core.config.optim``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dockyard.core.config.loss import LossConfig, TeacherConfig
from dockyard.core.config.optim import OptimizerConfig, SchedulerConfig
from dockyard.core.config.policy import MoEConfig, PolicyConfig, read_chat_template


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoraConfig(_Strict):
    """LoRA via peft (Hu et al. 2021): W' = W + (α/r)·B·A, only A and B train."""

    enabled: bool = False
    rank: int = Field(8, ge=1, description="r")
    alpha: float = Field(16.0, gt=0, description="α")
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="module names to adapt (peft's target_modules)",
    )
    export: Literal["merged", "adapters"] = Field(
        "merged", description="what export_weights yields: merged full weights or A/B adapters"
    )


class SequencePackingConfig(_Strict):
    """Pack sequences first-fit-decreasing into rows of at most ``*_mb_tokens`` tokens."""

    enabled: bool = False
    train_mb_tokens: int = Field(4096, ge=1, description="token budget of one training row")
    logprob_mb_tokens: int = Field(8192, ge=1, description="token budget of one inference row")


class DynamicBatchingConfig(_Strict):
    """Group sequences (sorted by length) into padded micro-batches of at most N·T_max tokens."""

    enabled: bool = False
    train_mb_tokens: int = Field(4096, ge=1)
    logprob_mb_tokens: int = Field(8192, ge=1)


class FSDPConfig(_Strict):
    """FSDP2 (``torch.distributed.fsdp.fully_shard``) over the data-parallel ranks."""

    enabled: bool | None = Field(
        None, description="shard parameters; None: when there are > 1 data-parallel ranks"
    )
    reshard_after_forward: bool = True
    cpu_offload: bool = Field(
        False,
        description="keep parameter shards, gradients and optimizer state in CPU memory "
        "(FSDP2 CPUOffloadPolicy; the step runs on CPU); on a CPU device they are there already",
    )


class TorchPolicyConfig(_Strict):
    """The torch policy worker's configuration."""

    model_name: str = Field(description="local folder of a Hugging Face causal LM")
    tokenizer_name: str | None = Field(None, description="tokenizer folder (default: model_name)")
    chat_template: str | None = Field(
        None,
        description="policy.tokenizer.chat_template, for the exported tokenizer: None keeps "
        "the tokenizer's own; Jinja text (or a path to a .jinja file) becomes its "
        "chat_template.jinja; 'plain': the export has no chat template",
    )
    precision: Literal["float32", "bfloat16", "auto"] = Field(
        "auto",
        description="parameter/compute dtype; auto: bfloat16 mixed precision on CUDA, "
        "float32 on CPU",
    )
    train_micro_batch_size: int = Field(4, ge=1, description="sequences per training micro-batch")
    logprob_batch_size: int = Field(8, ge=1, description="sequences per inference micro-batch")
    max_grad_norm: float | None = Field(1.0, description="clip the global grad norm (None: off)")
    generation_temperature: float = Field(
        1.0, gt=0, description="τ: logprobs use log softmax(z/τ), as the engine samples"
    )
    reference_policy: bool = Field(
        True, description="keep a frozen reference (a copy, or the LoRA base with adapters off)"
    )
    teacher_model_name: str | None = Field(
        None,
        description="a frozen teacher (a local HF causal LM folder with the policy's vocabulary) "
        "loaded beside the policy: a distillation loss gets its top-k logits on the policy's "
        "tokens in the train step (core loss_fn.teacher_model_name)",
    )
    teachers: list[dict[str, Any]] | None = Field(
        None,
        description="several frozen teachers, each {model_name, weight}, any tokenizer (core "
        "loss_fn.teachers, or grpo.adv_estimator.teachers with adv_estimator opd): a "
        "distillation loss gets their combined top-k on the policy's tokens, an OPD loss their "
        "log-probabilities of the sampled tokens (dockyard.torch.teachers)",
    )
    teacher_combination: Literal["weighted_sum", "average_logits", "select_teacher"] = Field(
        "weighted_sum",
        description="how a distillation loss combines ``teachers`` (core "
        "loss_fn.teacher_combination)",
    )
    shared_prefix: bool = Field(
        True,
        description="forward what a batch's sequences share once (a group's prompt, a DPO "
        "pair's, the turns before trajectories diverge): micro-batches become prefix trees "
        "with an ancestor attention mask (dockyard.torch.prefix); exact up to float rounding. "
        "Used when it saves >= 1/8 of a batch's tokens and attn_implementation is sdpa or "
        "eager (core policy.shared_prefix)",
    )
    activation_checkpointing: bool = False
    attn_implementation: str = Field("sdpa", description="transformers attn_implementation")
    seed: int = 0
    optimizer: OptimizerConfig = Field(
        default_factory=OptimizerConfig, description="adamw / adam / sgd (policy.optimizer)"
    )
    scheduler: SchedulerConfig = Field(
        default_factory=SchedulerConfig,
        description="constant / linear / cosine after warm-up (policy.scheduler; linear and "
        "cosine need total_steps)",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig)
    sequence_packing: SequencePackingConfig = Field(default_factory=SequencePackingConfig)
    dynamic_batching: DynamicBatchingConfig = Field(default_factory=DynamicBatchingConfig)
    fsdp: FSDPConfig = Field(default_factory=FSDPConfig)
    moe: MoEConfig = Field(
        default_factory=MoEConfig,
        description="Mixture-of-Experts models (Qwen3-MoE) only (core policy.moe)",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="tp: ranks that split each decoder layer (DTensor; core config "
        "policy.dtensor_cfg.tensor_parallel_size); the other world_size / tp form FSDP's axis",
    )
    context_parallel_size: int = Field(
        1,
        ge=1,
        description="cp: ranks that split each sequence (all-gather attention; core config "
        "policy.dtensor_cfg.context_parallel_size; dockyard.torch.context_parallel); FSDP2 "
        "shards over the data- and context-parallel ranks together",
    )

    @classmethod
    def from_sections(
        cls,
        policy: PolicyConfig,
        loss_fn: LossConfig | None,
        *,
        seed: int,
        max_steps: int,
        teachers: list[TeacherConfig] | None = None,
    ) -> TorchPolicyConfig:
        """From the run config's ``policy`` (``policy.dtensor_cfg``) and ``loss_fn`` sections.

        Every ``policy`` key the torch worker honours is mapped; ``reference_policy`` is on when
        ``loss_fn.reference_policy_kl_penalty`` β > 0, ``teacher_model_name`` is a distillation
        loss's ``loss_fn.teacher_model_name``, ``teachers`` the ``teachers`` passed (the OPD
        advantage's ``grpo.adv_estimator.teachers``, when the driver passes them) or else
        ``loss_fn.teachers`` (with ``teacher_combination``); ``seed`` is the run's seed
        (``grpo.seed``) and an unset ``scheduler.total_steps`` is ``max_steps``
        (``grpo.max_num_steps``); a ``.jinja`` file named by ``policy.tokenizer.chat_template``
        is read here (the ranks need not see it). A key it cannot honour is an error naming
        the key and the fix: ``precision: float16``."""
        p = policy
        if p.precision == "float16":
            raise ValueError(
                "policy.precision float16 is not supported by the torch trainer: use bfloat16 "
                "or float32"
            )
        beta = float(getattr(loss_fn, "reference_policy_kl_penalty", 0.0) or 0.0)
        if teachers is None:
            teachers = getattr(loss_fn, "teachers", None)
        total = p.scheduler.total_steps or max(int(max_steps), 1)
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
            teacher_model_name=getattr(loss_fn, "teacher_model_name", None),
            teachers=None if teachers is None else [t.model_dump() for t in teachers],
            teacher_combination=getattr(loss_fn, "teacher_combination", "weighted_sum"),
            activation_checkpointing=p.dtensor_cfg.activation_checkpointing,
            tensor_parallel_size=p.dtensor_cfg.tensor_parallel_size,
            context_parallel_size=p.dtensor_cfg.context_parallel_size,
            seed=int(seed),
            optimizer=p.optimizer,
            scheduler=p.scheduler.model_copy(update={"total_steps": total}),
            sequence_packing=p.sequence_packing.model_dump(),
            dynamic_batching=p.dynamic_batching.model_dump(),
            shared_prefix=p.shared_prefix is not False,
            fsdp={"cpu_offload": p.dtensor_cfg.cpu_offload},
            moe=p.moe,
            lora={
                "enabled": p.lora.enabled,
                "rank": p.lora.rank,
                "alpha": p.lora.alpha,
                "dropout": p.lora.dropout,
                "target_modules": list(p.lora.target_modules),
            },
        )

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (what a Ray actor receives); ``TorchPolicyConfig(**d)`` rebuilds it."""
        return self.model_dump(mode="json")

    @model_validator(mode="after")
    def _one_batching_mode(self) -> TorchPolicyConfig:
        if self.sequence_packing.enabled and self.dynamic_batching.enabled:
            raise ValueError(
                "sequence_packing.enabled and dynamic_batching.enabled are both true: "
                "choose one (packing already bounds tokens per micro-batch)"
            )
        return self
