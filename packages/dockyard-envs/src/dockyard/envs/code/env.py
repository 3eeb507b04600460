"""The code environment: a completion is run against held-out tests in the sandbox.

Flow for one response: extract the code (a fenced block or the bare text) → build
``solution.py`` (HumanEval completions are appended to the prompt; a full definition of the
entry point replaces it, keeping the prompt's imports) → the sandbox runs ``test_solution.py``
(held-out, force-restored; each assert is its own test) with the fast ``plain`` runner →
``reward/tests`` (binary, or the fraction passed), ``reward/format`` when the code was fenced.
Infra errors are masked, never scored 0 (:mod:`dockyard.envs.sandboxed`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.code.data import render_test_file
from dockyard.envs.code.extract import extract_code
from dockyard.envs.rewards import FORMAT, RewardConfig, approx_token_count
from dockyard.envs.sandboxed import SandboxPool, verdict_to_step
from dockyard.sandbox.models import Limits, Task

CODE_SYSTEM = (
    "Complete the Python function. Reply with the full function in one ```python code block."
)


def _prompt_imports(prompt: str) -> str:
    return "\n".join(ln for ln in prompt.splitlines() if re.match(r"^(from\s+\S+\s+)?import\s", ln))


def build_solution(task: dict[str, Any], response: str) -> tuple[str, bool]:
    """The ``solution.py`` for ``response`` and whether the code was fenced."""
    code, fenced = extract_code(response, task.get("entry_point"))
    defines = re.search(rf"def\s+{re.escape(task['entry_point'])}\s*\(", code) is not None
    if defines or not task.get("completion_style", False):
        return _prompt_imports(task["prompt"]) + "\n\n" + code, fenced
    return task["prompt"] + code, fenced


class CodeEnvironment(BaseEnvironment):
    """HumanEval-style code scoring through the sandbox service.

    Args:
        sandbox_urls: one or more sandbox service URLs (round-robin).
        token: bearer token of the services, if any.
        timeout_s: wall-clock limit of one evaluation inside the sandbox.
        limits: sandbox resource limits (memory, pids...).
        runner: ``plain`` (fast, fixture-free tests) or ``pytest``.
    """

    name = "code"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward: RewardConfig | None = None,
        timeout_s: float = 20.0,
        limits: Limits | None = None,
        runner: str = "plain",
        system_prompt: str = CODE_SYSTEM,
        count_tokens: Callable[[str], int] = approx_token_count,
        max_wait_s: float = 120.0,
    ) -> None:
        super().__init__(reward, count_tokens)
        self.pool = SandboxPool(sandbox_urls, token, max_wait_s=max_wait_s)
        self.timeout_s = timeout_s
        self.limits = limits or Limits(memory_mb=512, pids=64)
        self.runner = runner
        self.system_prompt = system_prompt

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": task["prompt"]},
        ]

    def sandbox_task(self, task: dict[str, Any], solution: str) -> Task:
        test_src, ids = render_test_file(task)
        return Task(
            files={"solution.py": solution},
            test_files={"test_solution.py": test_src},
            tests={"fail_to_pass": ids, "runner": self.runner},
            timeout_s=self.timeout_s,
            limits=self.limits,
            metadata={"task_id": str(task.get("id", ""))},
        )

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        solution, fenced = build_solution(task, response)
        result = await self.pool.client().run_task(self.sandbox_task(task, solution))
        step = verdict_to_step(result, self.reward.mode, task_id=task.get("id"))
        if not step.infra_error:
            step.rewards[FORMAT] = self.reward.format_weight if fenced else 0.0
        return self._shape(step, response)
