"""The collector's own config: what the collector actor reads of the run, and nothing else.

The driver builds it once from the run's ``MasterConfig`` (:meth:`CollectorConfig.from_master`)
and hands it to the actor, which builds its environment, tokenizer, sampling and task loader
from it; a rewind hands the same object to the new actor (nothing is validated again). Values
derived from several sections are computed here, once: the prompt length limit, the groups in
flight (``grpo.num_prompts_per_step · (A + 1)``, A the asynchrony bound), the tokenizer's name.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dockyard.core.config.judge import JudgeConfig
from dockyard.core.config.policy import GenerationConfig
from dockyard.core.config.sections import EnvConfig
from dockyard.train.environments import needs_judge
from dockyard.train.prompts import PromptConfig


class CollectorConfig(BaseModel):
    """See the module docstring. Built by :meth:`from_master`; every field is read by
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

    @classmethod
    def from_master(cls, cfg: Any, prompts_per_step: int, age_bound: int) -> CollectorConfig:
        """The collector's part of ``cfg`` (a ``MasterConfig``); the driver passes the two loop
        values it read itself (P, A)."""
        name = cfg.env_for_data()
        if name is None:
            raise ValueError("no environment scores the data: set data.env_name or one env entry")
        env = cfg.env[name]
        graded = needs_judge(name, env) and env.options.get("use_judge", True)
        g = cfg.grpo
        return cls(
            env_name=name, env=env, judge=cfg.judge if graded else None,
            prompts=PromptConfig.from_master(cfg), generation=cfg.policy.generation, samples_per_prompt=g.num_generations_per_prompt,
            seed=g.seed, shuffle=cfg.data.shuffle, max_num_epochs=g.max_num_epochs,
            max_rollout_turns=g.max_rollout_turns,
            max_groups_in_flight=max(prompts_per_step * (age_bound + 1), 4),
        )  # fmt: skip
