"""GDPval agentic: the agent makes the deliverables itself in a sandbox session.

The terminal environment's multi-turn machinery (:class:`~dockyard.envs.terminal.env.
TerminalEnvironment`: ``run``, ``read_file``, ``write_file``, ``submit`` tool calls in a session
whose interpreter has ``dockyard-sandbox[office]``'s libraries), started on an empty workspace.
When the episode ends (``submit``, ``max_turns``, the token budget) the deliverables are fetched
from the session's workspace and graded on the rubric exactly as the single-turn variant does
(:mod:`dockyard.envs.gdpval.env`); ``reward/invalid_action`` is added as in ``terminal``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.gdpval.env import LIBRARIES, rubric_step, user_message
from dockyard.envs.gdpval.parse import ParseLimits
from dockyard.envs.gdpval.rubric import grade
from dockyard.envs.judging import JudgeFn, require_judge
from dockyard.envs.rewards import INVALID_ACTION, RewardConfig, infra_failure
from dockyard.envs.terminal.env import TerminalEnvironment
from dockyard.sandbox.client import SandboxRequestError, SandboxUnavailable
from dockyard.sandbox.models import Limits

AGENTIC_SYSTEM = (
    "You are a professional working in a Linux terminal with an empty working directory. "
    f"Make the requested files there with the tools ({LIBRARIES}); write spreadsheet values, "
    "not formulas. When every file is written, call submit."
)


class GdpvalAgenticEnvironment(TerminalEnvironment):
    """Deliverables made by an agent in a sandbox session (see the module docstring).

    Args: those of :class:`TerminalEnvironment`, and ``judge`` / ``use_judge`` /
    ``parse_limits`` as :class:`~dockyard.envs.gdpval.env.GdpvalEnvironment`'s.
    """

    name = "gdpval_agentic"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        judge: JudgeFn | None = None,
        use_judge: bool = True,
        parse_limits: ParseLimits | dict[str, Any] | None = None,
        reward: RewardConfig | dict[str, Any] | None = None,
        max_turns: int = 10,
        max_total_tokens: int = 8192,
        max_output_chars: int = 4000,
        limits: Any = None,
        system_prompt: str = AGENTIC_SYSTEM,
        **terminal: Any,
    ) -> None:
        if isinstance(reward, dict):
            reward = RewardConfig(**reward)
        super().__init__(sandbox_urls, reward=reward or RewardConfig(mode="fraction"),
                         max_turns=max_turns, max_total_tokens=max_total_tokens,
                         max_output_chars=max_output_chars, system_prompt=system_prompt,
                         limits=Limits.model_validate(limits) if isinstance(limits, dict) else limits,
                         **terminal)  # fmt: skip
        self.judge = require_judge(judge, "gdpval_agentic") if use_judge else None
        self.parse_limits = (
            ParseLimits(**parse_limits) if isinstance(parse_limits, dict) else parse_limits
        )

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.tools.system_prompt(self.system_prompt)},
            {"role": "user", "content": user_message(task)},
        ]

    def session_repo(self, task: dict[str, Any]) -> dict[str, Any]:
        return {}  # an empty workspace

    async def _finish(self, state: dict[str, Any]) -> StepResult:
        task, client = state["task"], self._client_for(state)
        files: dict[str, bytes | None] = {}
        try:
            for d in task["deliverables"]:
                try:
                    files[d] = await client.get_file(state["session_id"], d)
                except SandboxRequestError:
                    files[d] = None
        except (SandboxUnavailable, httpx.HTTPError) as e:
            return infra_failure(f"sandbox: {type(e).__name__}: {e}", task_id=task.get("id"))
        end = self._end_reason(state)
        graded = await grade(task, files, self.judge, self.parse_limits)
        step = rubric_step(graded, self.reward.mode, task_id=task.get("id"), turns=state["turn"],
                           end_reason=end, invalid_actions=state["invalid_actions"],
                           invalid_kinds=state["invalid_kinds"])  # fmt: skip
        if not step.infra_error:
            step.rewards[INVALID_ACTION] = (
                0.0 - self.reward.invalid_action_penalty * state["invalid_actions"]
            )
        return step
