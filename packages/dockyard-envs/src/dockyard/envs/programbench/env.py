"""ProgramBench-style cleanroom reconstruction: rebuild a program from its behaviour.

Two variants, one verdict (:mod:`dockyard.envs.programbench.judge`):

* :class:`ProgramBenchEnvironment` (``programbench``, multi-turn): the agent works in a sandbox
  session holding ``./executable`` (the original, runnable) and ``README.md``, through the
  terminal tools (``run``, ``read_file``, ``write_file``, ``submit``). At the end the service's
  ``finish`` judges the session's files in a *fresh* sandbox (the original removed, a tripwire at
  its path): ``bash compile.sh``, then the held-out runs.
* :class:`ProgramBenchSingleTurnEnvironment` (``programbench_single``): the prompt holds the
  README and a few recorded runs; the response holds the files (``<file path="...">…</file>``
  blocks), judged the same way in a fresh sandbox that never had the original.
"""

from __future__ import annotations

import base64
import gzip
import io
import re
import tarfile
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.programbench import judge
from dockyard.envs.rewards import INVALID_ACTION, RewardConfig, approx_token_count, infra_failure
from dockyard.envs.sandboxed import SandboxPool
from dockyard.envs.terminal.env import TerminalEnvironment
from dockyard.sandbox.client import SandboxUnavailable
from dockyard.sandbox.models import FinishRequest, Limits, SessionCreate, Task

SYSTEM = (
    "You are working in a Linux terminal inside a fresh workspace. Use the tools to run "
    "programs and to read and write files. When done, call submit."
)
_FILE = re.compile(r'<file path="([^"\n]{1,200})">\n?(.*?)</file>', re.DOTALL)


def workspace_tarball(files: dict[str, tuple[bytes, int]]) -> str:
    """Base64 ``.tar.gz`` of ``{path: (content, mode)}`` (the original needs its exec bit)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for rel in sorted(files):
            data, mode = files[rel]
            info = tarfile.TarInfo(rel)
            info.size, info.mtime, info.mode = len(data), 0, mode
            t.addfile(info, io.BytesIO(data))
    return base64.b64encode(gzip.compress(buf.getvalue(), mtime=0)).decode()


def _check(reward_mode: str, build_timeout_s: float, run_timeout_s: float) -> None:
    if reward_mode not in ("fraction", "binary"):
        raise ValueError(f"reward_mode must be 'fraction' or 'binary', got {reward_mode!r}")
    if not 0 < build_timeout_s <= 1800 or not 0 < run_timeout_s <= 60:
        raise ValueError("build_timeout_s must be in (0, 1800] and run_timeout_s in (0, 60]")


class ProgramBenchEnvironment(TerminalEnvironment):
    """Multi-turn cleanroom tasks (see the module docstring).

    Args:
        sandbox_urls / token: the sandbox service(s).
        reward_mode: ``fraction`` (share of held-out runs matched) or ``binary`` (all of them).
        build_timeout_s: wall clock of ``compile.sh``; run_timeout_s: of each held-out run.
        max_turns / max_total_tokens / max_output_chars / limits / session_ttl_s / max_wait_s:
            as :class:`~dockyard.envs.terminal.env.TerminalEnvironment`.
    """

    name = "programbench"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward_mode: str = "fraction",
        build_timeout_s: float = 60.0,
        run_timeout_s: float = 10.0,
        max_turns: int = 20,
        max_total_tokens: int = 16384,
        max_output_chars: int = 4000,
        limits: Limits | dict[str, Any] | None = None,
        session_ttl_s: float = 900.0,
        invalid_action_penalty: float = 0.0,
        count_tokens: Callable[[str], int] = approx_token_count,
        max_wait_s: float = 120.0,
    ) -> None:
        _check(reward_mode, build_timeout_s, run_timeout_s)
        super().__init__(
            sandbox_urls, token,
            reward=RewardConfig(mode=reward_mode, invalid_action_penalty=invalid_action_penalty),
            max_turns=max_turns, max_total_tokens=max_total_tokens,
            max_output_chars=max_output_chars,
            limits=Limits.model_validate(limits) if isinstance(limits, dict) else limits,
            session_ttl_s=session_ttl_s, system_prompt=SYSTEM, count_tokens=count_tokens,
            max_wait_s=max_wait_s,
        )  # fmt: skip
        self.build_timeout_s = build_timeout_s
        self.run_timeout_s = run_timeout_s

    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        state: dict[str, Any] = {
            "task": task, "session_id": None, "turn": 0, "tokens": 0, "submitted": False,
            "invalid_actions": 0, "invalid_kinds": {}, "infra_error": None, "done": False,
        }  # fmt: skip
        files = {
            "executable": (base64.b64decode(task["executable_b64"]), 0o755),
            "README.md": (task["readme"].encode(), 0o644),
        }
        spec = SessionCreate.model_validate(
            {"repo": {"tarball": workspace_tarball(files)}, "limits": self.limits,
             "ttl_s": self.session_ttl_s}
        )  # fmt: skip
        client = self.pool.client()
        try:
            state["session_id"] = await client.create_session(spec)
            self._clients[state["session_id"]] = client
        except (SandboxUnavailable, httpx.HTTPError) as e:
            state["infra_error"] = f"create_session: {e}"
        return state

    async def _finish(self, state: dict[str, Any]) -> StepResult:
        task = state["task"]
        test_files, ft, ops = judge.build_request(task, self.build_timeout_s, self.run_timeout_s)
        req = FinishRequest.model_validate(
            {"test_files": test_files, "function_tests": ft,
             "timeout_s": judge.request_timeout_s(task, self.build_timeout_s, self.run_timeout_s)}
        )  # fmt: skip
        try:
            result = await self._client_for(state).finish(state["session_id"], req)
        except (SandboxUnavailable, httpx.HTTPError) as e:
            return infra_failure(f"finish: {e}", turn=state["turn"])
        end = self._end_reason(state)
        step = judge.verdict(
            result, ops, self.reward.mode, task_id=task.get("id"), turns=state["turn"],
            end_reason=end, invalid_actions=state["invalid_actions"],
            invalid_kinds=state["invalid_kinds"],
        )  # fmt: skip
        if not step.infra_error:
            step.rewards[INVALID_ACTION] = (
                0.0 - self.reward.invalid_action_penalty * state["invalid_actions"]
            )
        return step


def parse_files(response: str) -> dict[str, str]:
    """``{path: content}`` of the ``<file path="...">…</file>`` blocks (the last one wins)."""
    return {m.group(1).strip(): m.group(2) for m in _FILE.finditer(response)}


class ProgramBenchSingleTurnEnvironment(BaseEnvironment):
    """Single-turn cleanroom tasks: the response holds the files (see the module docstring).

    Args:
        sandbox_urls / token / max_wait_s: the sandbox service(s).
        reward_mode / build_timeout_s / run_timeout_s: as :class:`ProgramBenchEnvironment`.
        limits: resource limits of the judged run (``Limits`` fields).
    """

    name = "programbench_single"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward_mode: str = "fraction",
        build_timeout_s: float = 60.0,
        run_timeout_s: float = 10.0,
        limits: Limits | dict[str, Any] | None = None,
        count_tokens: Callable[[str], int] = approx_token_count,
        max_wait_s: float = 120.0,
    ) -> None:
        _check(reward_mode, build_timeout_s, run_timeout_s)
        super().__init__(RewardConfig(mode=reward_mode), count_tokens)
        self.pool = SandboxPool(sandbox_urls, token, max_wait_s=max_wait_s)
        self.build_timeout_s = build_timeout_s
        self.run_timeout_s = run_timeout_s
        lim = Limits.model_validate(limits) if isinstance(limits, dict) else limits
        self.limits = lim or Limits.model_validate({"memory_mb": 512, "pids": 128})

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "user", "content": task["single_turn_instruction"]}]

    def sandbox_task(self, task: dict[str, Any], files: dict[str, str]) -> tuple[Task, list[str]]:
        """The judged run: README in the base tree (never the original), the response's files."""
        test_files, ft, ops = judge.build_request(task, self.build_timeout_s, self.run_timeout_s)
        readme = {"README.md": (task["readme"].encode(), 0o644)}
        t = Task.model_validate(
            {
                "repo": {"tarball": workspace_tarball(readme)},
                "files": files,
                "test_files": test_files,
                "function_tests": ft,
                "timeout_s": judge.request_timeout_s(
                    task, self.build_timeout_s, self.run_timeout_s
                ),
                "limits": self.limits,
                "metadata": {"task_id": task.get("id")},
            }
        )
        return t, ops

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        files = parse_files(response)
        if "compile.sh" not in files:
            return self._shape(
                StepResult(
                    rewards={judge.TESTS: 0.0},
                    metadata={
                        "format_error": 'no <file path="compile.sh"> block',
                        "cleanroom_flags": [],
                        "task_id": task.get("id"),
                    },
                ),
                response,
            )
        try:
            t, ops = self.sandbox_task(task, files)
        except ValueError as e:  # files that cannot fit the run's own limits: the response's fault
            return self._shape(
                StepResult(rewards={judge.TESTS: 0.0}, metadata={"format_error": str(e)[:300]}),
                response,
            )
        result = await self.pool.client().run_task(t)
        step = judge.verdict(result, ops, self.reward.mode, task_id=task.get("id"))
        return self._shape(step, response)
