"""``judge``: the LLM judge (online DPO, RLAIF, the judge-graded environments); ``rlaif``: RLAIF's constitution, critique and revision (the application package's judge component and driver)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from dockyard.core.config._base import ConfigModel


class JudgeConfig(ConfigModel):
    """An LLM that judges responses: an engine fleet of dockyard's own, or any
    OpenAI-compatible server. Pairwise for online DPO and RLAIF, rubric for the environments
    that grade with it (``needs_judge``: gdpval, gdpval_agentic, hle). A judgment that never
    parses is masked (dropped) and counted."""

    backend: Literal["engine", "openai"] = "engine"
    """``engine``: dockyard starts ``num_engines`` vLLM engines serving ``model_name`` (Ray actors, as the policy's); ``openai``: requests go to ``base_url``'s ``/chat/completions``."""
    model_name: str | None = None
    """The judge model: an HF folder or name for ``engine``; the ``model`` field of each request for ``openai``."""
    num_engines: PositiveInt = 1
    """Judge engines to start (``backend: engine``)."""
    base_url: str | None = None
    """An OpenAI-compatible API root, ``http://host:8000/v1`` (``backend: openai``)."""
    api_key_env: str | None = None
    """The environment variable holding the API key of ``base_url`` (null: no key). The key itself never goes in a config file."""
    mode: Literal["pairwise", "rubric"] = "pairwise"
    """``pairwise``: which of two responses is better (``VERDICT: A`` / ``VERDICT: B``); ``rubric``: one response's score (``SCORE: n``)."""
    template_file: str | None = None
    """A prompt template file with ``{prompt}``, ``{response_a}``, ``{response_b}`` (pairwise) or ``{response}``, ``{score_min}``, ``{score_max}`` (rubric) and the names of ``template_fields`` (null: the built-in template of ``mode``)."""
    template_fields: dict[str, str] = Field(default_factory=dict)
    """Values of the template's own named fields (``criteria: ...``); a field the template names that nothing fills is an error before anything starts."""
    score_min: int = 1
    """The lowest score of the rubric scale."""
    score_max: int = 10
    """The highest score of the rubric scale."""
    both_orders: bool = True
    """Pairwise: judge each pair as (A, B) and as (B, A); orders that disagree count as a tie (position-bias control)."""
    max_retries: int = Field(default=2, ge=0)
    """Fresh samples after a parse failure or a transport error, per judgment (then it is masked)."""
    temperature: float = Field(default=0.0, ge=0.0)
    """The judge's sampling temperature (a retry samples at max(this, 1) so that it is a fresh sample)."""
    max_tokens: PositiveInt = 64
    """The most tokens of one judgment."""
    constrained: bool = False
    """Decode each reply under a regular expression that admits only the verdict line (``SCORE: n`` over the scale, ``VERDICT: A|B``): vLLM's structured output, backend ``engine`` only. A small judge then always answers in format (no reasoning before the verdict); which verdict is still the model's."""
    timeout_s: float = Field(default=60.0, gt=0)
    """Limit on one judge request."""
    max_concurrency: PositiveInt = 32
    """Judge requests in flight at once."""

    @model_validator(mode="after")
    def _check(self) -> JudgeConfig:
        errors = []
        if self.score_min >= self.score_max:
            errors.append(
                f"judge.score_min ({self.score_min}) must be below judge.score_max ({self.score_max})"
            )
        if self.backend == "openai" and not self.base_url:
            errors.append(
                "judge.base_url: backend 'openai' needs the API root (http://host:8000/v1)"
            )
        if self.constrained and self.backend != "engine":
            errors.append(
                "judge.constrained: only backend 'engine' (dockyard's vLLM judge fleet) constrains "
                "replies; for an OpenAI-compatible server use its own structured-output options"
            )
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            errors.append(f"judge.base_url {self.base_url!r} must start with http:// or https://")
        if errors:
            raise ValueError("\n".join(errors))
        return self


class RLAIFConfig(ConfigModel):
    """RLAIF / constitutional AI (``dockyard rlaif``): the ``judge`` critiques each policy
    response against a written constitution, the reviser rewrites it, and (revision ≻ original)
    pairs take DPO steps. No human labels."""

    constitution_file: str | None = None
    """A text file of the principles the critiques apply (``examples/data/constitution.md``); its text fills ``{constitution}`` in the critique and revision templates."""
    reviser: Literal["policy", "judge"] = "policy"
    """Who rewrites a response after its critique: ``policy`` (the policy's own engines, as in Constitutional AI) or ``judge`` (the judge model)."""
    critique_template_file: str | None = None
    """The critique request: a template with ``{constitution}``, ``{prompt}`` and ``{response}`` (null: the built-in one)."""
    revision_template_file: str | None = None
    """The revision request: a template with ``{constitution}``, ``{prompt}``, ``{response}`` and ``{critique}`` (null: the built-in one); the whole reply, stripped, is the revision."""
    critique_max_tokens: PositiveInt = 256
    """The most tokens of one critique (a revision is a response: ``policy.generation.max_new_tokens``)."""
    check_revisions: bool = True
    """Keep a pair only when the pairwise judge prefers the revision to the original (a revision it does not prefer is dropped and counted: ``rlaif/dropped_not_preferred``)."""
