"""The wire format of the sandbox service: tasks, results, sessions (pydantic v2).

A *task* names a repository, an untrusted ``patch`` (what the policy wrote), trusted held-out
tests and how to run them; the *result* is a structured verdict. Everything the trainer turns
into a reward comes from :class:`TaskResult` — never from parsing the task's output.

Verdicts (``Verdict``):

* ``passed`` / ``failed`` — the tests ran to completion; ``passed`` iff ``resolved``.
* ``patch_rejected`` — the patch was unsafe (paths outside the tree, ``.git/``, symlinks
  leaving the tree) or did not apply.
* ``timeout`` / ``oom`` / ``resource_limit`` — a limit of the task was hit (wall clock;
  memory; processes, disk or file size).
* ``infra_error`` — the *service* failed (sandbox crashed, service restarted or unreachable).
  Not the policy's fault: trainers mask it out instead of scoring it 0.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dockyard.sandbox.envspec import EnvSpec, ScriptTests

MAX_METADATA_BYTES = 64 << 10
"""``metadata`` is echoed back with every result: its JSON is capped at this size (64 KiB)."""

# A commit id (4-40 hex digits) or a ref name as `git check-ref-format` allows one, never an
# option: it is passed to git after --end-of-options all the same (threat 18).
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+-]{0,254}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_ref(v: str) -> str:
    _check_arg(v, "repo.commit")
    if (
        not _REF.fullmatch(v)
        or ".." in v
        or "//" in v
        or v.endswith((".", "/", ".lock"))
        or "/." in v
    ):
        raise ValueError(
            f"{v[:80]!r} is not a commit id or a ref name (hex digits, or letters, digits and "
            "'._/+-' not starting with '-' or '.')"
        )
    return v


_INTERPRETER = re.compile(r"(?:/|[A-Za-z0-9_])[A-Za-z0-9._+/-]*")


def _check_arg(v: str, what: str) -> str:
    """A client string that reaches a command line as one argument: never an option."""
    if v.startswith("-"):
        raise ValueError(f"{what} {v[:80]!r} starts with '-' (refused: it would read as an option)")
    if any(c in v for c in "\x00\n\r"):
        raise ValueError(f"{what} {v[:80]!r} holds a NUL or line break")
    return v


class Verdict(StrEnum):
    passed = "passed"
    failed = "failed"
    patch_rejected = "patch_rejected"
    timeout = "timeout"
    oom = "oom"
    resource_limit = "resource_limit"
    infra_error = "infra_error"
    needs_network = "needs_network"  # a verifier declaring allow_internet was refused a host


class TestOutcome(StrEnum):
    __test__ = False  # not a pytest test class
    passed = "passed"
    failed = "failed"
    skipped = "skipped"
    error = "error"
    missing = "missing"


class TaskState(StrEnum):
    queued = "queued"
    running = "running"
    done = "done"
    cancelled = "cancelled"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RepoSpec(_Model):
    """Where the repository comes from: exactly one of ``path``, ``tarball``, ``git``.

    ``path`` is an absolute directory on the *server*, accepted only under a directory the
    operator allows (``--repo-root``); ``tarball`` a base64-encoded ``.tar.gz`` (members with
    ``..``, absolute paths or links leaving the tree are rejected); ``git`` a server path
    (under a ``--repo-root`` too) or a URL of a scheme the operator allows
    (``--allow-git-scheme``), checked out at ``commit`` (a commit id or ref name). An empty
    spec means an empty repository. History is always cut: the sandbox sees one commit holding
    the base tree.
    """

    path: str | None = Field(None, max_length=4096)
    tarball: str | None = None
    git: str | None = Field(None, max_length=4096)
    commit: str | None = Field(None, max_length=255)

    @field_validator("path")
    @classmethod
    def _abs_path(cls, v: str | None) -> str | None:
        if v is not None:
            _check_arg(v, "repo.path")
            if not v.startswith("/"):
                raise ValueError(f"repo.path {v[:80]!r}: give an absolute path on the server")
        return v

    @field_validator("git")
    @classmethod
    def _git_source(cls, v: str | None) -> str | None:
        return None if v is None else _check_arg(v, "repo.git")

    @field_validator("commit")
    @classmethod
    def _commit(cls, v: str | None) -> str | None:
        return None if v is None else _check_ref(v)

    @model_validator(mode="after")
    def _one_source(self) -> RepoSpec:
        given = [k for k in ("path", "tarball", "git") if getattr(self, k)]
        if len(given) > 1:
            raise ValueError(f"repo: give only one of path / tarball / git (got {given})")
        if self.commit and not self.git:
            raise ValueError("repo.commit needs repo.git (a URL or server path of a git repo)")
        if self.git and not self.commit:
            raise ValueError("repo.git needs repo.commit (a commit id or ref name)")
        return self


class Limits(_Model):
    """Per-task resource limits. Hitting one gives ``oom`` (memory) or ``resource_limit``."""

    memory_mb: int = Field(1024, ge=16, le=1 << 20, description="Memory cap of the task's tree.")
    pids: int = Field(256, ge=4, le=1 << 16, description="Process/thread cap of the task's tree.")
    output_bytes: int = Field(
        1 << 20, ge=1024, le=1 << 28, description="Cap per stream; head and tail are kept."
    )
    disk_mb: int = Field(
        512, ge=1, le=1 << 20, description="Workspace size cap (also max file size)."
    )
    inodes: int = Field(100_000, ge=100, le=1 << 26, description="Max files in the workspace.")
    cpu_s: int = Field(600, ge=1, le=86_400, description="RLIMIT_CPU of each process (seconds).")
    open_files: int = Field(1024, ge=16, le=1 << 20, description="RLIMIT_NOFILE.")


class FunctionCase(_Model):
    """One call of a function-level grader; ``expected`` never enters the sandbox."""

    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    expected: Any = None


class FunctionTests(_Model):
    """Call ``module.function`` on each case inside the sandbox; the JSON-serialised return
    values are compared with ``expected`` in the trusted service (threat 17: an object whose
    ``__eq__`` always returns True serialises as what it is, not as what it claims)."""

    module: str = Field(..., description="Importable module in the workspace, e.g. 'solution'.")
    function: str
    cases: list[FunctionCase] = Field(..., min_length=1)

    @field_validator("module")
    @classmethod
    def _module(cls, v: str) -> str:
        if not all(_IDENT.fullmatch(p) for p in v.split(".")):
            raise ValueError(f"{v[:80]!r} is not a dotted module name")
        return v

    @field_validator("function")
    @classmethod
    def _function(cls, v: str) -> str:
        if not _IDENT.fullmatch(v):
            raise ValueError(f"{v[:80]!r} is not a function name")
        return v


class TestsSpec(_Model):
    """Held-out tests, identified by pytest node ids relative to the repository root."""

    __test__ = False
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    runner: Literal["pytest", "plain", "split"] = Field(
        "pytest",
        description="'pytest'; 'plain': a minimal runner for fixture-free `test_*` functions "
        "(file.py::name ids), ~10x cheaper to start; 'split': like plain, but the held-out test "
        "code runs in a trusted process and calls the code under test in another one (values "
        "cross as plain data), so the code under test cannot forge the report. Needs every "
        "test file to be held out (test_files / test_patch).",
    )
    python: str | None = Field(
        None,
        description="The interpreter that runs the 'pytest' runner. None: the service's own, "
        "with its pytest. Over a layered image: a command of the image (`python`, "
        "`/usr/local/bin/python3.9`), started with -I but with its site dirs (editable installs' "
        ".pth files included), so the tests run with the image's Python, pytest and packages, "
        "as in the image's container (SWE-bench environments built by the layered builder).",
    )

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        if v is not None and not _INTERPRETER.fullmatch(v):
            raise ValueError(
                f"tests.python {v[:80]!r}: give a command name or an absolute path "
                "(letters, digits, '.', '_', '+', '-', '/'; not starting with '-')"
            )
        return v

    @field_validator("fail_to_pass", "pass_to_pass")
    @classmethod
    def _ids(cls, v: list[str]) -> list[str]:
        for tid in v:
            if not tid:
                raise ValueError("an empty test id")
            _check_arg(tid, "test id")
        return v

    @model_validator(mode="after")
    def _some(self) -> TestsSpec:
        if not self.fail_to_pass and not self.pass_to_pass:
            raise ValueError("tests: give at least one id in fail_to_pass or pass_to_pass")
        return self


class Task(_Model):
    """One evaluation: apply ``patch`` to ``repo``, restore held-out tests, run them."""

    repo: RepoSpec = Field(default_factory=RepoSpec)
    patch: str = Field("", description="Unified diff (git style) written by the policy.")
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Untrusted files written like a patch (path -> content), e.g. a solution.",
    )
    test_files: dict[str, str] = Field(
        default_factory=dict, description="Held-out files (path -> content), force-restored."
    )
    test_patch: str = Field("", description="Trusted diff adding/changing tests, applied last.")
    test_command: str | None = Field(
        None, description="Shell command; verdict by exit code (use `tests` for per-test results)."
    )
    tests: TestsSpec | None = None
    function_tests: FunctionTests | None = None
    setup_command: str | None = Field(None, description="Trusted command run before the patch.")
    timeout_s: float = Field(60.0, gt=0, le=3600)
    limits: Limits = Field(default_factory=Limits)
    network: bool = Field(False, description="Give the task a network (needs --allow-network).")
    environment: EnvSpec | None = Field(
        None,
        description="A provisioned environment (provision.py) whose prefix is mounted read-only "
        "at /opt/env in the task's jails; the repo stays the starting tree.",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description=f"Echoed back untouched (JSON of at most {MAX_METADATA_BYTES} bytes).",
    )

    @field_validator("metadata")
    @classmethod
    def _metadata_size(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_metadata(v)

    @model_validator(mode="after")
    def _fits_its_limits(self) -> Task:
        """Files that cannot fit the workspace the task asks for: a 422, not a verdict."""
        files = [*self.files.values(), *self.test_files.values()]
        size = sum(len(c.encode()) for c in files)
        if size > self.limits.disk_mb << 20:
            raise ValueError(
                f"files and test_files hold {size} bytes, over limits.disk_mb = "
                f"{self.limits.disk_mb} MiB: raise the limit or send less"
            )
        if len(files) >= self.limits.inodes:
            raise ValueError(
                f"{len(files)} files and test_files, over limits.inodes = {self.limits.inodes}"
            )
        return self

    @model_validator(mode="after")
    def _interpreter_of_an_image(self) -> Task:
        py = self.tests.python if self.tests is not None else None
        if py is not None and (self.environment is None or self.environment.image is None):
            raise ValueError(
                f"tests.python {py!r} names an interpreter of a layered image, and this task's "
                "environment has no image: leave it out to run the tests on the service's Python"
            )
        if py is not None and self.tests is not None and self.tests.runner != "pytest":
            raise ValueError(f"tests.python applies to runner 'pytest', not {self.tests.runner!r}")
        return self

    @model_validator(mode="after")
    def _how_to_test(self) -> Task:
        modes = [m for m in ("test_command", "tests", "function_tests") if getattr(self, m)]
        if len(modes) != 1:
            raise ValueError(
                "task: give exactly one of test_command, tests, function_tests "
                f"(got {modes or 'none'})"
            )
        return self


def _check_metadata(v: dict[str, Any]) -> dict[str, Any]:
    try:
        size = len(json.dumps(v, default=str).encode())
    except (TypeError, ValueError) as e:
        raise ValueError(f"metadata is not JSON: {e}") from e
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is {size} bytes of JSON, over the cap of {MAX_METADATA_BYTES}")
    return v


class Timings(_Model):
    queue_s: float = 0.0
    setup_s: float = 0.0
    apply_s: float = 0.0
    test_s: float = 0.0
    total_s: float = 0.0


class Usage(_Model):
    """Resource usage of the test phase (``None`` where the platform cannot tell)."""

    max_rss_mb: float | None = None
    cpu_s: float | None = None
    pids_peak: int | None = None
    memory_peak_mb: float | None = None


class TaskResult(_Model):
    task_id: str = ""
    verdict: Verdict
    resolved: bool = False
    tests: dict[str, TestOutcome] = Field(default_factory=dict)
    tests_tampered: bool = False
    tamper_paths: list[str] = Field(default_factory=list)
    patch_applied: bool = False
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    detail: str = Field("", description="Human-readable reason for the verdict.")
    timings: Timings = Field(default_factory=Timings)
    usage: Usage = Field(default_factory=Usage)
    metadata: dict[str, Any] = Field(default_factory=dict)
    reward: float | None = Field(None, description="A script verifier's reward file's number.")
    reward_error: str = Field(
        "", description="Why a script verifier's reward file was unusable (reward then 0)."
    )

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated

    @classmethod
    def infra(
        cls, detail: str, task_id: str = "", metadata: dict[str, Any] | None = None
    ) -> TaskResult:
        return cls(
            task_id=task_id, verdict=Verdict.infra_error, detail=detail, metadata=metadata or {}
        )


class TaskStatus(_Model):
    task_id: str
    state: TaskState
    verdict: Verdict | None = None


class Submitted(_Model):
    task_id: str


class SessionCreate(_Model):
    repo: RepoSpec = Field(default_factory=RepoSpec)
    limits: Limits = Field(default_factory=Limits)
    ttl_s: float = Field(
        600.0, gt=0, le=86_400, description="Idle time before the session is reaped."
    )
    network: bool = False
    egress: bool = Field(
        False,
        description="The session's commands and terminal reach the package registries and the "
        "installer table only, through a proxy of the session (its own network namespace "
        "otherwise; needs the service's --allow-network): an agent's `pip install` or "
        "`apt-get download` works on a node without the internet.",
    )
    setup_command: str | None = None
    environment: EnvSpec | None = Field(
        None,
        description="A provisioned environment (provision.py): its tree is the start, or, with "
        "a repo, only its prefix (read-only at /opt/env) is used.",
    )
    container: bool | None = Field(
        None,
        description="Run the session as Docker runs its image (layers/container.py): commands "
        "and terminal as the image's USER (root by default) over a writable layer of the "
        "session's own, which the script verifier stacks on (what the agent installs or writes "
        "anywhere reaches the tests). Only over a layered image (an environment with a "
        "Dockerfile); None: on for one, unless `network` is set.",
    )


class SessionInfo(_Model):
    session_id: str
    ttl_s: float


class ExecRequest(_Model):
    command: str
    timeout_s: float = Field(30.0, gt=0, le=3600)
    cwd: str = Field(".", description="Relative to the workspace root.")


class ExecResult(_Model):
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    verdict: Verdict | None = Field(None, description="Set when a limit was hit.")
    duration_s: float = 0.0


class FinishRequest(_Model):
    """Evaluate the session's workspace in a fresh sandbox: the same fields as a task's tests."""

    test_files: dict[str, str] = Field(default_factory=dict)
    test_patch: str = ""
    test_command: str | None = None
    tests: TestsSpec | None = None
    function_tests: FunctionTests | None = None
    script: ScriptTests | None = Field(
        None, description="A Harbor-style test script whose reward file is the reward."
    )
    agent_layer: bool = Field(
        True,
        description="A container session's script verifier runs over the session's writable "
        "layer (Docker's semantics: what the agent installed or wrote anywhere is there — and "
        "so is anything it changed that the tests run with, as under Docker). False: over the "
        "image as built and the workspace only, for tasks whose solution lives in the workspace.",
    )
    live: bool | None = Field(
        None,
        description="A container session's script verifier runs in the live container, as "
        "Harbor's `docker exec` runs a task's tests: servers the agent left running answer it on "
        "localhost, every file is as the agent left it (the default for a container session "
        "with `agent_layer`). Its /tests, /logs and processes are its own: no process of the "
        "agent sees them, so none can write its reward file. False: the container frozen and "
        "the verifier over a throwaway layer stacked on the session's.",
    )
    timeout_s: float = Field(60.0, gt=0, le=3600)
    limits: Limits | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("metadata")
    @classmethod
    def _metadata_size(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_metadata(v)


class Health(_Model):
    """``GET /healthz``: ``status`` and ``version`` for anyone; the rest only with
    ``detail=1`` and the token (the isolation names host cgroup paths)."""

    status: Literal["ok", "draining"]
    version: str
    workers: int | None = None
    running: int | None = None
    queued: int | None = None
    isolation: dict[str, Any] | None = None
    session_calls: dict[str, dict[str, int]] | None = Field(
        None,
        description="Per lane (long, short, tty; lanes.py): threads, running, waiting, queue.",
    )


JsonDict = Annotated[dict[str, Any], Field(default_factory=dict)]
