"""The SWE environment: a response's unified diff is applied and held-out tests decide.

Task: a shipped manifest (:mod:`dockyard.envs.swe.instance`) or a SWE-bench record
(:mod:`dockyard.envs.swe.data`). Prompt: the problem statement, plus — in the ``oracle`` context
mode (SWE-bench's "oracle retrieval") — the content of the file the gold patch edits.

Score: :func:`~dockyard.envs.swe.patch.extract_patch` → one sandbox task (repo, patch,
held-out test files force-restored, ``FAIL_TO_PASS`` + ``PASS_TO_PASS``) → ``reward/tests``:
1 if resolved (``binary``) or the fraction of those tests passing (``fraction``);
``reward/format`` when a diff was found. ``patch_rejected`` and ``tests_tampered`` verdicts
score 0 and set ``integrity_violation``; sandbox infra errors are masked.

Environment: when the instance's (repo, version) setup (:mod:`dockyard.envs.swe.specs`) has
install steps, the task names its provisioned environment (:mod:`dockyard.envs.swe.provision`:
built once per (repo, version) on the sandbox node, mounted read-only). One that cannot be
provisioned (a refused step, a failed build) is an ``infra_error`` — masked, never scored — with
``provision_failed`` and ``provision_log`` in the metadata.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dockyard.core.interfaces.environment import StepResult
from dockyard.envs.base import BaseEnvironment
from dockyard.envs.rewards import FORMAT, TESTS, RewardConfig, approx_token_count, infra_failure
from dockyard.envs.sandboxed import SandboxPool, verdict_to_step
from dockyard.envs.swe.evaluation import evaluation_fields
from dockyard.envs.swe.instance import Instance, materialize
from dockyard.envs.swe.logverdict import judge_log
from dockyard.envs.swe.patch import extract_patch
from dockyard.envs.swe.pro import before_repo_set, prompt_sections
from dockyard.envs.swe.provision import (
    BUILDERS,
    Provisioning,
    ProvisionRefused,
    environment_for,
    provision_failure,
)  # fmt: skip
from dockyard.envs.swe.records import from_record
from dockyard.envs.swe.repofiles import repo_files
from dockyard.envs.swe.specs import EnvSetup, resolve_setup
from dockyard.sandbox.envspec import EnvSpec
from dockyard.sandbox.models import Limits, RepoSpec, Task

SWE_SYSTEM = (
    "You are a software engineer fixing a bug in a Python repository. Reply with a unified diff "
    "(git style: --- a/path, +++ b/path, @@ hunks) in one ```diff code block."
)


def cached_instance(
    cache: collections.OrderedDict[str, Instance], task: dict[str, Any], size: int
) -> Instance | None:
    """``materialize(task)`` through an LRU ``cache`` of ``size`` entries; None for a plain
    SWE-bench record (no ``source``: nothing to materialise)."""
    if "source" not in task:
        return None
    key = str(task["instance_id"])
    inst = cache.get(key)
    if inst is None:
        inst = materialize(task)
        cache[key] = inst
        while len(cache) > size:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return inst


def repo_spec(task: dict[str, Any], inst: Instance | None) -> dict[str, Any]:
    """Where the sandbox finds the task's repository at its base commit (a ``RepoSpec`` dict):
    a materialised manifest's tarball, else the record's ``repo_path`` / ``repo_git`` (at
    ``base_commit``) / ``repo_tarball``."""
    if inst is not None:
        return {"tarball": inst.tarball_b64()}
    spec = {
        "path": task.get("repo_path"),
        "git": task.get("repo_git"),
        "commit": task.get("base_commit") if task.get("repo_git") else None,
        "tarball": task.get("repo_tarball"),
    }
    return {k: v for k, v in spec.items() if v}


def task_provisioning(
    task: dict[str, Any], spec_files: Sequence[str] = (), network: bool = False,
    builder: str = "prefix",
) -> Provisioning | None:  # fmt: skip
    """The provisioning of ``task``'s (repo, version) (None: no spec knows the repository):
    its environment and repository stage, for ``builder`` (:mod:`~dockyard.envs.swe.provision`).
    Raises :class:`ProvisionRefused` naming the step that cannot run. Resolved once per (repo,
    version, spec files, builder) in a process; the repository's files (requirements at
    environment_setup_commit) come from the first task."""
    rec = from_record({"patch": "", "test_patch": "", **task}, str(task.get("instance_id")))
    key = (rec.repo, rec.version, rec.flavor, tuple(spec_files), network, builder)
    if key not in _ENVS:
        try:
            setup = resolve_setup(rec, spec_files)
            _ENVS[key] = environment_for(
                setup, network=network, files=repo_files(task), builder=builder
            )
        except LookupError:
            _ENVS[key] = None
        except ProvisionRefused as e:
            _ENVS[key] = e
    found = _ENVS[key]
    if isinstance(found, ProvisionRefused):
        raise found
    return found


def task_environment(
    task: dict[str, Any], spec_files: Sequence[str] = (), network: bool = False,
    builder: str = "prefix",
) -> EnvSpec | None:  # fmt: skip
    """The provisioned environment of ``task`` (:func:`task_provisioning`'s spec)."""
    prov = task_provisioning(task, spec_files, network, builder)
    return None if prov is None else prov.spec


def task_setup_command(prov: Provisioning | None, task: dict[str, Any]) -> str | None:
    """What runs in the task's repository before the patch: the plan's repository stage,
    then SWE-bench Pro's remaining ``before_repo_set_cmd`` lines (:mod:`~dockyard.envs.swe.pro`).
    Raises :class:`ProvisionRefused` for a before_repo_set_cmd line it cannot honour."""
    parts = [prov.setup_command] if prov is not None and prov.setup_command else []
    rec = from_record({"patch": "", "test_patch": "", **task}, str(task.get("instance_id")))
    if rec.flavor == "swebench_pro":
        parts += before_repo_set(rec)
    if len(parts) <= 1:
        return parts[0] if parts else None
    return " && ".join(f"( {p} )" for p in parts)


_ENVS: dict[tuple[Any, ...], Provisioning | ProvisionRefused | None] = {}


def task_setup(task: dict[str, Any], spec_files: Sequence[str] = ()) -> EnvSetup:
    """``task``'s environment spec; where no spec knows the repository, the sandbox's pytest
    runner on the repository as it is."""
    rec = from_record({"patch": "", "test_patch": "", **task}, str(task.get("instance_id")))
    try:
        return resolve_setup(rec, spec_files)
    except LookupError:
        return EnvSetup(repo=str(task.get("repo")), version="*", test_cmd="pytest")


def builder_problems(options: dict[str, Any]) -> list[str]:
    """A pre-flight line for an unknown ``builder`` option (none when it is fine)."""
    b = options.get("builder", "prefix")
    return [] if b in BUILDERS else [f"builder: {b!r} is not one of {', '.join(BUILDERS)}"]


class SweEnvironment(BaseEnvironment):
    """SWE-bench-style patch scoring through the sandbox (see the module docstring).

    Args:
        sandbox_urls: sandbox service URL(s), used round-robin.
        context: ``oracle`` (include the buggy file in the prompt) or ``none``.
        timeout_s: test-run wall-clock limit in the sandbox.
        cache_size: materialised instances kept in memory (repo tarball, gold patch).
        spec_files: environment spec files (YAML/JSON) for repositories SWE-bench does not know.
        provision_network: provisioning steps may download packages (the sandbox service needs
            ``--allow-network``); otherwise they must find everything locally.
        builder: ``prefix`` (the sandbox's prefix environments, tests on its Python) or
            ``layers`` (the spec built as an image, as SWE-bench's Docker images are: tests on
            the image's Python; :mod:`~dockyard.envs.swe.provision`).
    """

    name = "swe"

    def __init__(
        self,
        sandbox_urls: str | Sequence[str],
        token: str | None = None,
        reward: RewardConfig | None = None,
        context: str = "oracle",
        timeout_s: float = 60.0,
        limits: Limits | None = None,
        system_prompt: str = SWE_SYSTEM,
        count_tokens: Callable[[str], int] = approx_token_count,
        cache_size: int = 64,
        max_wait_s: float = 120.0,
        spec_files: Sequence[str] = (),
        provision_network: bool = False,
        builder: str = "prefix",
    ) -> None:
        super().__init__(reward, count_tokens)
        if context not in ("oracle", "none"):
            raise ValueError(f"swe context must be 'oracle' or 'none', got {context!r}")
        if builder not in BUILDERS:
            raise ValueError(f"swe builder must be one of {', '.join(BUILDERS)}, got {builder!r}")
        self.builder = builder
        self.pool = SandboxPool(sandbox_urls, token, max_wait_s=max_wait_s)
        self.context = context
        self.timeout_s = timeout_s
        self.limits = limits or Limits(memory_mb=1024, pids=128)
        self.system_prompt = system_prompt
        self.cache_size = cache_size
        self.spec_files = list(spec_files)
        self.provision_network = provision_network
        self._cache: collections.OrderedDict[str, Instance] = collections.OrderedDict()

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> list[str]:
        files = options.get("spec_files") or []
        return [f"spec_files: {f} is not a file" for f in files if not Path(f).is_file()] + (
            builder_problems(options)
        )

    def instance(self, task: dict[str, Any]) -> Instance | None:
        """The materialised manifest (cached), or None for a plain SWE-bench record."""
        return cached_instance(self._cache, task, self.cache_size)

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        parts = [f"Repository: {task['repo']}\n\nIssue:\n{task['problem_statement']}"]
        if pro := prompt_sections(task):
            parts.append(pro)
        inst = self.instance(task)
        if self.context == "oracle" and inst is not None:
            src = inst.files[inst.source_file].decode("utf-8")
            parts.append(f"File `{inst.source_file}`:\n```python\n{src}```")
        parts.append("Write the patch that fixes the issue.")
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def setup(self, task: dict[str, Any]) -> EnvSetup:
        """The instance's environment spec; the pytest runner where no spec knows the repo."""
        return task_setup(task, self.spec_files)

    def sandbox_task(self, task: dict[str, Any], patch: str) -> Task:
        inst = self.instance(task)
        rec = from_record({"patch": "", "test_patch": "", **task}, str(task["instance_id"]))
        prov = task_provisioning(task, self.spec_files, self.provision_network, self.builder)
        fields = evaluation_fields(
            rec, inst, self.setup(task), None if prov is None else prov.python
        )
        return Task(
            repo=RepoSpec(**repo_spec(task, inst)),
            patch=patch,
            **fields,
            timeout_s=self.timeout_s,
            limits=self.limits,
            environment=None if prov is None else prov.spec,
            setup_command=task_setup_command(prov, task),
            metadata={"instance_id": rec.instance_id},
        )

    async def score(self, task: dict[str, Any], response: str) -> StepResult:
        patch = extract_patch(response)
        if not patch:
            step = StepResult(
                rewards={TESTS: 0.0, FORMAT: 0.0},
                metadata={"verdict": "no_patch", "resolved": False, "integrity_violation": False},
            )
            return self._shape(step, response)
        try:
            sandbox_task = self.sandbox_task(task, patch)
        except ProvisionRefused as e:  # the environment cannot be built here: masked
            return infra_failure(
                f"provision_failed: {e}", provision_failed=str(e), provision_log=""
            )
        result = await self.pool.client().run_task(sandbox_task)
        if sandbox_task.test_command is not None:  # the spec's own command: its log decides
            rec = from_record({"patch": "", "test_patch": "", **task}, str(task["instance_id"]))
            result = judge_log(result, self.setup(task), rec.to_task())
        step = verdict_to_step(result, self.reward.mode, instance_id=task.get("instance_id"))
        step.metadata.update(provision_failure(result) or {})
        if not step.infra_error:
            step.rewards[FORMAT] = self.reward.format_weight
        return self._shape(step, response)
