"""Expression, multi-turn: the agent quickstart's task (``dockyard quickstart --agent``).

The task and the held-out test are :mod:`dockyard.envs.expression`'s (``"list of size 12"``; the
spec checked by a trusted test in the sandbox). The answer now goes through tools, in the
Hermes format (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``):

=====================  ===================================================================
tool                   what it does
=====================  ===================================================================
``check(expression)``  evaluates the expression *in the sandbox* and returns what it is,
                       in the prompt's own words (``list of size 11``, ``int of size 12``,
                       ``error: TypeError: ...``); the spec is not consulted
``submit(expression)`` ends the episode; the held-out spec test decides
=====================  ===================================================================

An episode (at most ``max_turns`` policy turns)::

    user:       list of size 12
    assistant:  <tool_call>{"name":"check","arguments":{"expression":"list(range(1,12))"}}</tool_call>
    tool:       list of size 11
    assistant:  <tool_call>{"name":"submit","arguments":{"expression":"[0]*12"}}</tool_call>

Rewards: ``reward/tests`` = 1 when the submitted expression passes the held-out test, else 0
(no submission within ``max_turns``: 0); ``reward/invalid_action`` = ``-penalty × n`` for turns
without a tool call, unknown tools, bad arguments and expressions outside the whitelist
(:func:`~dockyard.envs.expression.check_expression`). A sandbox failure (in ``check`` or in the
final test) is ``infra_error``: masked, never scored.

:func:`demonstrations` writes the SFT warm start: scripted episodes of the protocol whose first
candidate is buggy with probability ``buggy_fraction``; after a ``check`` that shows the spec the
demonstration submits the same expression, otherwise a fresh draw (again possibly buggy). A
model imitating them passes ≈ ``(1-b) + b(1-b)`` (0.64 at b = 0.6); RL against the sandbox's
verdicts has the rest to win.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence, Sized
from typing import Any

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.expression import (
    ALLOWED_NAMES,
    BUGGY,
    GOOD,
    check_expression,
    prompt_text,
    sandbox_task,
)
from dockyard.envs.rewards import INVALID_ACTION, TESTS, RewardConfig, infra_failure
from dockyard.envs.sandboxed import SandboxPool, verdict_to_step
from dockyard.envs.tools import ToolRegistry, parse_tool_calls
from dockyard.envs.tools.registry import InfraError, ToolOutcome, render_tool_responses
from dockyard.sandbox.models import Task, Verdict

AGENT_SYSTEM = (
    "Write a Python expression for the spec. Tools: check(expression) shows what it is; "
    "submit(expression) is the answer."
)
MAX_OBSERVATION_CHARS = 80

# trusted: runs the candidate and says what it is, in the prompt's words
_DESCRIBE = """\
from solution import value

v = value()
t = type(v).__name__
if isinstance(v, (int, float)) and not isinstance(v, bool):
    print(f"{t} of size {v:g}" if isinstance(v, float) else f"{t} of size {v}")
elif hasattr(v, "__len__"):
    print(f"{t} of size {len(v)}")
else:
    print(t)
"""


def describe_task(expr: str, timeout_s: float = 10.0) -> Task:
    """The sandbox task behind ``check``: ``solution.py`` (untrusted) and a trusted script that
    prints ``"<type> of size <len or value>"``; its stdout (or the error) is the observation."""
    return Task.model_validate(
        {
            "files": {"solution.py": f"def value():\n    return ({expr})\n"},
            "test_files": {"describe.py": _DESCRIBE},
            "test_command": "python3 describe.py",
            "timeout_s": timeout_s,
            "limits": {"memory_mb": 256, "pids": 16, "cpu_s": 5},
        }
    )


def tool_call(name: str, expression: str) -> str:
    """One Hermes tool call (what the demonstrations write and the parser reads)."""
    body = json.dumps({"name": name, "arguments": {"expression": expression}})
    return f"<tool_call>{body}</tool_call>"


_SCHEMA = {
    "type": "object",
    "properties": {"expression": {"type": "string", "minLength": 1}},
    "required": ["expression"],
    "additionalProperties": False,
}


class ExpressionAgentEnvironment(BaseEnvironment):
    """Multi-turn expression tasks with ``check`` and ``submit`` tools (module docstring).

    Args:
        sandbox_urls: sandbox service URLs (round-robin).
        token: the services' bearer token, if any.
        reward: reward mode and the invalid-action penalty.
        timeout_s: wall-clock limit of one sandbox run (a check, or the final test).
        max_turns: policy turns before the episode ends unsubmitted (reward 0).
        system_prompt: the system message (null: none; the tiny model needs none).
    """

    name = "expression_agent"
    calls_tools = True

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward: RewardConfig | None = None,
        timeout_s: float = 10.0,
        max_turns: int = 3,
        system_prompt: str | None = AGENT_SYSTEM,
        max_wait_s: float = 120.0,
    ) -> None:
        super().__init__(reward)
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.pool = SandboxPool(sandbox_urls, token, max_wait_s=max_wait_s)
        self.timeout_s = timeout_s
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.tools = self._build_tools()

    def _build_tools(self) -> ToolRegistry:
        reg = ToolRegistry()

        @reg.tool("check", "Evaluate an expression in the sandbox; say what it is.", _SCHEMA)
        async def check(state: dict[str, Any], expression: str) -> str:
            why = check_expression(expression.strip())
            if why is not None:
                raise ValueError(f"expression rejected: {why}")
            res = await self.pool.client().run_task(describe_task(expression, self.timeout_s))
            if res.verdict == Verdict.infra_error:
                raise InfraError(res.detail[:300] or "sandbox infra_error")
            if res.verdict == Verdict.timeout:
                return "error: timed out"
            out = res.stdout.strip().splitlines()
            if res.exit_code == 0 and out:
                return out[-1][:MAX_OBSERVATION_CHARS]
            err = (res.stderr.strip().splitlines() or [res.verdict.value])[-1]
            return f"error: {err}"[:MAX_OBSERVATION_CHARS]

        @reg.tool("submit", "Submit the answer; the held-out test decides.", _SCHEMA)
        def submit(state: dict[str, Any], expression: str) -> str:
            why = check_expression(expression.strip())
            if why is not None:
                raise ValueError(f"expression rejected: {why}")
            state["submitted"] = expression.strip()
            return "submitted"

        return reg

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        user = {"role": "user", "content": prompt_text(task)}
        if self.system_prompt is None:
            return [user]
        return [{"role": "system", "content": self.system_prompt}, user]

    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        return {"task": task, "turn": 0, "submitted": None, "invalid_actions": 0, "done": False}

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        if state["done"]:
            raise ValueError("step() after the episode ended: call reset() for a new episode")
        state["turn"] += 1
        turn = parse_tool_calls(response)
        outcomes: list[ToolOutcome] = []
        if not turn.items:
            msg = "error: no tool call; write <tool_call>{...}</tool_call>"
            outcomes.append(ToolOutcome("invalid", msg, ok=False, error_kind="no_call"))
        for item in turn.items:
            out = await self.tools.execute(item, state)
            if out.infra_error:
                state["done"] = True
                return infra_failure(out.content, turn=state["turn"])
            out.content = out.content[:MAX_OBSERVATION_CHARS]
            outcomes.append(out)
            if state["submitted"] is not None:
                break
        state["invalid_actions"] += sum(o.invalid for o in outcomes)
        if state["submitted"] is not None or state["turn"] >= self.max_turns:
            state["done"] = True
            return self._shape(await self._final(state), response)
        return StepResult(
            rewards={},
            done=False,
            observation=render_tool_responses(outcomes),
            metadata={"tool_messages": [o.message() for o in outcomes], "turn": state["turn"]},
        )

    async def _final(self, state: dict[str, Any]) -> StepResult:
        task, expr = state["task"], state["submitted"]
        meta = {"turns": state["turn"], "invalid_actions": state["invalid_actions"]}
        if expr is None:
            step = StepResult(rewards={TESTS: 0.0}, metadata={"verdict": "not_submitted", **meta})
        else:
            res = await self.pool.client().run_task(sandbox_task(task, expr, self.timeout_s))
            step = verdict_to_step(res, self.reward.mode, task_id=task.get("id"), **meta)
        if not step.infra_error:
            step.rewards[INVALID_ACTION] = (
                0.0 - self.reward.invalid_action_penalty * state["invalid_actions"]
            )
        step.done = True
        return step

    async def finish(self, state: dict[str, Any], response: str) -> StepResult:
        """The rollout's turn limit came first: the verdict on what was submitted (nothing
        submitted: 0)."""
        state["done"] = True
        return self._shape(await self._final(state), response)

    async def close(self, state: dict[str, Any]) -> None:
        return None

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        """Single-turn use: one response is the whole episode (its calls, then the verdict)."""
        state = await self.reset(task)
        result = await self.step(state, response)
        if not result.done:
            state["done"] = True
            result = self._shape(await self._final(state), response)
        return result


def describe_locally(expr: str) -> str:
    """What ``check`` would say, computed here (the demonstrations; never a reward)."""
    b = __builtins__
    safe = {k: b[k] if isinstance(b, dict) else getattr(b, k) for k in ALLOWED_NAMES}
    try:
        v = eval(compile(expr, "<expr>", "eval"), {"__builtins__": safe}, {})
    except Exception as e:
        return f"error: {type(e).__name__}: {e}"[:MAX_OBSERVATION_CHARS]
    t = type(v).__name__
    if isinstance(v, int | float) and not isinstance(v, bool):
        return f"{t} of size {v:g}" if isinstance(v, float) else f"{t} of size {v}"
    return f"{t} of size {len(v)}" if isinstance(v, Sized) else t


def demonstration(
    task: dict[str, Any], rng: random.Random, buggy_fraction: float, system_prompt: str | None
) -> dict[str, Any]:
    """One scripted episode ``{"messages": [(system), user, assistant check(candidate), tool
    response, assistant submit(...)]}``; both assistant turns are what SFT teaches."""

    def draw() -> str:
        table = BUGGY if rng.random() < buggy_fraction else GOOD
        return rng.choice(table[task["kind"]]).format(n=task["size"])

    first = draw()
    seen = describe_locally(first)
    final = first if seen == prompt_text(task) else draw()
    head = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
    return {
        "messages": [
            *head,
            {"role": "user", "content": prompt_text(task)},
            {"role": "assistant", "content": tool_call("check", first)},
            {"role": "tool", "name": "check", "content": seen},
            {"role": "assistant", "content": tool_call("submit", final)},
        ]
    }


def demonstrations(
    tasks: list[dict[str, Any]],
    n: int,
    *,
    buggy_fraction: float = 0.6,
    seed: int = 0,
    system_prompt: str | None = AGENT_SYSTEM,
) -> list[dict[str, Any]]:
    """``n`` scripted episodes over ``tasks`` (see :func:`demonstration`)."""
    if not 0.0 <= buggy_fraction <= 1.0:
        raise ValueError(f"buggy_fraction={buggy_fraction}: must be in [0, 1]")
    rng = random.Random(seed)
    return [demonstration(rng.choice(tasks), rng, buggy_fraction, system_prompt) for _ in range(n)]
