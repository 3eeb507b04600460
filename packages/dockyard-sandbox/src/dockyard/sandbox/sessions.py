"""Multi-turn sessions: a persistent workspace an agent drives through ``exec`` and files.

Every ``exec`` is a fresh jail over the session's workspace, whose processes die with it (its pid
namespace). The session's terminal (``tty``: a tmux server in a long-lived jail of the session,
tty.py, killed with the session) is different: its processes keep running between calls and
can change the workspace while the service reads or writes it. So every host-side operation on
a workspace goes through paths.py / trees.py (by fds from the workspace's root, nothing
followed, nothing opened by name), and ``finish``, which needs a consistent tree, reads it with
the terminal's and the desktop's processes frozen (freezer.py) and thaws them after.

``finish`` never trusts the workspace: it computes the diff against the base tree (regular files
only; new symlinks are refused) and evaluates it like a one-shot patch in a *fresh* sandbox with
the held-out tests. What the workspace's content can make fail — a name too long, a tree too deep
or too large, a name that is not UTF-8 — is a verdict (``patch_rejected`` / ``resource_limit``),
never ``infra_error``. Sessions idle for longer than their ``ttl_s`` are reaped (lanes.py: never behind a client).

A session may start from a provisioned environment (``SessionCreate.environment``,
provision.py: its tree is the start — or, given a ``repo`` too, the repo is and the environment
contributes its prefix —, the prefix mounted read-only in every jail and in ``finish``) and be
finished by a Harbor-style script verifier (``FinishRequest.script``, scriptverify.py: the whole
workspace copied into a fresh jail, the reward file is the reward).

A session over a layered image runs, by default, as Docker runs the image (``SessionCreate.
container``, layers/container.py): its commands and terminal as the image's USER over a
writable layer of the session's own, which the script verifier stacks its layer on. After a
container session of one kind (an environment, its limits), the service keeps a few more of
that kind started (``--warm-containers``, warmpool.py): workspace, writable layer and pid 1, none
of which has run anything, so the next session's start is a lookup, not a container's start.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockyard.sandbox import egress
from dockyard.sandbox.envspec import TtyRequest, TtyResult
from dockyard.sandbox.executor import ApplyFn, Context, execute
from dockyard.sandbox.freezer import frozen
from dockyard.sandbox.jail import JailOutcome, JailSpec
from dockyard.sandbox.jail import run as jail_run
from dockyard.sandbox.layers.bases import UID_BASE, UID_COUNT
from dockyard.sandbox.layers.container import Container
from dockyard.sandbox.layers.runner import egress_plan, overlay_plan
from dockyard.sandbox.models import (
    ExecRequest,
    ExecResult,
    FinishRequest,
    Limits,
    SessionCreate,
    Task,
    TaskResult,
    Verdict,
)
from dockyard.sandbox.paths import (
    FULL_ERRNOS,
    UnsafePath,
    check_rel,
    force_write,
    is_dir,
    read_file,
    remove,
)
from dockyard.sandbox.provision import Provisioned, Provisioner, ProvisionFailed
from dockyard.sandbox.scriptverify import run_script
from dockyard.sandbox.toolchain import WORKSPACE
from dockyard.sandbox.trees import TreeTooLarge, copy_tree, walk
from dockyard.sandbox.tty import SOCK_MOUNT, Tty, TtyHost
from dockyard.sandbox.warmpool import WarmPool
from dockyard.sandbox.workspace import Workspaces

MAX_FILE_BYTES = 16 << 20
_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache"}


class SessionNotFound(KeyError):
    pass


class WorkspaceFull(ValueError):
    """A write the session's workspace has no room for (its disk_mb / inodes): HTTP 422."""


@contextlib.contextmanager
def _room(limits: Limits, what: str) -> Iterator[None]:
    try:
        yield
    except OSError as e:
        if e.errno in FULL_ERRNOS:
            raise WorkspaceFull(
                f"the workspace is full while {what} (limits.disk_mb = {limits.disk_mb} MiB, "
                f"limits.inodes = {limits.inodes})"
            ) from e
        raise


@dataclass
class Session:
    id: str
    spec: SessionCreate
    uid: int
    ws: Path
    base: Path
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    env: Provisioned | None = None  # a provisioned environment (provision.py)
    tty: Tty | None = None  # the persistent terminal (tty.py), started on first use
    desktop: Any = None  # the session's desktop (desktop/host.py), started by its route
    proxy: egress.Proxy | None = None  # SessionCreate.egress: the registries, for its jails
    box: Container | None = None  # SessionCreate.container: the image run as Docker runs it
    store: Workspaces | None = None  # where ws (and the container's dir) live
    box_root: Path | None = None  # the container's upper, work dir, terminal socket, proxy

    @property
    def owner(self) -> int:
        """The host uid the workspace's files belong to (a container's root: UID_BASE)."""
        return UID_BASE if self.box is not None else self.uid

    def box_env(self) -> dict[str, str]:
        assert self.box is not None
        return dict(self.box.plan["env"])


def _files(root: Path) -> dict[str, str]:
    """rel path -> kind ('f' regular, 'l' symlink, 'o' other) of everything but directories,
    outside _SKIP_DIRS and ``.pyc`` files (the base tree: the service's own cache)."""
    return {
        e.rel: e.kind
        for e in walk(root, skip_dirs=frozenset(_SKIP_DIRS))
        if e.kind != "d" and not e.rel.endswith(".pyc")
    }


def tree_diff_apply_fn(base: Path, ws: Path, max_bytes: int) -> ApplyFn:
    """Read the session workspace's changes against ``base`` now (by fds: paths.py); return a
    function that writes them into a fresh workspace. Raises UnsafePath for a new or changed
    symlink, a name that is not UTF-8 or a diff over ``max_bytes``, TreeTooLarge for a tree past
    the walk's bounds."""
    b = _files(base)
    seen: set[str] = set()
    changed: dict[str, bytes] = {}
    total = 0
    for e in walk(ws, skip_dirs=frozenset(_SKIP_DIRS)):
        if e.kind == "d" or e.rel.endswith(".pyc"):
            continue
        seen.add(e.rel)
        check_rel(e.rel)
        if e.kind == "l":
            if b.get(e.rel) == "l" and os.readlink(base / e.rel) == e.readlink():
                continue
            raise UnsafePath(f"the workspace has a new or changed symlink {e.rel!r}: refused")
        if e.kind != "f":
            continue
        data = e.read(max_bytes)
        if data is None:
            seen.discard(e.rel)  # vanished mid-walk: as if deleted
            continue
        if b.get(e.rel) == "f" and read_file(base, e.rel, max_bytes + 1) == data:
            continue
        total += len(data)
        if total > max_bytes:
            raise UnsafePath(f"workspace diff exceeds {max_bytes} bytes")
        changed[e.rel] = data
    deleted = [rel for rel in b if rel not in seen]

    def apply(fresh: Path, uid: int) -> list[str]:
        for rel in deleted:
            remove(fresh, rel)
        for rel, data in changed.items():
            force_write(fresh, rel, data, uid=uid, gid=uid, mode=0o644)
        return [*deleted, *changed]

    return apply


def _copy_image_tree(tree: Path, ws: Path) -> None:
    """The image's WORKDIR (its view: owners as the image's ids) into a container's workspace,
    each owner the host uid its id is inside the container (UID_BASE + id), the root's mode and
    owner too: a non-root USER finds /app as Docker would give it."""

    def host(i: int) -> int:
        return UID_BASE + (i if i < UID_COUNT else 65534)

    try:
        copy_tree(tree, ws, uid=UID_BASE, gid=UID_BASE, id_map=host)
    except TreeTooLarge as e:
        raise WorkspaceFull(f"the image's WORKDIR does not fit a workspace: {e}") from e
    st = os.stat(tree)
    os.chown(ws, host(st.st_uid), host(st.st_gid))
    os.chmod(ws, stat.S_IMODE(st.st_mode))


def _wants_container(spec: SessionCreate, env: Provisioned | None) -> bool:
    """``spec.container`` resolved: on by default over a layered image (module docstring)."""
    image = env is not None and env.image is not None
    if spec.container and not image:
        raise ValueError("container: only a session over a layered image (a Dockerfile) runs "
                         "as a container; this session's environment is not one")  # fmt: skip
    if spec.container and spec.network:
        raise ValueError("container: a container session reaches the package registries with "
                         "`egress`, not the host's network (`network`)")  # fmt: skip
    return image and (spec.container if spec.container is not None else not spec.network)


def _warm_kind(spec: SessionCreate, env: Provisioned | None) -> tuple[str, ...] | None:
    """What makes two container sessions alike enough that one made ahead serves the other
    (warmpool.py): the environment, its image and the limits; None for a session with a part
    of its own (a repository, an egress proxy). A setup command runs after the take, as it
    does in a session made on the spot."""
    has_repo = bool(spec.repo.path or spec.repo.git or spec.repo.tarball)
    if env is None or env.image is None or has_repo or spec.egress:
        return None
    return (env.key, env.image.key, spec.limits.model_dump_json())


class SessionManager:
    def __init__(self, ctx: Context, max_sessions: int = 256, warm: int = 0):
        self.ctx = ctx
        self.max_sessions = max_sessions
        self.sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.provisioner: Provisioner | None = None  # set by the service (provision.py)
        self.ttys = TtyHost(ctx)
        self.warm: WarmPool[Session] = WarmPool(warm, self._free)  # ready containers (below)

    def create(self, spec: SessionCreate) -> Session:
        if spec.network and not self.ctx.allow_network:
            raise ValueError("network: the service runs without --allow-network")
        if spec.egress and not self.ctx.allow_network:
            raise ValueError(
                "egress: a session reaches the package registries through the service's egress "
                "proxy, which needs the service's --allow-network"
            )
        with self._lock:
            if len(self.sessions) >= self.max_sessions:
                raise OverflowError(f"too many live sessions ({self.max_sessions})")
        uid = self.ctx.uids.acquire()
        s: Session | None = None
        try:
            env = self._environment(spec)
            box = _wants_container(spec, env)
            kind = _warm_kind(spec, env) if box else None
            if kind is not None:  # a container made before it was asked for (warmpool.py)
                s = self.warm.take(kind, self._fresh, lambda: self._make(spec, env, True, -1))
            if s is not None:
                s.spec, s.uid, s.last_used = spec, uid, time.monotonic()
            else:
                s = self._make(spec, env, box, uid)
            if spec.setup_command:
                r = self._jail(s, spec.setup_command, 600.0, WORKSPACE)
                if r.exit_code != 0:  # the task's trusted setup, not the service: a 422 + log
                    raise ProvisionFailed(
                        f"setup_command failed (exit {r.exit_code})", r.stdout + r.stderr
                    )
        except BaseException:
            if s is not None:
                self._free(s)
            self.ctx.uids.release(uid)
            raise
        with self._lock:
            self.sessions[s.id] = s
        return s

    def _make(self, spec: SessionCreate, env: Provisioned | None, box: bool, uid: int) -> Session:
        """A new session's workspace, container and egress proxy (``uid``: -1 for a warm one,
        whose uid is the taker's); everything made is freed again when a part fails."""
        has_repo = bool(spec.repo.path or spec.repo.git or spec.repo.tarball)
        base = env.tree if env is not None and not has_repo else self.ctx.cache.get(spec.repo)
        sid = uuid.uuid4().hex
        store: Workspaces = self.ctx.workspaces
        if box:  # reached by the container's root, an unprivileged host uid: the env cache
            assert self.provisioner is not None
            store = self.provisioner.scratch
        owner = UID_BASE if box else uid
        ws = store.create(f"s-{sid[:16]}", owner, spec.limits.disk_mb, spec.limits.inodes)
        s: Session | None = None
        try:
            with _room(spec.limits, "copying the repository into it"):
                if box and not has_repo:  # the image's WORKDIR, its owners and modes kept
                    _copy_image_tree(base, ws)
                else:
                    self.ctx.cache.copy_to(base, ws, owner)
            s = Session(id=sid, spec=spec, uid=uid, ws=ws, base=base, env=env, store=store)
            if box:
                s.box_root = store.create(
                    f"s-{sid[:16]}-root", UID_BASE, spec.limits.disk_mb, spec.limits.inodes
                )
            if spec.egress:
                s.proxy = egress.Proxy(
                    (s.box_root or self.ctx.trusted_root) / f"egress-s-{sid[:16]}", owner,
                    egress.Allowlist.build(self.ctx.registries),
                )  # fmt: skip
            if box:
                s.box = self._container(s)
                s.box.start()
        except BaseException:
            if s is not None:
                self._free(s)
            else:
                store.destroy(ws)
            raise
        return s

    def _fresh(self, s: Session) -> bool:
        """A warm session still as made: its pid 1 alive, its image still the mounted one."""
        assert s.box is not None
        assert s.env is not None
        assert self.provisioner is not None
        return s.box.alive and self.provisioner.layer_store.alive(s.env.image)

    def _container(self, s: Session) -> Container:
        """The session's container (layers/container.py): the image's layers under the
        session's upper in ``s.box_root``, the workspace at /workspace and the WORKDIR."""
        assert s.env is not None
        assert s.env.image is not None
        assert s.box_root is not None
        assert self.provisioner is not None
        image, workdir = s.env.image, s.env.spec.workdir
        (s.box_root / "tty").mkdir(mode=0o755)
        os.chown(s.box_root / "tty", UID_BASE, UID_BASE)
        binds = [
            {"src": str(s.ws), "dst": WORKSPACE},
            {"src": str(s.box_root / "tty"), "dst": SOCK_MOUNT},
        ]
        if workdir != WORKSPACE:
            binds.insert(1, {"src": str(s.ws), "dst": workdir})
        store = self.provisioner.layer_store
        store.touch(image.key)
        plan = overlay_plan(store, image.base_root, list(image.layers), s.box_root) | {
            "cwd": workdir, "user": image.user, "env": s.env.jail_env(), "binds": binds,
        }  # fmt: skip
        if s.proxy is not None:
            plan = egress_plan(plan, s.proxy)
        return Container(self.ctx.probe, plan, s.spec.limits, hide=(SOCK_MOUNT,))

    def _free(self, s: Session) -> None:
        """Everything a session holds on the host, its uid aside."""
        if s.box is not None:
            s.box.stop()
        if s.proxy is not None:
            s.proxy.close()
        store = s.store or self.ctx.workspaces
        for d in (s.ws, s.box_root):
            if d is not None:
                store.destroy(d)

    def _environment(self, spec: SessionCreate) -> Provisioned | None:
        if spec.environment is None:
            return None
        if self.provisioner is None:
            raise ValueError("this service has no provisioning cache configured")
        return self.provisioner.get(spec.environment)

    def get(self, sid: str) -> Session:
        s = self.sessions.get(sid)
        if s is None:
            raise SessionNotFound(sid)
        s.last_used = time.monotonic()
        return s

    def _jail(self, s: Session, command: str, timeout_s: float, cwd: str):  # -> JailOutcome
        if s.box is not None:
            assert s.env is not None
            o = s.box.run(
                ["/bin/sh", "-c", command], s.env.spec.workdir + cwd[len(WORKSPACE) :],
                timeout_s, env=s.box_env(), output_cap=s.spec.limits.output_bytes, linger=True,
            )  # fmt: skip
            return JailOutcome(
                exit_code=o.exit_code, stdout=o.output, stderr=o.errput,
                stdout_truncated=o.truncated, stderr_truncated=o.err_truncated, report=b"",
                report_overflow=False, timed_out=o.timed_out, oom=o.oom,
                pids_limit=o.pids_limit, cancelled=False, duration_s=o.seconds, cpu_s=None,
                max_rss_mb=None, memory_peak_mb=None, pids_peak=None,
            )  # fmt: skip
        spec = JailSpec(
            argv=["/bin/sh", "-c", command],
            workspace=s.ws,
            uid=s.uid,
            limits=s.spec.limits,
            timeout_s=timeout_s,
            network=s.spec.network,
            cwd=cwd,
            name=f"s-{uuid.uuid4().hex[:12]}",
            isolation=self.ctx.isolation,
        )
        if s.env is not None:
            spec.ro_binds, spec.binds = s.env.binds(s.ws)
            spec.env = s.env.jail_env()
            spec.cwd = s.env.spec.workdir + cwd[len(WORKSPACE) :]
        if s.proxy is not None:
            egress.attach(spec, s.proxy, sys.executable)
        return jail_run(spec, self.ctx.probe)

    def exec(self, sid: str, req: ExecRequest) -> ExecResult:
        s = self.get(sid)
        cwd = WORKSPACE if req.cwd in ("", ".", "./") else f"{WORKSPACE}/{check_rel(req.cwd)}"
        if cwd != WORKSPACE and not is_dir(s.ws, req.cwd):
            raise UnsafePath(f"cwd {req.cwd!r} is not a directory in the workspace")
        with s.lock:
            o = self._jail(s, req.command, req.timeout_s, cwd)
            s.last_used = time.monotonic()
        verdict = None
        if o.oom:
            verdict = Verdict.oom
        elif o.pids_limit or self._full(s):
            verdict = Verdict.resource_limit
        elif o.timed_out:
            verdict = Verdict.timeout
        return ExecResult(
            exit_code=o.exit_code,
            stdout=o.stdout,
            stderr=o.stderr,
            stdout_truncated=o.stdout_truncated,
            stderr_truncated=o.stderr_truncated,
            timed_out=o.timed_out,
            verdict=verdict,
            duration_s=o.duration_s,
        )

    def _full(self, s: Session) -> bool:
        store = s.store or self.ctx.workspaces
        return any(store.full(d) for d in (s.ws, s.box_root) if d is not None)

    def put_file(self, sid: str, path: str, data: bytes) -> None:
        s = self.get(sid)
        if len(data) > MAX_FILE_BYTES:
            raise UnsafePath(f"file of {len(data)} bytes is over the {MAX_FILE_BYTES}-byte cap")
        with s.lock, _room(s.spec.limits, f"writing {path!r}"):
            force_write(s.ws, path, data, uid=s.owner, gid=s.owner, mode=0o644)

    def get_file(self, sid: str, path: str) -> bytes:
        s = self.get(sid)
        with s.lock:
            return read_file(s.ws, path, MAX_FILE_BYTES)

    def finish(self, sid: str, req: FinishRequest) -> TaskResult:
        s = self.get(sid)
        limits = req.limits or s.spec.limits
        if req.live and (s.box is None or not req.agent_layer):
            raise ValueError("live: only a container session's verifier with agent_layer runs "
                             "in the live container")  # fmt: skip
        if req.script is not None:  # Harbor-style: a copy of the whole workspace (.git too)
            box = s.box if s.box is not None and req.agent_layer else None
            live = box is not None and req.live is not False
            return run_script(
                self.ctx, source=s.ws, still=lambda: s.lock if live else self._still(s),
                env=s.env, script=req.script, limits=limits, timeout_s=req.timeout_s,
                network=s.spec.network, metadata=req.metadata, task_id=f"session-{sid}",
                upper=box.upper if box is not None and not live else None,
                live=box if live else None,
            )  # fmt: skip
        with self._still(s):
            try:
                apply_fn = tree_diff_apply_fn(s.base, s.ws, limits.disk_mb << 20)
            except UnsafePath as e:
                return TaskResult(
                    verdict=Verdict.patch_rejected, detail=str(e), metadata=req.metadata
                )
            except TreeTooLarge as e:
                return TaskResult(
                    verdict=Verdict.resource_limit, detail=str(e), metadata=req.metadata
                )
        task = Task(
            repo=s.spec.repo,
            test_files=req.test_files,
            test_patch=req.test_patch,
            test_command=req.test_command,
            tests=req.tests,
            function_tests=req.function_tests,
            timeout_s=req.timeout_s,
            limits=limits,
            network=s.spec.network,
            environment=s.spec.environment,  # its prefix again in the fresh jail (a cache hit)
            metadata=req.metadata,
        )
        return execute(task, self.ctx, task_id=f"session-{sid}", apply_fn=apply_fn)

    @contextlib.contextmanager
    def _still(self, s: Session) -> Iterator[None]:
        """The session's lock, and the processes of its long-lived jails — the terminal's and
        the desktop's, when running — frozen (freezer.py): nothing of the session changes its
        workspace in the ``with`` body."""
        with s.lock, contextlib.ExitStack() as stack:
            for jail in (s.tty, s.desktop):
                if jail is not None and jail.alive and jail.jail:
                    stack.enter_context(frozen(self.ctx.probe, jail.jail))
            if s.box is not None and s.box.alive:  # pid 1, the forwarder, orphans of the tty's
                stack.enter_context(frozen(self.ctx.probe, s.box.name))
            yield

    def tty(self, sid: str, req: TtyRequest) -> TtyResult:
        """Keystrokes into the session's persistent terminal (tty.py), then its screen."""
        s = self.get(sid)
        with s.lock:
            if s.box is not None:
                assert s.env is not None
                s.tty, started = self.ttys.ensure_in(s.tty, s.box, s.env.spec.workdir, s.box_env())
                r = self.ttys.keys_in(s.tty, s.box, s.env.spec.workdir, s.box_env(), req, started)
            else:
                s.tty, started = self.ttys.ensure(
                    s.tty, sid, s.ws, s.uid, s.spec.limits, s.env, s.spec.network, s.proxy
                )
                r = self.ttys.keys(s.tty, s.ws, s.uid, s.spec.limits, s.env, req, started)
            s.last_used = time.monotonic()
        return r

    def delete(self, sid: str) -> bool:
        with self._lock:
            s = self.sessions.pop(sid, None)
        if s is None:
            return False
        with s.lock:
            if s.tty is not None:
                self.ttys.stop(s.tty)
            if s.desktop is not None:
                s.desktop.stop()
            self._free(s)
            self.ctx.uids.release(s.uid)
        return True

    def close(self) -> None:
        self.warm.close()
        for sid in list(self.sessions):
            self.delete(sid)
