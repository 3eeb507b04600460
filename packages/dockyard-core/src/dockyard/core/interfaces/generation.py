"""The generation engine: what an inference backend (vLLM, SGLang, transformers) offers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dockyard.core.experience import AllowedTokens
from dockyard.core.interfaces.transport import WeightReceiver


@dataclass
class SamplingParams:
    """Sampling settings for one request (n samples of one prompt)."""

    n: int = 1
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    regex: str | None = None
    """Structured output: the completion must match this regular expression in full (vLLM's
    guided decoding, SGLang's ``regex``); an engine that cannot constrain raises ValueError."""
    structural_tag: str | None = None
    """Structured output: an xgrammar structural tag (JSON), e.g. free text then tool calls
    whose arguments follow each tool's JSON schema (vLLM's ``structural_tag``). The engine
    returns the allowed-token sets it sampled under (:attr:`GenerationResult.allowed`); an
    engine that cannot constrain raises ValueError."""


@dataclass
class GenerationResult:
    """One sampled completion.

    Attributes:
        token_ids: ``[L] int64`` generated tokens (prompt excluded).
        logprobs: ``[L] float32`` the engine's logprob of each sampled token.
        text: the decoded completion.
        finish_reason: ``"stop"``, ``"length"`` or ``"abort"``.
        policy_versions: ``[L] int32`` the policy version that produced each token.
        cached_prompt_tokens: prompt tokens the engine reused from its prefix cache instead of
            computing them (vLLM's ``num_cached_tokens``; the transformers engine's shared
            group prefill); 0 where the engine does not say.
        allowed: under :attr:`SamplingParams.structural_tag`, the token set the grammar
            allowed at each generated position (``rows [L]``); None when unconstrained.
        prompt_token_ids: ``[P] int64`` the prompt as the model read it, where the engine
            expanded image placeholders (a vision-language model: one placeholder per image
            in, each image's patch tokens out); None when that is the prompt as sent.
    """

    token_ids: np.ndarray
    logprobs: np.ndarray
    text: str
    finish_reason: str
    policy_versions: np.ndarray
    cached_prompt_tokens: int = 0
    allowed: AllowedTokens | None = None
    prompt_token_ids: np.ndarray | None = None


class GenerationEngine(ABC):
    """An inference engine that accepts new weights while it serves."""

    @abstractmethod
    async def generate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        images: Sequence[Any] | None = None,
    ) -> list[GenerationResult]:
        """``params.n`` samples for one prompt. ``images`` (a vision-language model: RGB
        ``[H, W, 3] uint8`` arrays or PIL images) are the prompt's images in order, one image
        placeholder each; an engine or model without image input raises ValueError."""

    @abstractmethod
    async def pause(self, mode: str = "keep") -> None:
        """Stop scheduling new tokens. ``keep``: in-flight requests resume later from where they
        stopped; ``abort``: in-flight requests are aborted and re-queued."""

    @abstractmethod
    async def resume(self) -> None: ...

    @abstractmethod
    async def update_weights(self, receiver: WeightReceiver, version: int) -> None:
        """Load the weights ``receiver`` delivers, then serve as policy ``version``."""

    @property
    @abstractmethod
    def policy_version(self) -> int: ...
