"""What every dockyard environment shares: reward configuration and shaping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dockyard.core.interfaces.environment import Environment, StepResult
from dockyard.envs.rewards import RewardConfig, approx_token_count, shape


class BaseEnvironment(Environment):
    """An :class:`~dockyard.core.interfaces.Environment` with a :class:`RewardConfig`.

    Args:
        reward: reward mode, format bonus, invalid-action penalty, DAPO overlong settings.
        count_tokens: counts a response's tokens for overlong shaping (pass the policy
            tokenizer's ``lambda s: len(tok.encode(s))``; the default estimates 4 chars/token).
    """

    name: str = "base"
    calls_tools: bool = False
    """The policy acts through tool calls (``self.tools``, a ToolRegistry): the pre-flight
    refuses a tool-call grammar for an environment without them."""

    def __init__(
        self,
        reward: RewardConfig | None = None,
        count_tokens: Callable[[str], int] = approx_token_count,
    ) -> None:
        self.reward = reward or RewardConfig()
        self.count_tokens = count_tokens

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> list[str]:
        """What is wrong with these constructor ``options`` (``env.<name>.options``), one line
        each, found cheaply and without side effects (no model loaded, no service reached):
        the pre-flight (``dockyard train``, ``config check --deep``) calls it before anything
        starts. Override it where an option names a file or folder the environment reads."""
        return []

    def tool_specs(self) -> list[dict[str, Any]]:
        """The specs of ``self.tools`` (a :class:`~dockyard.envs.tools.ToolRegistry`) where the
        environment has one."""
        tools = getattr(self, "tools", None)
        return tools.specs() if tools is not None else []

    async def aclose(self) -> None:
        """Release connections held for the running event loop (sandbox clients)."""
        pool = getattr(self, "pool", None)
        if pool is not None:
            await pool.aclose()

    def _shape(self, result: StepResult, response: str) -> StepResult:
        return shape(result, response, self.reward, self.count_tokens)
