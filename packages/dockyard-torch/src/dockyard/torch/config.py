"""Configuration of the torch policy worker (pydantic; key names follow NeMo-RL's ``policy``).

Build it from a dict (what a Ray actor receives): ``TorchPolicyConfig.model_validate(d)`` or
``TorchPolicyConfig(**d)``. Unknown keys are errors naming the key.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OptimizerConfig(_Strict):
    """AdamW (Loshchilov & Hutter 2019): θ ← θ − η_t (m̂/(√v̂ + ε) + λθ)."""

    lr: float = Field(1e-5, gt=0, description="peak learning rate η")
    weight_decay: float = Field(0.0, ge=0, description="decoupled weight decay λ")
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam (β1, β2)")
    eps: float = Field(1e-8, gt=0, description="Adam ε")


class SchedulerConfig(_Strict):
    """Learning-rate schedule η_t = η · f(t).

    ``constant``: f = min(1, (t+1)/W). ``cosine``: linear warm-up over W steps, then
    f = r + (1 − r)·½(1 + cos(π·(t − W)/(S − W))) down to the floor r = ``min_lr_ratio`` at S.
    """

    type: Literal["constant", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0, description="W: linear warm-up steps")
    total_steps: int = Field(1000, ge=1, description="S: steps of the cosine decay (cosine only)")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="r: final lr / peak lr (cosine)")


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


class TorchPolicyConfig(_Strict):
    """The torch policy worker's configuration."""

    model_name: str = Field(description="local folder of a Hugging Face causal LM")
    tokenizer_name: str | None = Field(None, description="tokenizer folder (default: model_name)")
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
    activation_checkpointing: bool = False
    attn_implementation: str = Field("sdpa", description="transformers attn_implementation")
    seed: int = 0
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    sequence_packing: SequencePackingConfig = Field(default_factory=SequencePackingConfig)
    dynamic_batching: DynamicBatchingConfig = Field(default_factory=DynamicBatchingConfig)
    fsdp: FSDPConfig = Field(default_factory=FSDPConfig)
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="tp: ranks that split each decoder layer (DTensor; core config "
        "policy.dtensor_cfg.tensor_parallel_size); the other world_size / tp form FSDP's axis",
    )

    @model_validator(mode="after")
    def _one_batching_mode(self) -> TorchPolicyConfig:
        if self.sequence_packing.enabled and self.dynamic_batching.enabled:
            raise ValueError(
                "sequence_packing.enabled and dynamic_batching.enabled are both true: "
                "choose one (packing already bounds tokens per micro-batch)"
            )
        return self
