"""The collector's own config: what the collector actor reads of the run, and nothing else.

The driver builds it once from the run's ``MasterConfig``
(:func:`dockyard.train.algorithms.configs.collector_config`)
and hands it to the actor, which builds its environment, tokenizer, sampling and task loader
from it; a rewind hands the same object to the new actor (nothing is validated again). Values
derived from several sections are computed here, once: the prompt length limit, the groups in
flight (``grpo.num_prompts_per_step · (A + 1)``, A the asynchrony bound), the tokenizer's name.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dockyard.core.config.judge import JudgeConfig
from dockyard.core.config.policy import GenerationConfig
from dockyard.core.config.sections import EnvConfig
from dockyard.train.prompts import PromptConfig


class CollectorConfig(BaseModel):
    """See the module docstring. Built by the driver's split; every field is read by
    :class:`~dockyard.train.runtime.collector.CollectorHost`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env_name: str
    """The ``env`` entry that scores the data."""
    env: EnvConfig
    """That entry."""
    judge: JudgeConfig | None = None
    """The LLM judge, when the environment grades with it (else None)."""
    prompts: PromptConfig
    """How prompts are rendered (the renderer's own config)."""
    generation: GenerationConfig
    """``policy.generation``: the samples' length, temperature, top-p/k, stops."""
    samples_per_prompt: int = Field(gt=0)
    """G: ``grpo.num_generations_per_prompt``."""
    seed: int
    """``grpo.seed``: task order and sampling seeds."""
    shuffle: bool = True
    """``data.shuffle``."""
    max_num_epochs: int = Field(gt=0)
    """``grpo.max_num_epochs``."""
    max_rollout_turns: int = Field(gt=0)
    """``grpo.max_rollout_turns``."""
    max_groups_in_flight: int = Field(gt=0)
    """``max(P · (A + 1), 4)``: enough for the asynchrony bound's pipeline."""
