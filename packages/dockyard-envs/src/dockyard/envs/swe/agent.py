"""The repository agent environment (``swe_agent``): a SWE agent works in a sandbox session.

The episode machinery is the terminal environment's (:class:`TerminalEnvironment`: Hermes
``<tool_call>`` parsing, JSON-schema-checked tools, invalid actions penalised and counted,
``max_turns`` / ``max_total_tokens``, ``finish`` in a fresh sandbox, infra errors masked). What
this class adds:

* the session starts from the instance's repository at its base commit: a shipped manifest's
  regenerated tree, or a SWE-bench record's ``repo_path`` / ``repo_git`` + ``base_commit`` /
  ``repo_tarball`` (:func:`dockyard.envs.swe.env.repo_spec`);
* the tools a SWE agent expects (:mod:`dockyard.envs.swe.agent_tools`): ``bash``,
  ``str_replace_editor`` (view with line numbers / ranges, create, str_replace, insert,
  undo_edit), ``search``, ``find_file``, ``submit``;
* the answer is the session's workspace diff against the base tree; the reward is the instance's
  held-out tests — ``FAIL_TO_PASS`` and ``PASS_TO_PASS``, with the held-out test files (manifest)
  or the ``test_patch`` (SWE-bench) force-restored — run by ``finish`` in a fresh sandbox. The
  episode ends on ``submit``, at ``max_turns`` or past ``max_total_tokens``; the diff so far is
  scored in every case (``metadata["end_reason"]``).
* the test command and log parser come from the instance's environment spec
  (:mod:`dockyard.envs.swe.specs`; SWE-bench's own where it knows the repo). Pytest-driven
  setups are judged by the sandbox's runner report; others by SWE-bench's log parser
  (:mod:`dockyard.envs.swe.logverdict`). A repository no spec knows runs under the pytest runner.

* the instance's (repo, version) environment, when its setup has install steps, is provisioned
  once on the sandbox node and mounted read-only in the session and in ``finish``
  (:mod:`dockyard.envs.swe.provision`). One that cannot be provisioned ends the episode as an
  ``infra_error`` (masked, never scored) with ``provision_failed`` and ``provision_log``.

Rewards: ``reward/tests`` (binary or fraction), ``reward/invalid_action`` (``-penalty × n``).
Metadata adds ``instance_id``, ``tool_errors`` (editor/search errors: answers, not penalised).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.rewards import RewardConfig, approx_token_count, infra_failure
from dockyard.envs.swe.agent_tools import TOOL_NAMES, build_agent_tools
from dockyard.envs.swe.env import (
    builder_problems,
    cached_instance,
    repo_spec,
    task_provisioning,
    task_setup,
    task_setup_command,
)  # fmt: skip
from dockyard.envs.swe.evaluation import evaluation_fields
from dockyard.envs.swe.instance import Instance
from dockyard.envs.swe.logverdict import judge_log
from dockyard.envs.swe.pro import prompt_sections
from dockyard.envs.swe.provision import BUILDERS, ProvisionRefused
from dockyard.envs.swe.records import SweInstance, from_record
from dockyard.envs.swe.specs import EnvSetup
from dockyard.envs.terminal.env import TerminalEnvironment
from dockyard.sandbox.client import SandboxRequestError, SandboxUnavailable
from dockyard.sandbox.models import FinishRequest, Limits, RepoSpec, SessionCreate, TaskResult

AGENT_SYSTEM = (
    "You are a software engineer working in a repository checked out at the root of your "
    "workspace. Resolve the issue you are given by editing the repository's source files (not "
    "its tests). Explore with the tools, reproduce the problem, make the fix, check it, then "
    "call submit. Your changes to the workspace are your answer."
)


class SweAgentEnvironment(TerminalEnvironment):
    """Multi-turn SWE agent over a repository (see the module docstring).

    Args (beyond :class:`TerminalEnvironment`'s):
        spec_files: environment spec files (YAML/JSON) for repositories SWE-bench does not know.
        cache_size: materialised manifests kept in memory.
        tools: the tools offered, a subset of ``bash, str_replace_editor, search, find_file,
            submit`` (None: all; ``submit`` is always kept). Fewer tools, a shorter prompt.
        provision_network: provisioning steps may download packages (the sandbox service needs
            ``--allow-network``); otherwise they must find everything locally.
        builder: ``prefix`` or ``layers`` (:class:`~dockyard.envs.swe.env.SweEnvironment`): with
            ``layers`` the agent's session is the image's container (its Python, root over a
            layer of its own) and the held-out tests run on the image's Python.
    """

    name = "swe_agent"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward: RewardConfig | None = None,
        max_turns: int = 30,
        max_total_tokens: int = 32768,
        max_output_chars: int = 8000,
        finish_timeout_s: float = 120.0,
        limits: Limits | None = None,
        session_ttl_s: float = 1800.0,
        system_prompt: str = AGENT_SYSTEM,
        count_tokens: Callable[[str], int] = approx_token_count,
        max_wait_s: float = 120.0,
        spec_files: Sequence[str] = (),
        cache_size: int = 64,
        tools: Sequence[str] | None = None,
        provision_network: bool = False,
        builder: str = "prefix",
    ) -> None:
        if builder not in BUILDERS:
            raise ValueError(f"swe builder must be one of {', '.join(BUILDERS)}, got {builder!r}")
        self.builder = builder
        super().__init__(
            sandbox_urls, token, reward, max_turns, max_total_tokens, max_output_chars,
            finish_timeout_s, limits or Limits.model_validate({"memory_mb": 1024, "pids": 128}), session_ttl_s,
            system_prompt, count_tokens, max_wait_s,
        )  # fmt: skip
        self.tools = build_agent_tools(self._client_for, max_output_chars, tools)
        self.spec_files = list(spec_files)
        self.provision_network = provision_network
        self.cache_size = cache_size
        self._cache: collections.OrderedDict[str, Instance] = collections.OrderedDict()

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> list[str]:
        files = options.get("spec_files") or []
        problems = [f"spec_files: {f} is not a file" for f in files if not Path(f).is_file()]
        problems += builder_problems(options)
        unknown = sorted(set(options.get("tools") or ()) - set(TOOL_NAMES))
        if unknown:
            problems.append(f"tools: unknown {unknown}; choose from {', '.join(TOOL_NAMES)}")
        return problems

    # ------------------------------------------------------------------ the task
    def instance(self, task: dict[str, Any]) -> Instance | None:
        return cached_instance(self._cache, task, self.cache_size)

    @staticmethod
    def record(task: dict[str, Any]) -> SweInstance:
        """The task as a checked instance (SWE-bench's JSON-string test lists decoded, SWE-bench
        Pro's lower-case fields mapped); a manifest needs no ``patch`` / ``test_patch``."""
        return from_record({"patch": "", "test_patch": "", **task}, str(task.get("instance_id")))

    def setup(self, task: dict[str, Any]) -> EnvSetup:
        """The instance's environment spec; the pytest runner where no spec knows the repo."""
        return task_setup(task, self.spec_files)

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        user = (
            f"Repository: {task['repo']} (checked out at the workspace root)\n\n"
            f"<issue>\n{task['problem_statement'].strip()}\n</issue>\n\n"
            + (f"{pro}\n\n" if (pro := prompt_sections(task)) else "")
            + "Make the changes to the non-test files that resolve the issue, then call submit."
        )
        return [
            {"role": "system", "content": self.tools.system_prompt(self.system_prompt)},
            {"role": "user", "content": user},
        ]

    # ------------------------------------------------------------------ the episode
    def session_repo(self, task: dict[str, Any]) -> dict[str, Any]:
        return repo_spec(task, self.instance(task))

    async def reset(self, task: dict[str, Any]) -> dict[str, Any]:
        try:
            self.instance(task)  # materialise (sdist fetch) before a session is made
        except RuntimeError as e:  # the sdist could not be fetched: infrastructure
            return {**self.new_state(task), "infra_error": f"instance: {e}", "tool_errors": 0}
        state = {**self.new_state(task), "tool_errors": 0}
        try:
            prov = task_provisioning(task, self.spec_files, self.provision_network, self.builder)
            setup = task_setup_command(prov, task)
        except ProvisionRefused as e:
            return self._provision_failed(state, {"provision_failed": str(e), "log": ""})
        client = self.pool.client()
        try:
            spec = SessionCreate(
                repo=RepoSpec.model_validate(self.session_repo(task)), limits=self.limits,
                environment=None if prov is None else prov.spec, setup_command=setup,
                ttl_s=self.session_ttl_s,
            )  # fmt: skip
            state["session_id"] = await client.create_session(spec)
            self._clients[state["session_id"]] = client
        except SandboxRequestError as e:
            if not (isinstance(e.detail, dict) and "provision_failed" in e.detail):
                raise
            return self._provision_failed(state, e.detail)
        except (SandboxUnavailable, httpx.HTTPError) as e:
            state["infra_error"] = f"create_session: {e}"
        return state

    @staticmethod
    def _provision_failed(state: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
        state["infra_error"] = f"provision_failed: {d.get('provision_failed')}"
        state["provision_failed"] = d
        return state

    async def step(self, state: dict[str, Any], response: str) -> StepResult:
        d = state.get("provision_failed")
        if d and not state["done"]:  # masked, never scored; the reason and the build's log
            state["done"] = True
            return infra_failure(
                state["infra_error"], turn=state["turn"], provision_failed=str(d["provision_failed"]),
                provision_log=str(d.get("log", ""))[-4000:],
            )  # fmt: skip
        return await super().step(state, response)

    def finish_request(self, task: dict[str, Any]) -> FinishRequest:
        rec = self.record(task)
        prov = task_provisioning(task, self.spec_files, self.provision_network, self.builder)
        python = None if prov is None else prov.python
        fields = evaluation_fields(rec, self.instance(task), self.setup(task), python)
        return FinishRequest(
            **fields, timeout_s=self.finish_timeout_s, metadata={"instance_id": rec.instance_id}
        )

    async def finish_result(self, state: dict[str, Any]) -> TaskResult:
        task = state["task"]
        req = self.finish_request(task)
        result = await self._client_for(state).finish(state["session_id"], req)
        state["verdict_source"] = "runner_report"
        if req.test_command is not None:
            result = judge_log(result, self.setup(task), self.record(task).to_task())
            state["verdict_source"] = "log_parser"
        return result

    def episode_metadata(self, state: dict[str, Any]) -> dict[str, Any]:
        return {
            "instance_id": str(state["task"]["instance_id"]),
            "tool_errors": state.get("tool_errors", 0),
            "verdict_source": state.get("verdict_source", "runner_report"),
        }
