"""External agent scaffolds: what runs one episode against the endpoint and the sandbox session.

A scaffold runner is anything with ``run(ctx: EpisodeContext) -> dict`` (blocking: the rollout
runs it in a worker thread). It talks to the model only through ``ctx.base_url`` (an
OpenAI-compatible base URL, ``ctx.api_key`` as its key) and acts only in the sandbox session
``ctx.session_id`` (through :class:`dockyard.sandbox.client.SandboxClient` at
``ctx.sandbox_url``). When it returns, the rollout scores the session's workspace diff with the
task's held-out tests (the sandbox's ``finish``, in a fresh sandbox). What it returns lands in the
trajectory's metadata (``scaffold``: exit status and the like).

:class:`MiniSweAgentRunner` runs `mini-swe-agent <https://mini-swe-agent.com>`_ (PyPI, unmodified):
its ``DefaultAgent`` with its litellm model (``openai/<name>`` at the episode's base URL, the
OpenAI tool-calling protocol) and :class:`SandboxSessionEnvironment`, a mini-swe-agent
environment whose commands run in the dockyard sandbox session. Another scaffold: write a class
with ``run(ctx)`` that points its OpenAI client at ``ctx.base_url`` (see docs/agents-endpoint.md).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from dockyard.sandbox.client import SandboxClient

_INSTALL_MSWEA = "the mini-swe-agent scaffold needs mini-swe-agent: pip install mini-swe-agent"


@dataclass
class EpisodeContext:
    """What a scaffold gets for one episode.

    Attributes:
        base_url: the episode's OpenAI base URL (``.../episodes/<key>/v1``).
        api_key: the episode's key (also accepted as ``Authorization: Bearer`` on ``/v1``).
        model: the model name to ask for (any name is served).
        task: the dataset row.
        instruction: the environment's user prompt for the task (the issue text).
        system_prompt: the environment's system prompt (a scaffold may use its own).
        sandbox_url / sandbox_token / session_id: the sandbox session the agent acts in.
        max_turns: the most model requests the scaffold should make.
    """

    base_url: str
    api_key: str
    model: str
    task: dict[str, Any]
    instruction: str
    system_prompt: str
    sandbox_url: str
    sandbox_token: str | None
    session_id: str
    max_turns: int


class ScaffoldRunner(Protocol):
    def run(self, ctx: EpisodeContext) -> dict[str, Any]: ...


def _minisweagent() -> Any:
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
    # the endpoint is local: a failed request is the episode's end, not a reason to back off
    os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    try:
        import minisweagent  # lazy: mini-swe-agent is optional, and reads the variables above
        from minisweagent.environments.local import LocalEnvironment
    except ImportError as e:
        raise ImportError(_INSTALL_MSWEA) from e
    return minisweagent, LocalEnvironment


def sandbox_environment_class() -> type:
    """:class:`SandboxSessionEnvironment` (built on first use: mini-swe-agent is optional)."""
    _, LocalEnvironment = _minisweagent()

    class SandboxSessionEnvironment(LocalEnvironment):  # type: ignore[misc, valid-type]
        """A mini-swe-agent environment whose commands run in a dockyard sandbox session (the
        local environment's submission check and template variables, the sandbox's ``exec``).

        Keyword args: ``sandbox_url``, ``session_id``, ``token``, ``timeout`` (s per command),
        ``cwd`` (inside the session's workspace)."""

        def __init__(
            self,
            *,
            sandbox_url: str,
            session_id: str,
            token: str | None = None,
            timeout: int = 30,
            cwd: str = ".",
        ) -> None:
            super().__init__(cwd=cwd, timeout=timeout)
            self.client = SandboxClient(sandbox_url, token)
            self.session_id = session_id

        def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict:
            command = action.get("command", "")
            r = self.client.exec(
                self.session_id,
                command,
                timeout_s=float(timeout or self.config.timeout),
                cwd=cwd or self.config.cwd or ".",
            )
            if r.exit_code is None:
                output = {
                    "output": r.stdout + r.stderr,
                    "returncode": -1,
                    "exception_info": f"the command did not finish ({r.verdict})",
                }
            else:
                output = {
                    "output": r.stdout + r.stderr,
                    "returncode": r.exit_code,
                    "exception_info": "",
                }
            self._check_finished(output)
            return output

        def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
            # the sandbox's platform, not this host's environment variables
            return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

        def close(self) -> None:
            self.client.close()

    return SandboxSessionEnvironment


@dataclass
class MiniSweAgentRunner:
    """Runs mini-swe-agent's ``DefaultAgent`` for one episode.

    Args:
        config: a mini-swe-agent config (a file path, or a name of its built-in configs such as
            ``mini`` / ``swebench``: its ``agent`` and ``model`` sections are used).
        agent: overrides of the ``agent`` section (``system_template``, ``instance_template``,
            ``step_limit``...). ``step_limit`` defaults to the episode's ``max_turns``;
            ``cost_limit`` is 0 (no cost is charged).
        model_kwargs: extra arguments of every completion request (litellm's ``model_kwargs``).
        command_timeout_s: the limit on one command in the sandbox.
    """

    config: str = "mini"
    agent: dict[str, Any] = field(default_factory=dict)
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    command_timeout_s: int = 30

    def _config(self) -> dict[str, Any]:
        _minisweagent()
        from minisweagent.config import get_config_path  # lazy: optional, after _minisweagent()

        return yaml.safe_load(Path(get_config_path(self.config)).read_text()) or {}

    def run(self, ctx: EpisodeContext) -> dict[str, Any]:
        _minisweagent()
        from minisweagent.agents.default import DefaultAgent  # lazy: optional; litellm: heavy, 4 s
        from minisweagent.models.litellm_model import LitellmModel

        cfg = self._config()
        model_cfg = {
            k: v
            for k, v in (cfg.get("model") or {}).items()
            if k not in ("model_name", "model_class", "model_kwargs")
        }
        model = LitellmModel(
            **model_cfg,
            model_name=f"openai/{ctx.model}",
            model_kwargs={"api_base": ctx.base_url, "api_key": ctx.api_key, **self.model_kwargs},
            cost_tracking="ignore_errors",
        )
        env = sandbox_environment_class()(
            sandbox_url=ctx.sandbox_url,
            session_id=ctx.session_id,
            token=ctx.sandbox_token,
            timeout=self.command_timeout_s,
        )
        agent_cfg = {
            **(cfg.get("agent") or {}),
            "step_limit": ctx.max_turns,
            "cost_limit": 0.0,
            "output_path": None,
            **self.agent,
        }
        agent = DefaultAgent(model, env, **agent_cfg)
        try:
            info = agent.run(ctx.instruction)
            status = str(info.get("exit_status", ""))
        except Exception as e:  # the model endpoint refused (context), a scaffold error: its end
            status = type(e).__name__
            info = {"exception": str(e)[:500]}
        finally:
            env.close()
        return {
            "exit_status": status,
            "calls": agent.n_calls,
            "messages": len(agent.messages),
            **({"exception": info["exception"]} if "exception" in info else {}),
        }


RUNNERS: dict[str, type] = {"mini_swe_agent": MiniSweAgentRunner}
"""Scaffold runners by name (``type`` of the scaffold config); add one by adding a class with
``run(ctx) -> dict`` here."""
