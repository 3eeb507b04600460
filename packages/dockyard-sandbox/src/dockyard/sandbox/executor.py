"""One task, end to end: materialise → setup → apply the patch → integrity → tests → verdict.

Trust boundaries in order:

1. the repository and ``setup_command`` are trusted (they come from the dataset);
2. the ``patch`` / ``files`` are untrusted: paths are validated, then ``git apply`` runs as the
   task's unprivileged uid; files that alter Python/pytest start-up are reverted and flagged;
3. held-out tests (``test_files``, ``test_patch``) are written after the patch, root-owned and
   bind-mounted read-only; pytest's config comes from the base tree, outside the workspace;
4. the tests run in a fresh jail; outcomes arrive over a pipe (see ``inside/runner.py``) and
   are decided here, never from the task's stdout.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import math
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockyard.sandbox import integrity, patches, pycache
from dockyard.sandbox.cgroups import Probe
from dockyard.sandbox.envspec import ENV_MOUNT
from dockyard.sandbox.jail import Cancel, JailOutcome, JailSpec
from dockyard.sandbox.jail import run as jail_run
from dockyard.sandbox.models import (
    FunctionTests,
    Limits,
    Task,
    TaskResult,
    TestOutcome,
    TestsSpec,
    Timings,
    Usage,
    Verdict,
)
from dockyard.sandbox.paths import FULL_ERRNOS, UnsafePath, check_no_links, force_write
from dockyard.sandbox.provision import Provisioned, ProvisionFailed
from dockyard.sandbox.repos import _GIT_ENV, RepoCache, RepoError
from dockyard.sandbox.toolchain import TASK_MOUNT, WORKSPACE, runner_argv
from dockyard.sandbox.workspace import UidPool, Workspaces
from dockyard.sandbox.zygote import Zygote

log = logging.getLogger("dockyard.sandbox")

# apply_fn(workspace, uid) -> touched paths; raises UnsafePath to reject.
ApplyFn = Callable[[Path, int], list[str]]


@dataclass
class Context:
    """Service-wide state an execution needs."""

    probe: Probe
    cache: RepoCache
    workspaces: Workspaces
    uids: UidPool
    trusted_root: Path
    allow_network: bool = False
    registries: tuple[str, ...] = ()  # extra hosts provisioning may reach (egress.py)
    isolation: str = "bwrap"  # bwrap | unshare | none (resolved by isolation.resolve)
    zygote: Zygote | None = None  # runs test phases in pre-started interpreters (zygote.py)
    provisioner: Any = None  # provision.Provisioner: a task's ``environment`` (set by the app)

    def __post_init__(self) -> None:
        self.trusted_root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.trusted_root, 0o711)


class Rejected(Exception):
    """The patch is unsafe or does not apply: verdict ``patch_rejected``."""


class Infra(Exception):
    """Something trusted failed (setup, test patch, repo): verdict ``infra_error``."""


class LimitHit(Exception):
    """The task's own content ran out of its workspace: verdict ``resource_limit`` (threat 21:
    never ``infra_error``, which the trainer masks instead of scoring)."""


_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "File too large")


def _full_detail(ws: Path | None, limits: Limits, what: str) -> str:
    which = f"limits.disk_mb = {limits.disk_mb} MiB"
    if ws is not None:
        with contextlib.suppress(OSError):
            if os.statvfs(ws).f_favail == 0:
                which = f"limits.inodes = {limits.inodes}"
    return f"workspace full while {what} ({which})"


@contextlib.contextmanager
def _room(run: _Run, what: str) -> Iterator[None]:
    """Turn a write that ran out of the workspace's space or inodes into :class:`LimitHit`."""
    try:
        yield
    except OSError as e:
        if e.errno in FULL_ERRNOS:  # space or inodes, quota, file size, links
            raise LimitHit(_full_detail(run.ws, run.task.limits, what)) from e
        raise


class TestsBlocked(Exception):
    """The policy's changes keep the held-out tests from being put in place: verdict
    ``failed`` with ``tests_tampered`` (never ``infra_error``: that would mask the sample)."""

    __test__ = False


def _applies_to(base: Path, patch: str) -> bool:
    """Does ``patch`` apply to the (root-owned, cached) base tree? ``--check`` writes nothing."""
    r = subprocess.run(
        ["git", "apply", "--check", "--whitespace=nowarn", "--recount", "-"],
        input=patch.encode() if patch.endswith("\n") else (patch + "\n").encode(),
        cwd=base,
        env={**_GIT_ENV, "GIT_DIR": ".git", "GIT_WORK_TREE": "."},
        capture_output=True,
        timeout=120,
    )
    return r.returncode == 0


def _out_of_room(ws: Path, stderr: str) -> bool:
    """Did a git apply / patch of ours fail for want of room (not for the patch itself)?"""
    if any(t in stderr for t in _FULL_TEXT):
        return True
    try:
        st = os.statvfs(ws)
    except OSError:
        return False
    return st.f_bavail == 0 or st.f_favail == 0


@dataclass
class _Run:
    task: Task
    ctx: Context
    cancel: Cancel | None
    uid: int = 0
    ws: Path | None = None
    trusted: Path | None = None
    base: Path | None = None
    env: Provisioned | None = None  # the task's provisioned environment (its prefix)
    tamper: list[str] = field(default_factory=list)
    ro_files: list[str] = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)


@functools.cache
def _setpriv() -> str | None:
    return shutil.which("setpriv")


def _as_uid(argv: list[str], uid: int) -> tuple[list[str], dict]:
    """``argv`` run as ``uid`` (no groups) when the service is root. Through ``setpriv`` where
    there is one: ``subprocess`` given ``user=`` must ``fork`` the whole service process (no
    ``vfork`` with a uid change), tens of ms for a large one, in every task."""
    if os.geteuid() != 0:
        return argv, {}
    if (sp := _setpriv()) is not None:
        return [sp, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv], {}
    return argv, {"user": uid, "group": uid, "extra_groups": []}


def git_apply(ws: Path, patch: str, uid: int) -> None:
    """Apply ``patch`` as ``uid`` (git apply, then GNU patch with fuzz); raise Rejected."""
    if not patch.strip():
        return
    if not patch.endswith("\n"):
        patch += "\n"
    # The workspace's own repository (the base tree's, copied: no task code has run yet),
    # named so that git does not look for it up the path: the task uid may not traverse the
    # service's work dir, and git's discovery then fails ("failed to stat") before applying.
    env = (
        {**_GIT_ENV, "GIT_DIR": ".git", "GIT_WORK_TREE": "."}
        if (ws / ".git").is_dir()
        else _GIT_ENV
    )
    kw = {"cwd": ws, "env": env, "capture_output": True, "timeout": 120}
    argv, as_uid = _as_uid(["git", "apply", "--whitespace=nowarn", "--recount", "-"], uid)
    r = subprocess.run(argv, input=patch.encode(), **kw, **as_uid)
    if r.returncode == 0:
        return
    argv, as_uid = _as_uid(
        ["patch", "--batch", "--fuzz=5", "-p1", "--no-backup-if-mismatch", "-r", "-", "--forward"],
        uid,
    )
    r2 = subprocess.run(argv, input=patch.encode(), **kw, **as_uid)
    if r2.returncode != 0:
        err = r.stderr.decode(errors="replace")
        if _out_of_room(
            ws, err + r2.stdout.decode(errors="replace") + r2.stderr.decode(errors="replace")
        ):
            raise OSError(errno.ENOSPC, f"applying the patch: {err[:300]}")
        raise Rejected(f"patch does not apply: {err[:1000]}")


def patch_apply_fn(task: Task) -> ApplyFn:
    def apply(ws: Path, uid: int) -> list[str]:
        info = patches.parse(task.patch)
        for rel in info.touched:
            check_no_links(ws, rel)  # no symlinks on the way (existing ones in the base tree)
        git_apply(ws, task.patch, uid)
        touched = list(info.touched)
        for rel, content in task.files.items():
            check_no_links(ws, rel)
            force_write(ws, rel, content.encode(), uid=uid, gid=uid, mode=0o644)
            touched.append(rel)
        return touched

    return apply


def _jail(
    run: _Run,
    argv: list[str],
    timeout_s: float,
    limits: Limits,
    *,
    report: bool = False,
    ro_binds: list[tuple[str, str]] | None = None,
) -> JailOutcome:
    assert run.ws is not None
    spec = JailSpec(
        argv=argv,
        workspace=run.ws,
        uid=run.uid,
        limits=limits,
        timeout_s=timeout_s,
        network=run.task.network and run.ctx.allow_network,
        ro_binds=ro_binds or [],
        report=report,
        name=f"t-{uuid.uuid4().hex[:12]}",
        isolation=run.ctx.isolation,
        zygote=run.ctx.zygote if report else None,
    )
    if run.env is not None:  # the prefix read-only at /opt/env; the runner adds its site dir
        if (run.env.prefix / "site" / "pytest").is_dir():
            spec.zygote = None  # the environment pins its own pytest: not the zygote's, preloaded
        env_ro, spec.binds = run.env.binds(run.ws)
        spec.ro_binds = [*env_ro, *spec.ro_binds]
        # (an environment may name more import dirs, e.g. a src-layout repository's: its env)
        spec.env = {"DOCKYARD_ENV_SITE": f"{ENV_MOUNT}/site", **run.env.jail_env()}
    return jail_run(spec, run.ctx.probe, run.cancel)


def _limit_verdict(o: JailOutcome, ws_full: bool) -> tuple[Verdict, str] | None:
    if o.oom:
        return Verdict.oom, "memory limit hit (OOM kill in the task's cgroup)"
    if o.pids_limit:
        return Verdict.resource_limit, "process limit hit (pids cgroup)"
    if ws_full or o.exit_code in (153, -25):
        return Verdict.resource_limit, "disk / file size limit hit"
    if o.timed_out:
        return Verdict.timeout, "wall-clock limit hit; the whole process tree was killed"
    if o.cancelled:
        return Verdict.infra_error, "cancelled"
    return None


def outcomes_from_report(raw: bytes, ids: list[str]) -> tuple[dict[str, TestOutcome], list[str]]:
    """Per-test outcomes from the runner's JSON lines. Returns (outcomes, problems)."""
    phases: dict[str, dict[str, dict]] = {}
    collect_errors: list[str] = []
    problems: list[str] = []
    forged: set[str] = set()
    for line in raw.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            problems.append("unreadable report record")
            continue
        if not isinstance(rec, dict):
            problems.append("unreadable report record")
            continue
        if rec.get("k") == "test":
            p = phases.setdefault(str(rec.get("id")), {})
            when = str(rec.get("when"))
            if when in p:
                problems.append(f"duplicate report for {rec.get('id')} ({when})")
                forged.add(str(rec.get("id")))
            else:
                p[when] = rec
        elif rec.get("k") == "collect_error":
            collect_errors.append(str(rec.get("id")))
    out: dict[str, TestOutcome] = {}
    for tid in ids:
        if tid not in phases and (under := _cases_of(tid, phases)):
            # an id naming a parametrised function (or a class, a file): the runner ran every
            # case under it; it passed if they all did
            out[tid] = _worst([_outcome(c, phases[c], forged) for c in under])
            continue
        p = phases.get(tid)
        if p is None:
            file = tid.split("::", 1)[0]
            out[tid] = (
                TestOutcome.error
                if any(c == file or c.startswith(file) for c in collect_errors)
                else TestOutcome.missing
            )
        else:
            out[tid] = _outcome(tid, p, forged)
    return out, problems


def _cases_of(tid: str, phases: dict[str, dict[str, dict]]) -> list[str]:
    """The reported ids under ``tid``: its parametrised cases, or a class's or file's tests."""
    return [k for k in phases if k.startswith((f"{tid}[", f"{tid}::"))]


_WORST = ("failed", "error", "missing", "passed", "skipped")  # a group is its worst case


def _worst(outcomes: list[TestOutcome]) -> TestOutcome:
    """A group of cases: passed when none failed, errored or went missing (skipped ones aside),
    skipped when all were."""
    return min(outcomes, key=lambda o: _WORST.index(o.value))


def _outcome(tid: str, p: dict[str, dict], forged: set[str]) -> TestOutcome:
    """One test's outcome from its phases' records."""
    if tid in forged:
        return TestOutcome.failed
    if p.get("setup", {}).get("outcome") == "failed":
        return TestOutcome.error
    if "call" in p:
        c = p["call"]
        if c.get("outcome") == "passed":
            failed_teardown = p.get("teardown", {}).get("outcome") == "failed"
            return TestOutcome.error if failed_teardown else TestOutcome.passed
        if c.get("outcome") == "skipped" or c.get("xfail"):
            return TestOutcome.skipped
        return TestOutcome.failed
    if p.get("setup", {}).get("outcome") == "skipped":
        return TestOutcome.skipped
    return TestOutcome.missing


def _same(a: object, b: object) -> bool:
    """Plain-data equality (1 == 1.0; floats within 1e-9 relative); types must be JSON's."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def outcomes_from_calls(raw: bytes, ft: FunctionTests) -> tuple[dict[str, TestOutcome], list[str]]:
    expected = [json.loads(json.dumps(c.expected)) for c in ft.cases]
    got: dict[int, dict] = {}
    problems: list[str] = []
    for line in raw.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            problems.append("unreadable report record")
            continue
        if isinstance(rec, dict) and rec.get("k") == "case":
            i = rec.get("i")
            if not isinstance(i, int) or i in got:
                problems.append(f"duplicate or invalid report for case {i}")
                got[i] = {"ok": False}  # type: ignore[index]
            else:
                got[i] = rec
    out: dict[str, TestOutcome] = {}
    for i, exp in enumerate(expected):
        r = got.get(i)
        name = f"case[{i}]"
        if r is None:
            out[name] = TestOutcome.missing
        elif not r.get("ok"):
            out[name] = TestOutcome.failed
        else:
            out[name] = TestOutcome.passed if _same(r.get("value"), exp) else TestOutcome.failed
    return out, problems


def _test_argv(
    run: _Run, tests: TestsSpec | None, ft: FunctionTests | None, cmd: str | None
) -> tuple[list[str], list[str], bool]:
    """(argv, test ids, uses report)."""
    assert run.trusted is not None
    assert run.base is not None
    py = runner_argv(tests.python if tests is not None else None)
    if tests is not None:
        ids = [*tests.fail_to_pass, *tests.pass_to_pass]
        ids = list(dict.fromkeys(ids))
        if tests.runner == "plain":
            return [*py, "plain", "{REPORT_FD}", *ids], ids, True
        if tests.runner == "split":
            held_out = set(run.ro_files)
            files = sorted({i.partition("::")[0] for i in ids} - held_out)
            if files:
                raise Infra(
                    f"tests.runner 'split' runs test files as trusted code: {files} must be held "
                    "out (give them in test_files or test_patch), or use runner 'plain'"
                )
            return [*py, "split", "{REPORT_FD}", *ids], ids, True
        cfg = integrity.trusted_pytest_config(run.base, run.trusted)
        args = [
            "-p",
            "no:cacheprovider",
            "-c",
            f"{TASK_MOUNT}/{cfg}",
            "--rootdir",
            WORKSPACE,
            "--confcutdir",
            WORKSPACE,
            "-q",
            "--color=no",
            "-o",
            "console_output_style=classic",
            *ids,
        ]
        prefix = run.trusted / pycache.PREFIX_DIR
        prefix.mkdir(mode=0o755)
        pycache.write_held_out(run.ws, run.ro_files, prefix, run.trusted / cfg)
        runner_opts = ["--pycache-prefix", f"{TASK_MOUNT}/{pycache.PREFIX_DIR}"]
        runner_opts += ["--select", str(len(ids))]  # the ids, last: see runner._selecting
        return [*py, "pytest", "{REPORT_FD}", *runner_opts, *args], ids, True
    if ft is not None:
        spec = {
            "module": ft.module,
            "function": ft.function,
            "cases": [{"args": c.args, "kwargs": c.kwargs} for c in ft.cases],
        }
        (run.trusted / "calls.json").write_text(json.dumps(spec))
        return [*py, "calls", "{REPORT_FD}", f"{TASK_MOUNT}/calls.json"], [], True
    assert cmd is not None
    return ["/bin/sh", "-c", cmd], [], False


def execute(
    task: Task,
    ctx: Context,
    *,
    task_id: str = "",
    cancel: Cancel | None = None,
    queued_s: float = 0.0,
    apply_fn: ApplyFn | None = None,
) -> TaskResult:
    """Run ``task``; every outcome, including internal failures, is a TaskResult."""
    t_start = time.monotonic()
    run = _Run(task=task, ctx=ctx, cancel=cancel)
    run.timings.queue_s = queued_s
    res = TaskResult(task_id=task_id, verdict=Verdict.infra_error, metadata=task.metadata)
    try:
        _execute(run, res, apply_fn or patch_apply_fn(task))
    except Rejected as e:
        res.verdict, res.detail = Verdict.patch_rejected, str(e)
    except LimitHit as e:
        res.verdict, res.detail = Verdict.resource_limit, str(e)
    except TestsBlocked as e:
        res.verdict, res.detail = Verdict.failed, str(e)
        run.tamper.append("<test_patch>")
    except UnsafePath as e:
        res.verdict, res.detail = Verdict.patch_rejected, f"unsafe path: {e}"
    except (Infra, RepoError) as e:
        res.verdict, res.detail = Verdict.infra_error, str(e)
    except ProvisionFailed as e:  # the environment, not the task's content: masked, with its log
        res.verdict, res.detail, res.stderr = Verdict.infra_error, f"provision_failed: {e}", e.log
    except Exception as e:  # every failure of ours is infra_error, never a zero reward
        log.exception("task %s: internal error", task_id)
        res.verdict, res.detail = Verdict.infra_error, f"internal error: {e!r}"
    finally:
        if run.ws is not None:
            ctx.workspaces.destroy(run.ws)
        if run.trusted is not None:
            shutil.rmtree(run.trusted, ignore_errors=True)
        if run.uid:
            ctx.uids.release(run.uid)
    if isinstance(res.detail, str) and "repo.tarball" in res.detail:
        res.verdict = Verdict.patch_rejected  # an unsafe archive is rejected, not an infra fault
    run.timings.total_s = time.monotonic() - t_start + queued_s
    res.timings = run.timings
    res.tests_tampered = bool(run.tamper)
    res.tamper_paths = sorted(set(run.tamper))
    return res


def _execute(run: _Run, res: TaskResult, apply_fn: ApplyFn) -> None:
    task, ctx = run.task, run.ctx
    if task.network and not ctx.allow_network:
        raise Infra("task asks for network but the service runs without --allow-network")
    t0 = time.monotonic()
    if task.environment is not None:
        if ctx.provisioner is None:
            raise Infra("this service has no provisioning cache configured")
        try:
            run.env = ctx.provisioner.get(task.environment)
        except ValueError as e:  # the service cannot build it (network, isolation)
            raise Infra(f"environment: {e}") from e
    run.uid = ctx.uids.acquire()
    run.base = ctx.cache.get(task.repo)
    name = uuid.uuid4().hex[:16]
    run.ws = ctx.workspaces.create(name, run.uid, task.limits.disk_mb, task.limits.inodes)
    with _room(run, "copying the repository into it"):
        ctx.cache.copy_to(run.base, run.ws, run.uid)
    run.trusted = ctx.trusted_root / name
    run.trusted.mkdir(mode=0o755)
    if task.setup_command:
        o = _jail(run, ["/bin/sh", "-c", task.setup_command], task.timeout_s, task.limits)
        if o.exit_code != 0:
            if ctx.workspaces.full(run.ws):
                raise LimitHit(_full_detail(run.ws, task.limits, "running setup_command"))
            raise Infra(f"setup_command failed (exit {o.exit_code}): {o.stderr[-2000:]}")
    run.timings.setup_s = time.monotonic() - t0

    t1 = time.monotonic()
    with _room(run, "writing the patch and files"):
        touched = apply_fn(run.ws, run.uid)
    res.patch_applied = True
    with _room(run, "restoring the held-out tests"):
        _restore_tests(run, touched)
    run.timings.apply_s = time.monotonic() - t1
    _run_tests(run, res)


def _restore_tests(run: _Run, touched: list[str]) -> None:
    """Neutralise what the patch touched that it may not, then write the held-out tests
    (``test_files``, ``test_patch``) root-owned over whatever is there."""
    task = run.task
    assert run.ws is not None
    assert run.base is not None
    run.tamper += integrity.check_touched(run.ws, run.base, touched, run.uid)
    touched_set = set(touched)
    for rel, content in task.test_files.items():
        if rel in touched_set:
            run.tamper.append(rel)
        force_write(run.ws, rel, content.encode(), uid=0, gid=0, mode=0o644)
        run.ro_files.append(rel)
    if task.test_patch.strip():
        try:
            tinfo = patches.parse(task.test_patch)
        except UnsafePath as e:
            raise Infra(f"test_patch: {e}") from e
        for rel in tinfo.touched:
            if rel in touched_set:  # planted or edited by the policy: back to base first
                run.tamper.append(rel)
                integrity.revert(run.ws, run.base, rel, run.uid)
        try:
            git_apply(run.ws, task.test_patch, run.uid)
        except Rejected as e:
            if _applies_to(run.base, task.test_patch):  # the policy's changes are in its way
                raise TestsBlocked(
                    f"the patch keeps the held-out test_patch from applying: {e}"
                ) from e
            raise Infra(f"test_patch does not apply to the base tree: {e}") from e
        for rel in tinfo.touched:
            p = run.ws / rel
            if p.is_file() and not p.is_symlink():
                os.chown(p, 0, 0)
                os.chmod(p, 0o644)
                run.ro_files.append(rel)


def _run_tests(run: _Run, res: TaskResult) -> None:
    """The test phase in a fresh jail; the verdict from its report and the limits it hit."""
    task, ctx = run.task, run.ctx
    assert run.ws is not None
    t2 = time.monotonic()
    argv, ids, report = _test_argv(run, task.tests, task.function_tests, task.test_command)
    ro = [(str(run.ws / rel), f"{WORKSPACE}/{rel}") for rel in dict.fromkeys(run.ro_files)]
    ro.append((str(run.trusted), TASK_MOUNT))
    o = _jail(run, argv, task.timeout_s, task.limits, report=report, ro_binds=ro)
    run.timings.test_s = time.monotonic() - t2
    res.exit_code = o.exit_code
    res.stdout, res.stderr = o.stdout, o.stderr
    res.stdout_truncated, res.stderr_truncated = o.stdout_truncated, o.stderr_truncated
    res.usage = Usage(
        max_rss_mb=o.max_rss_mb,
        cpu_s=o.cpu_s,
        pids_peak=o.pids_peak,
        memory_peak_mb=o.memory_peak_mb,
    )
    limit = _limit_verdict(o, ctx.workspaces.full(run.ws))
    if task.tests is not None:
        res.tests, problems = outcomes_from_report(o.report, ids)
        ok = set(task.tests.fail_to_pass) | set(task.tests.pass_to_pass)
        res.resolved = all(res.tests[t] == TestOutcome.passed for t in ok)
    elif task.function_tests is not None:
        res.tests, problems = outcomes_from_calls(o.report, task.function_tests)
        res.resolved = all(v == TestOutcome.passed for v in res.tests.values())
    else:
        problems = []
        res.resolved = o.exit_code == 0
    if problems or o.report_overflow:
        run.tamper.append("<report>")
        res.resolved = False
        res.detail = "; ".join(problems[:5]) or "report overflow"
    if limit is not None:
        res.verdict, res.detail = limit
        res.resolved = False
    else:
        res.verdict = Verdict.passed if res.resolved else Verdict.failed
