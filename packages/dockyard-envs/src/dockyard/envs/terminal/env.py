"""The terminal environment: the model works in a sandbox session through tool calls.

Episode::

    state = await env.reset(task)             # a fresh sandbox session holding task["files"]
    while True:
        result = await env.step(state, turn)  # parse <tool_call>s, run them, observation back
        if result.done: break
    await env.close(state)                    # delete the session

Tools (JSON-schema checked): ``run(command, timeout_s?)``, ``read_file(path)``,
``write_file(path, content)``, ``submit()``. The episode ends on ``submit``, after
``max_turns`` turns, or when the responses exceed ``max_total_tokens``; the verdict then comes
from the task's held-out tests, run by the service's ``finish`` in a *fresh* sandbox built from
the session's workspace diff (never inside the sandbox the agent controlled).

Reward: ``reward/tests`` (binary or fraction) at the end; ``reward/invalid_action`` =
``-invalid_action_penalty × n`` for bad JSON, unknown tools, schema violations and turns with no
tool call (each also reported under ``metadata["invalid_actions"]``). A sandbox infra failure at
any point ends the episode with ``infra_error=True`` (masked, not scored).
"""

from __future__ import annotations

import base64
import collections
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.rewards import INVALID_ACTION, RewardConfig, approx_token_count, infra_failure
from dockyard.envs.sandboxed import SandboxPool, verdict_to_step
from dockyard.envs.swe.sdist import tarball
from dockyard.envs.tools import ToolRegistry, parse_tool_calls
from dockyard.envs.tools.registry import (
    InfraError,
    ToolOutcome,
    render_tool_responses,
    truncate_middle,
)
from dockyard.sandbox.client import SandboxRequestError, SandboxUnavailable
from dockyard.sandbox.models import FinishRequest, Limits, SessionCreate, TaskResult, Verdict

TERMINAL_SYSTEM = (
    "You are working in a Linux terminal inside a fresh workspace. Use the tools to inspect and "
    "change files and run commands. When the task is done, call submit."
)


def _cap(text: str, n: int) -> str:
    return truncate_middle(text, n)


def build_tools(pool_of: Callable[[dict[str, Any]], Any], max_output_chars: int) -> ToolRegistry:
    """The four tools; each handler gets the episode ``state`` as its context."""
    reg = ToolRegistry()

    @reg.tool(
        "run",
        "Run a shell command in the workspace; returns the exit code and output.",
        {
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1},
                "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 60},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    )
    async def run(state: dict[str, Any], command: str, timeout_s: float = 20.0) -> str:
        res = await pool_of(state).exec(state["session_id"], command, timeout_s=timeout_s)
        if res.verdict == Verdict.infra_error:
            raise InfraError(res.stderr[:300])
        tail = " (timed out)" if res.timed_out else ""
        return _cap(f"exit code: {res.exit_code}{tail}\n{res.stdout}{res.stderr}", max_output_chars)

    @reg.tool(
        "read_file",
        "Read a text file of the workspace.",
        {
            "type": "object",
            "properties": {"path": {"type": "string", "minLength": 1}},
            "required": ["path"],
            "additionalProperties": False,
        },
    )
    async def read_file(state: dict[str, Any], path: str) -> str:
        try:
            data = await pool_of(state).get_file(state["session_id"], path)
        except SandboxRequestError as e:
            return f"error: cannot read {path!r}: {e.detail}"
        except httpx.HTTPError as e:
            raise InfraError(repr(e)) from e
        return _cap(data.decode("utf-8", errors="replace"), max_output_chars)

    @reg.tool(
        "write_file",
        "Create or overwrite a text file of the workspace.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1},
                "content": {"type": "string"},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    )
    async def write_file(state: dict[str, Any], path: str, content: str) -> str:
        try:
            await pool_of(state).put_file(state["session_id"], path, content)
        except SandboxRequestError as e:
            return f"error: cannot write {path!r}: {e.detail}"
        except httpx.HTTPError as e:
            raise InfraError(repr(e)) from e
        return f"wrote {len(content.encode())} bytes to {path}"

    @reg.tool(
        "submit",
        "Finish the task; the held-out tests decide.",
        {"type": "object", "properties": {}},
    )
    def submit(state: dict[str, Any]) -> str:
        state["submitted"] = True
        return "submitted"

    return reg


class TerminalEnvironment(BaseEnvironment):
    """Multi-turn terminal tasks in sandbox sessions (see the module docstring)."""

    name = "terminal"
    calls_tools = True

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward: RewardConfig | None = None,
        max_turns: int = 10,
        max_total_tokens: int = 8192,
        max_output_chars: int = 4000,
        finish_timeout_s: float = 60.0,
        limits: Limits | None = None,
        session_ttl_s: float = 600.0,
        system_prompt: str = TERMINAL_SYSTEM,
        count_tokens: Callable[[str], int] = approx_token_count,
        max_wait_s: float = 120.0,
    ) -> None:
        super().__init__(reward, count_tokens)
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.pool = SandboxPool(sandbox_urls, token, max_wait_s=max_wait_s)
        self.max_turns = max_turns
        self.max_total_tokens = max_total_tokens
        self.finish_timeout_s = finish_timeout_s
        self.limits = limits or Limits(memory_mb=512, pids=128)
        self.session_ttl_s = session_ttl_s
        self.system_prompt = system_prompt
        self.tools = build_tools(self._client_for, max_output_chars)
        self._clients: dict[str, Any] = {}

    def _client_for(self, state: dict[str, Any]) -> Any:
        # a session lives on one service: pin its client
        return self._clients.get(state["session_id"]) or self.pool.client()

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.tools.system_prompt(self.system_prompt)},
            {"role": "user", "content": task["instruction"]},
        ]

    def new_state(self, task: dict[str, Any]) -> dict[str, Any]:
        """An episode's bookkeeping before its session exists."""
        return {
            "task": task, "session_id": None, "turn": 0, "tokens": 0, "submitted": False,
            "invalid_actions": 0, "invalid_kinds": {}, "infra_error": None, "done": False,
        }  # fmt: skip

    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        state = self.new_state(task)
        client = self.pool.client()
        try:
            spec = SessionCreate(
                repo=self.session_repo(task), limits=self.limits, ttl_s=self.session_ttl_s
            )
            state["session_id"] = await client.create_session(spec)
            self._clients[state["session_id"]] = client
        except (SandboxUnavailable, httpx.HTTPError) as e:
            state["infra_error"] = f"create_session: {e}"
        return state

    def session_repo(self, task: dict[str, Any]) -> dict[str, Any]:
        """The session's starting tree (a sandbox ``RepoSpec`` dict): ``task["files"]``."""
        files = {p: c.encode() for p, c in task.get("files", {}).items()}
        return {"tarball": base64.b64encode(tarball(files)).decode()} if files else {}

    def finish_request(self, task: dict[str, Any]) -> FinishRequest:
        """What ``finish`` runs on the workspace diff: the task's held-out tests."""
        return FinishRequest(
            test_files=task.get("test_files", {}),
            tests={"fail_to_pass": list(task["tests"]), "runner": task.get("runner", "plain")},
            timeout_s=self.finish_timeout_s,
        )

    async def finish_result(self, state: dict[str, Any]) -> TaskResult:
        """The sandbox's verdict on the episode's workspace diff (``finish``)."""
        req = self.finish_request(state["task"])
        return await self._client_for(state).finish(state["session_id"], req)

    def episode_metadata(self, state: dict[str, Any]) -> dict[str, Any]:
        """Extra metadata of the final step (none here)."""
        return {}

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        if state["done"]:
            raise ValueError("step() after the episode ended: call reset() for a new episode")
        if state["infra_error"]:
            state["done"] = True
            return infra_failure(state["infra_error"], turn=state["turn"])
        state["turn"] += 1
        state["tokens"] += self.count_tokens(response)
        turn = parse_tool_calls(response)
        outcomes: list[ToolOutcome] = []
        if not turn.items:
            outcomes.append(
                ToolOutcome(
                    "invalid",
                    "error: no tool call found; call a tool with <tool_call>{...}</tool_call>",
                    ok=False,
                    error_kind="no_call",
                )
            )
        for item in turn.items:
            out = await self.tools.execute(item, state)
            outcomes.append(out)
            if out.infra_error:
                state["done"] = True
                return infra_failure(out.content, turn=state["turn"])
            if state["submitted"]:
                break
        kinds = collections.Counter(state["invalid_kinds"])
        for o in outcomes:
            if o.invalid:
                state["invalid_actions"] += 1
                kinds[o.error_kind or "?"] += 1
        state["invalid_kinds"] = dict(kinds)
        out_of_budget = state["turn"] >= self.max_turns or state["tokens"] >= self.max_total_tokens
        if state["submitted"] or out_of_budget:
            state["done"] = True
            result = await self._finish(state)
            return self._shape(result, response)
        return StepResult(
            rewards={},
            done=False,
            observation=render_tool_responses(outcomes),
            metadata={"tool_messages": [o.message() for o in outcomes], "turn": state["turn"]},
        )

    async def finish(self, state: dict[str, Any], response: str) -> StepResult:
        """The rollout's turn limit came first: the held-out tests decide now (``end_reason``
        ``rollout_turns``)."""
        state["done"] = True
        if state["infra_error"]:
            return infra_failure(state["infra_error"], turn=state["turn"])
        state["cut"] = True
        return self._shape(await self._finish(state), response)

    def _end_reason(self, state: dict[str, Any]) -> str:
        """Why the episode ended: ``submit``, ``max_turns``, ``token_budget`` or
        ``rollout_turns`` (the rollout's own turn limit: :meth:`finish`)."""
        if state.get("cut"):
            return "rollout_turns"
        if state["submitted"]:
            return "submit"
        return "max_turns" if state["turn"] >= self.max_turns else "token_budget"

    async def _finish(self, state: dict[str, Any]) -> StepResult:
        task = state["task"]
        result = await self.finish_result(state)
        end = self._end_reason(state)
        step = verdict_to_step(
            result, self.reward.mode, task_id=task.get("id"), turns=state["turn"], end_reason=end,
            invalid_actions=state["invalid_actions"], invalid_kinds=state["invalid_kinds"],
            **self.episode_metadata(state),
        )  # fmt: skip
        if not step.infra_error:
            step.rewards[INVALID_ACTION] = (
                0.0 - self.reward.invalid_action_penalty * state["invalid_actions"]
            )
        return step

    async def close(self, state: dict[str, Any]) -> None:
        sid = state.get("session_id")
        if not sid:
            return
        client = self._clients.pop(sid, None) or self.pool.client()
        # on failure the service reaps the idle session after its ttl
        with contextlib.suppress(SandboxRequestError, httpx.HTTPError):
            await client.delete_session(sid)

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        """Single-turn use: one response is the whole episode (its tool calls, then finish)."""
        state = await self.reset(task)
        try:
            result = await self.step(state, response)
            if not result.done:
                state["done"] = True
                result = self._shape(await self._finish(state), response)
            return result
        finally:
            await self.close(state)
