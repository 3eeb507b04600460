"""``env.<name>.scaffold``: an external agent scaffold drives that environment's episodes.

Example (examples/configs/grpo_swe_external.yaml)::

    env:
      terminal:
        scaffold:
          type: mini_swe_agent       # a name of dockyard.train.endpoint.scaffold.RUNNERS
          max_turns: 8               # model requests per episode (the runner's step limit)
          options:                   # the runner's own settings (MiniSweAgentRunner's fields)
            config: mini
            command_timeout_s: 30

The environment must run its episodes in sandbox sessions (``terminal``, ``swe_agent``): the
scaffold acts in the session, and the session's workspace diff is scored by ``finish``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

from dockyard.train.endpoint.rollout import ExternalScaffold
from dockyard.train.endpoint.scaffold import RUNNERS


class ScaffoldConfig(BaseModel):
    """One external scaffold (the ``env.<name>.scaffold`` mapping)."""

    model_config = ConfigDict(extra="forbid")

    type: str = "mini_swe_agent"
    """The scaffold runner (``mini_swe_agent``)."""
    max_turns: PositiveInt = 30
    """The most model requests of one episode."""
    timeout_s: float = Field(default=1800.0, gt=0)
    """Wall-clock limit of one scaffold run; past it the episode is scored as it stands."""
    host: str = "127.0.0.1"
    """Interface the endpoint binds (``0.0.0.0`` for scaffolds on other machines)."""
    port: int = Field(default=0, ge=0)
    """First TCP port (one endpoint per engine, on consecutive ports); 0: free ports."""
    advertise: str | None = None
    """Host name put in the episodes' base URLs (null: ``host``, or 127.0.0.1 for 0.0.0.0)."""
    model: str = "dockyard"
    """The model name the endpoint answers to."""
    options: dict[str, Any] = Field(default_factory=dict)
    """The runner's own settings (for ``mini_swe_agent``: ``config``, ``agent``,
    ``model_kwargs``, ``command_timeout_s``)."""

    @field_validator("type")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in RUNNERS:
            raise ValueError(f"scaffold type {v!r}: expected one of {sorted(RUNNERS)}")
        return v

    def build(self) -> ExternalScaffold:
        runner_cls = RUNNERS[self.type]
        try:
            runner = runner_cls(**self.options)
        except TypeError as e:
            raise ValueError(f"scaffold.options: {e} (the fields of {runner_cls.__name__})") from e
        return ExternalScaffold(
            runner, max_turns=self.max_turns, host=self.host, port=self.port,
            advertise=self.advertise, model=self.model, timeout_s=self.timeout_s,
        )  # fmt: skip


def build_scaffold(spec: dict[str, Any] | None, env: Any = None) -> ExternalScaffold | None:
    """The :class:`ExternalScaffold` of an ``env.<name>.scaffold`` mapping (None: none);
    ValueError where ``env`` does not run its episodes in sandbox sessions."""
    if spec is None:
        return None
    if env is not None and not all(hasattr(env, a) for a in ("finish_result", "pool", "reset")):
        raise ValueError(
            f"env scaffold: environment {type(env).__name__} has no sandbox sessions for a scaffold "
            "to act in; use a session environment (terminal, swe_agent) or remove env.<name>.scaffold"
        )
    return ScaffoldConfig.model_validate(spec).build()
