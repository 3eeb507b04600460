"""The Harbor environment: a Harbor task (Terminal-Bench 2's format) run in the sandbox.

Episode::

    state = await env.reset(task)   # a session over the task's provisioned environment
                                    # (built once per Dockerfile, cached, read-only)
    ... step(state, turn) ...       # tools: run, read_file, write_file, terminal, submit
    await env.close(state)

* The prompt is ``instruction.md``. The agent's workspace is the environment's starting tree, at
  the Dockerfile's WORKDIR (e.g. /app) and at /workspace. In a task built from its Dockerfile
  the session is the image's container (the sandbox's ``SessionCreate.container``): the agent
  is the image's USER over a writable layer of its own, which the verifier sees.
* ``terminal(keys, wait_s?)``: keystrokes into a persistent interactive shell (a tmux pane in a
  long-lived jail of the session) for programs that need a TTY; returns the screen. Items are
  literal text or ``<Enter>``, ``<C-c>``, ``<Up>``, … (see ``dockyard.sandbox.envspec.TtyRequest``).
* At the end, ``tests/test.sh`` runs in a *fresh* sandbox built from the workspace diff, with the
  held-out ``tests/`` at /tests (never mounted in the agent's jails) and an empty /logs. In a
  task built from its Dockerfile (a layered image) it runs as the image's root, as Docker runs
  it, and reaches the package registries and the installer table through the sandbox's egress
  proxy (``verifier_egress``): Terminal-Bench 2's shared preamble (``apt-get install curl``,
  uv's install script, ``uvx ... pytest``) runs as published on a node without the internet.

Reward ``reward/tests`` = the number the script wrote to /logs/verifier/reward.txt (or
``reward`` in reward.json), clipped to [0, 1]; a missing or malformed file gives 0 with
``metadata["reward_file_error"]`` (a verdict of the task, never ``infra_error``). A task whose
environment cannot be provisioned ends with ``infra_error`` (masked, never scored) and
``metadata["provision_failed"]`` holding the reason.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.rewards import (
    INVALID_ACTION,
    TESTS,
    RewardConfig,
    approx_token_count,
    infra_failure,
)
from dockyard.envs.sandboxed import verdict_to_step
from dockyard.envs.terminal.env import TerminalEnvironment
from dockyard.envs.tools import ToolRegistry
from dockyard.envs.tools.registry import InfraError, truncate_middle
from dockyard.sandbox.client import SandboxRequestError, SandboxUnavailable
from dockyard.sandbox.envspec import EnvSpec, ScriptTests
from dockyard.sandbox.models import FinishRequest, Limits, SessionCreate

VERIFIER_OUTPUT_CAP = 8000  # characters of the verifier's stdout / stderr kept in metadata

HARBOR_SYSTEM = (
    "You are working in a Linux terminal. Use the tools to inspect and change files and run "
    "commands; use `terminal` to type into an interactive shell for programs that need a TTY "
    "(editors, REPLs, full-screen programs). When the task is done, call submit."
)


def add_terminal_tool(
    reg: ToolRegistry, pool_of: Callable[[dict[str, Any]], Any], cap: int
) -> None:
    """The keystroke tool on the session's persistent interactive shell."""

    @reg.tool(
        "terminal",
        "Type into a persistent interactive shell (a TTY) and read its screen. Each item of "
        "`keys` is literal text, or one key in angle brackets: <Enter>, <Tab>, <Escape>, "
        "<BSpace>, <Up>, <Down>, <Left>, <Right>, <C-c>, <C-d>, <M-x>, <F1>...",
        {
            "type": "object",
            "properties": {
                "keys": {"type": "array", "items": {"type": "string"}, "maxItems": 64},
                "wait_s": {"type": "number", "minimum": 0, "maximum": 10},
            },
            "required": ["keys"],
            "additionalProperties": False,
        },
    )
    async def terminal(state: dict[str, Any], keys: list[str], wait_s: float = 0.5) -> str:
        try:
            r = await pool_of(state).tty(state["session_id"], keys, wait_s=wait_s)
        except SandboxRequestError as e:
            return f"error: {e.detail}"
        except httpx.HTTPError as e:
            raise InfraError(repr(e)) from e
        return truncate_middle(r.screen, cap)


class HarborEnvironment(TerminalEnvironment):
    """Harbor tasks in sandbox sessions (see the module docstring). Options as
    :class:`~dockyard.envs.terminal.env.TerminalEnvironment`; ``limits`` come from each task's
    task.toml ([environment] memory_mb, storage_mb) unless given."""

    name = "harbor"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward: RewardConfig | None = None,
        max_turns: int = 10,
        max_total_tokens: int = 8192,
        max_output_chars: int = 4000,
        finish_timeout_s: float = 120.0,
        limits: Limits | None = None,
        session_ttl_s: float = 600.0,
        system_prompt: str = HARBOR_SYSTEM,
        count_tokens: Callable[[str], int] = approx_token_count,
        max_wait_s: float = 600.0,
        verifier_egress: bool | None = None,
        session_egress: bool | None = None,
    ) -> None:
        """``verifier_egress``: the verifier reaches the registries (the service needs
        ``--allow-network``); None: for tasks built from a Dockerfile as layers, whose published
        verifiers install their tools (Terminal-Bench 2), and not for prefix environments.
        ``session_egress``: the agent's session reaches them too; None: for layered-image tasks
        that declare ``allow_internet`` (what Docker would have given the agent: the internet;
        here the registries only, a host outside them refused)."""
        self.verifier_egress = verifier_egress
        self.session_egress = session_egress
        super().__init__(
            sandbox_urls, token, reward, max_turns, max_total_tokens, max_output_chars,
            finish_timeout_s, limits, session_ttl_s, system_prompt, count_tokens, max_wait_s,
        )  # fmt: skip
        self._fixed_limits = limits
        add_terminal_tool(self.tools, self._client_for, max_output_chars)

    def limits_for(self, task: dict[str, Any]) -> Limits:
        if self._fixed_limits is not None:
            return self._fixed_limits
        lim = task.get("limits", {})
        return Limits(
            memory_mb=lim.get("memory_mb", 2048), disk_mb=lim.get("disk_mb", 1024), pids=256
        )

    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = {
            "task": task, "session_id": None, "turn": 0, "tokens": 0, "submitted": False,
            "invalid_actions": 0, "invalid_kinds": {}, "infra_error": None, "done": False,
        }  # fmt: skip
        client = self.pool.client()
        try:
            egress = self.session_egress
            if egress is None:
                egress = "image" in task["environment"] and bool(task.get("allow_internet"))
            spec = SessionCreate(
                environment=EnvSpec.model_validate(task["environment"]),
                limits=self.limits_for(task),
                ttl_s=self.session_ttl_s,
                egress=egress,
            )
            state["session_id"] = await client.create_session(spec)
            self._clients[state["session_id"]] = client
        except SandboxRequestError as e:
            d = e.detail if isinstance(e.detail, dict) else {"provision_failed": str(e.detail)}
            state["infra_error"] = f"provision_failed: {d.get('provision_failed')}"
            state["provision_failed"] = d
        except (SandboxUnavailable, httpx.HTTPError) as e:
            state["infra_error"] = f"create_session: {e}"
        return state

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        if state.get("provision_failed") and not state["done"]:
            state["done"] = True
            d = state["provision_failed"]
            return infra_failure(
                state["infra_error"], turn=state["turn"],
                provision_failed=str(d.get("provision_failed")), provision_log=str(d.get("log", ""))[-4000:],
            )  # fmt: skip
        return await super().step(state, response)

    def finish_request(self, task: dict[str, Any]) -> FinishRequest:
        env = "".join(f"{k}={_sh(v)} " for k, v in task.get("verifier_env", {}).items())
        egress = self.verifier_egress
        if egress is None:
            egress = "image" in task.get("environment", {})
        script = ScriptTests(
            files=task["tests"], binary_files=task.get("tests_binary", {}),
            command=f"{env}bash /tests/test.sh", egress=egress,
            allow_internet=bool(task.get("allow_internet")),
        )  # fmt: skip
        return FinishRequest(
            script=script,
            timeout_s=task.get("verifier_timeout_s", self.finish_timeout_s),
            limits=self.limits_for(task),
        )

    async def _finish(self, state: dict[str, Any]) -> StepResult:
        task = state["task"]
        result = await self._client_for(state).finish(
            state["session_id"], self.finish_request(task)
        )
        return self._harbor_step(state, result)

    def _harbor_step(self, state: dict[str, Any], result: Any) -> StepResult:
        end = self._end_reason(state)
        step = verdict_to_step(
            result, self.reward.mode, task_id=state["task"].get("id"), turns=state["turn"], end_reason=end,
            invalid_actions=state["invalid_actions"], invalid_kinds=state["invalid_kinds"],
        )  # fmt: skip
        if step.infra_error:
            return step
        step.metadata["verifier_stdout"] = truncate_middle(result.stdout or "", VERIFIER_OUTPUT_CAP)
        step.metadata["verifier_stderr"] = truncate_middle(result.stderr or "", VERIFIER_OUTPUT_CAP)
        reward = 0.0 if step.metadata.get("integrity_violation") else (result.reward or 0.0)
        step.rewards[TESTS] = min(1.0, max(0.0, reward))
        step.metadata["reward_raw"] = result.reward
        step.metadata["reward_file_error"] = result.reward_error
        step.metadata["reward_file_missing"] = bool(result.reward_error)
        step.rewards[INVALID_ACTION] = (
            0.0 - self.reward.invalid_action_penalty * state["invalid_actions"]
        )
        return step


def _sh(v: str) -> str:
    return shlex.quote(v)
