"""Run one command in a bubblewrap jail with limits enforced from outside.

Launch chain for the ``bwrap`` backend (no Python runs between fork and exec, so it is safe
from worker threads)::

    bwrap --info-fd I --block-fd B                   # builds the jail, then waits on B
          --unshare-{pid,net,ipc,uts,cgroup} --die-with-parent --new-session ...
          --cap-add CAP_SETUID,CAP_SETGID,CAP_SETPCAP   # mounts set up as root
      setpriv --reuid U --regid U --clear-groups --bounding-set=-all --no-new-privs
        <command>                                    # real uid U, no capabilities at all

(bwrap's options reach it in a memfd, ``--args FD``: its command line is the jail's
``/proc/1/cmdline``, and the task would read there every host path mounted.)

While the jail's first process waits on ``B`` (its namespaces and mounts are built, nothing of
the task has run and it has not forked yet), the service moves it into the task's pids/memory
cgroups and sets its rlimits (``prlimit(2)``: nproc, as, fsize, nofile, core 0, cpu); only then
does it release it, so every process of the task inherits both. Nothing is released unless
both took: on any failure the jail is killed first. (The ``unshare`` and ``none`` backends
have no such gate and use ``sh -c 'echo $$ > cgroup.procs; exec prlimit ... -- <backend>'``.)

bwrap runs as root *without* a user namespace: with one, the task's uid would map to real
root outside (RLIMIT_NPROC ignored, root-owned files readable). Instead the task drops to a
real unprivileged uid ``U`` of its own per running task (a pool slot), so RLIMIT_NPROC counts
only this task's processes and tasks cannot read each other's files. When the service is not
root, bwrap uses an unprivileged user namespace and ``U`` is the service's own uid. The parent process, not the task,
enforces the wall clock: on expiry the whole tree is SIGKILLed (process group, cgroup members,
and the pid namespace, which dies with its init).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import select
import selectors
import shlex
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field

from dockyard.sandbox import isolation
from dockyard.sandbox.capture import HeadTail
from dockyard.sandbox.cgroups import Probe, TaskCgroups
from dockyard.sandbox.jailspec import JailSpec
from dockyard.sandbox.toolchain import (
    INSIDE_DIR,
    RUNNER_MOUNT,
    WORKSPACE,
    bwrap_toolchain_args,
    python_prefixes,
    runner_argv,
    sandbox_path_env,
    site_dirs,
)
from dockyard.sandbox.zygote import NAMESPACES, READ_SYSCALL

BWRAP = os.environ.get("DOCKYARD_SANDBOX_BWRAP", "bwrap")
REPORT_CAP = 32 << 20
ZYGOTE_START_S = 30.0  # hand-over to task process, normally ~5 ms
ZYGOTE_MAX_ARGS = 100_000  # bytes of runner arguments (test ids); longer lists: exec path


@dataclass
class JailOutcome:
    exit_code: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    report: bytes
    report_overflow: bool
    timed_out: bool
    oom: bool
    pids_limit: bool
    cancelled: bool
    duration_s: float
    cpu_s: float | None
    max_rss_mb: float | None
    memory_peak_mb: float | None
    pids_peak: int | None


class Cancel:
    """A flag a running jail polls; ``set()`` kills the task."""

    def __init__(self) -> None:
        self._ev = threading.Event()

    def set(self) -> None:
        self._ev.set()

    def is_set(self) -> bool:
        return self._ev.is_set()


def task_env(spec: JailSpec) -> dict[str, str]:
    """The task's whole environment (nothing of the service's is inherited)."""
    return {
        "PATH": sandbox_path_env(),
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "DOCKYARD_SITE": site_dirs(),
        **spec.env,
    }


def drop_privileges(uid: int) -> list[str]:
    """``setpriv`` prefix: real uid/gid ``uid``, no groups, no capabilities, no_new_privs."""
    if os.geteuid() != 0:
        return []
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def bwrap_argv(spec: JailSpec, gate: tuple[int, int] | None = None) -> list[str]:
    """``gate``: (info fd, block fd) — bwrap reports the jail's pid on the first and waits
    for a byte on the second before it runs anything of the task (see the module doc)."""
    return [BWRAP, *bwrap_options(spec, gate), "--", *drop_privileges(spec.uid), *spec.argv]


def bwrap_hidden_options(spec: JailSpec, gate: tuple[int, int] | None) -> tuple[list[str], int]:
    """:func:`bwrap_argv` with the options in a memfd bwrap reads (``--args FD``), and that fd
    (the caller passes it to bwrap, then closes it). The jail's pid 1 is a fork of bwrap, and
    the task can read its ``/proc/1/cmdline``: with the options there it would show every host
    path mounted — the workspace's, inside the service's work dir. Left on the command line:
    ``bwrap --args N -- setpriv … -- <command>``."""
    data = b"".join(os.fsencode(a) + b"\0" for a in bwrap_options(spec, gate))
    fd = isolation.memfd_holding("bwrap-options", data)
    argv = [BWRAP, "--args", str(fd), "--", *drop_privileges(spec.uid), *spec.argv]
    return argv, fd


def bwrap_options(spec: JailSpec, gate: tuple[int, int] | None) -> list[str]:
    """bwrap's options (namespaces, mounts, environment) for ``spec``, before ``--``."""
    lim = spec.limits
    as_root = os.geteuid() == 0
    # A built image (layers/: a read-only overlay of its layers) is the jail's root: bound first,
    # every later mount point already exists in it (its top layer), no host toolchain.
    rootfs = [host for host, inside in spec.ro_binds if inside == "/"]
    args = [
        *(["--ro-bind", rootfs[0], "/"] if rootfs else []),
        *(["--info-fd", str(gate[0]), "--block-fd", str(gate[1])] if gate else []),
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        *([] if spec.network else ["--unshare-net"]),
        *([] if as_root else ["--unshare-user"]),
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--clearenv",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(lim.disk_mb << 20),
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "1777",
        "--size",
        str(lim.disk_mb << 20),
        "--tmpfs",
        "/tmp",
        # After the tmpfs mounts: the service's interpreter may live under /tmp (a CI clone),
        # and a later mount would hide it.
        *(bwrap_toolchain_args() if not rootfs else image_toolchain_args()),
        "--bind",
        str(spec.workspace),
        WORKSPACE,
    ]
    for host, inside in spec.ro_binds:
        if inside != "/":
            args += ["--ro-bind", host, inside]
    for host, inside in spec.binds:
        args += ["--bind", host, inside]
    for k, v in task_env(spec).items():
        args += ["--setenv", k, v]
    args += ["--chdir", spec.cwd]
    if as_root:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    return args


def image_toolchain_args() -> list[str]:
    """Over an image root: the runner files and the service's interpreter prefixes (the
    in-sandbox test runner), at mount points the image's top layer holds (``layers/build.py``)."""
    args = ["--ro-bind", str(INSIDE_DIR), RUNNER_MOUNT]
    for d in python_prefixes():
        args += ["--ro-bind", d, d]
    return args


def isolated_argv(spec: JailSpec, plan_fd: int = -1) -> list[str]:
    """The innermost part of the launch chain for ``spec.isolation`` (``plan_fd``: an empty
    memfd the ``unshare`` backend writes its set-up plan to, off the jail's pid-1 cmdline)."""
    if spec.isolation == "bwrap":
        return bwrap_argv(spec)
    inner = [*drop_privileges(spec.uid), *spec.argv]
    if spec.isolation == "unshare":
        return isolation.unshare_argv(spec, task_env(spec), inner, plan_fd)
    if spec.isolation == "none":
        return isolation.none_argv(spec, task_env(spec), inner)
    raise ValueError(f"JailSpec.isolation={spec.isolation!r}: expected bwrap, unshare or none")


def rlimits(spec: JailSpec, cg: TaskCgroups | None) -> dict[int, int]:
    """The task's rlimits (soft = hard), inherited by its whole process tree."""
    lim = spec.limits
    # RLIMIT_AS is a backstop only: the memory cgroup is the real cap (AS counts mappings, not RAM).
    as_bytes = max(lim.memory_mb << 20, 1 << 30) * 4
    # With a pids cgroup, it is the cap (its events give the `resource_limit` verdict); RLIMIT_NPROC
    # stays a backstop a little above it, or forks would fail on the rlimit first, silently.
    nproc = lim.pids + 16 if cg is not None and "pids" in cg.dirs else lim.pids
    return {
        resource.RLIMIT_NPROC: nproc,
        resource.RLIMIT_AS: as_bytes,
        resource.RLIMIT_FSIZE: lim.disk_mb << 20,
        resource.RLIMIT_NOFILE: lim.open_files,
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_CPU: lim.cpu_s,
    }


_PRLIMIT_FLAG = {
    resource.RLIMIT_NPROC: "--nproc",
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_CORE: "--core",
    resource.RLIMIT_CPU: "--cpu",
}


def launcher_argv(spec: JailSpec, cg: TaskCgroups | None, plan_fd: int = -1) -> list[str]:
    """The ungated chain (``unshare`` / ``none``): sh joins the cgroups, prlimit sets rlimits."""
    join = "".join(
        f"echo $$ > {shlex.quote(str(p))} || exit 125; " for p in (cg.procs_files if cg else [])
    )
    limits = [f"{_PRLIMIT_FLAG[r]}={v}" for r, v in rlimits(spec, cg).items()]
    return [
        "/bin/sh",
        "-c",
        join + 'exec "$@"',
        "sh",
        "prlimit",
        *limits,
        "--",
        *isolated_argv(spec, plan_fd),
    ]


class GateError(Exception):
    """The jail could not be confined before release (it was killed, nothing of it ran)."""


def _jail_pid(info_r: int, deadline: float) -> int | None:
    """The jail's first process, from bwrap's info fd (None: bwrap failed before the clone;
    its exit status and stderr tell why)."""
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise GateError("bwrap did not report the jail's pid in time")
        ready, _, _ = select.select([info_r], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(info_r, 4096)
        if not chunk:
            break
        buf += chunk
    if not buf.strip():
        return None
    try:
        return int(json.loads(buf)["child-pid"])
    except (ValueError, KeyError, TypeError) as e:
        raise GateError(f"unreadable bwrap info: {buf[:200]!r}") from e


def _confine(pid: int, spec: JailSpec, cg: TaskCgroups | None) -> None:
    """Put the waiting jail process into the task's cgroups and set its rlimits."""
    try:
        for procs in cg.procs_files if cg else []:
            procs.write_text(str(pid))
        for r, v in rlimits(spec, cg).items():
            resource.prlimit(pid, r, (v, v))
    except OSError as e:
        raise GateError(f"confining the jail failed: {e!r}") from e


def _wait_at_gate(pid: int, block_fd: int, proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Until bwrap's jail process sits in ``read(block_fd)``: namespaces and mounts complete."""
    want = f"{READ_SYSCALL} {hex(block_fd)} "
    while True:
        try:
            with open(f"/proc/{pid}/syscall") as f:
                if f.read().startswith(want):
                    return
        except PermissionError as e:  # (zygote.supported() checks this at start-up)
            raise GateError(f"cannot watch the jail's process: {e}; use --no-zygote") from e
        except OSError:
            pass
        if proc.poll() is not None:
            raise GateError(f"bwrap exited ({proc.returncode}) before the jail was ready")
        if time.monotonic() >= deadline:
            raise GateError("the jail did not get ready in time")
        time.sleep(0.0005)


def _enter_with_zygote(
    pid: int,
    spec: JailSpec,
    cg: TaskCgroups | None,
    args: list[str],
    stdio: tuple[int, int, int],
) -> socket.socket:
    """Have the zygote fork a process into the waiting jail; returns the task's status socket."""
    assert spec.zygote is not None
    fds: list[int] = []
    alive = _pidfd_open(pid)  # pins *this* process: a pid reused meanwhile cannot pass
    try:
        if alive < 0:
            raise GateError("no pidfd for the jail's process (Linux >= 5.3 is needed)")
        fds.append(alive)
        for ns in NAMESPACES:
            fds.append(os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC))
        root = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fds.append(root)
        if select.select([alive], [], [], 0)[0]:  # readable = exited: the fds may be another's
            raise GateError("the jail's process exited while being entered")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = {
            "uid": spec.uid,
            "procs": [str(p) for p in (cg.self_join_files if cg else [])],
            "rlimits": [[r, v] for r, v in rlimits(spec, cg).items()],
            "env": task_env(spec),
            "cwd": spec.cwd,
            "argv": args,
        }
        try:
            spec.zygote.spawn(request, [theirs.fileno(), *stdio, root, *fds[1:-1]])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return ours
    except OSError as e:
        raise GateError(f"entering the jail failed: {e!r}") from e
    finally:
        for fd in fds:
            os.close(fd)


def _pidfd_open(pid: int) -> int:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3: fall back to polling every 50 ms
        return -1


def _kill_tree(proc: subprocess.Popen[bytes], cg: TaskCgroups | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if cg is not None:
        cg.kill_all()


def _zygote_args(spec: JailSpec) -> list[str] | None:
    """The runner's arguments when this command can run in a zygote fork, else None."""
    if spec.zygote is None or spec.isolation != "bwrap" or not spec.report:
        return None
    prefix = runner_argv()
    if spec.argv[: len(prefix)] != prefix:
        return None
    args = spec.argv[len(prefix) :]
    if sum(len(a) for a in args) > ZYGOTE_MAX_ARGS:  # one socket message carries the request
        return None
    return args


def run(spec: JailSpec, probe: Probe, cancel: Cancel | None = None) -> JailOutcome:
    """Run ``spec`` to completion, timeout or cancellation. Never raises for task behaviour.

    The phases: the task's cgroups; the launch (:class:`_Launch`: spec → pipes and argv, then
    the launcher process); for bwrap the gate (:func:`_through_gate`: confine the waiting jail
    and release it, or have the zygote enter it); the wait (:func:`_wait`: output, report,
    limits, the wall clock, then the whole tree killed and reaped); the outcome.
    """
    lim = spec.limits
    cg = (
        TaskCgroups.create(probe, spec.name, lim.memory_mb << 20, lim.pids)
        if probe.controllers
        else None
    )
    launch = _Launch.prepare(spec, cg)
    start = time.monotonic()
    deadline = start + spec.timeout_s
    proc = launch.popen(cg)
    zsock = _through_gate(launch, proc, cg, deadline) if launch.gated else None
    watch = _wait(launch, proc, cg, zsock, cancel, start, deadline)
    if watch.zygote_error:
        if cg:
            cg.remove()
        raise GateError(f"the zygote could not enter the jail: {watch.zygote_error}")
    return _outcome(launch.spec, cg, watch, start)


_PIPE_ENDS = (
    *("rep_r", "rep_w", "out_r", "out_w", "err_r", "err_w", "bw_r", "bw_w"),
    *("info_r", "info_w", "block_r", "block_w", "args_fd"),
)


@dataclass
class _Launch:
    """One launch: its argv and its pipes (-1: none, or closed here).

    The read ends are ours; the write ends (``rep_w``, ``out_w``, ``err_w``) are the task's and
    our copies close once it holds its own. ``bw_*`` carries bwrap's own stderr when the zygote
    runs the task (the task's streams then close with the task). ``info_*``/``block_*`` are
    bwrap's gate; ``block_w`` stays open until the jail is dead: EOF on it releases the jail.
    ``args_fd`` holds bwrap's options (``--args``) or the ``unshare`` backend's plan: off the
    command line of the jail's pid 1, which the task can read.
    """

    spec: JailSpec  # ``{REPORT_FD}`` in its argv replaced by the report pipe's number
    zargs: list[str] | None  # the runner's arguments when the zygote runs the task
    argv: list[str] = field(default_factory=list)
    pass_fds: tuple[int, ...] = ()
    gate: tuple[int, int] | None = None  # (info fd, block fd) as numbered in bwrap
    rep_r: int = -1
    rep_w: int = -1
    out_r: int = -1
    out_w: int = -1
    err_r: int = -1
    err_w: int = -1
    bw_r: int = -1
    bw_w: int = -1
    info_r: int = -1
    info_w: int = -1
    args_fd: int = -1
    block_r: int = -1
    block_w: int = -1

    @classmethod
    def prepare(cls, spec: JailSpec, cg: TaskCgroups | None) -> _Launch:
        """The pipes, then the argv of the chain for ``spec.isolation``."""
        launch = cls(spec, _zygote_args(spec))
        zygote = launch.zargs is not None
        if spec.report:  # the command finds the write end's number where it says {REPORT_FD}
            launch.rep_r, launch.rep_w = os.pipe()
            launch.spec = dataclasses.replace(
                spec, argv=[a.replace("{REPORT_FD}", str(launch.rep_w)) for a in spec.argv]
            )
        launch.out_r, launch.out_w = os.pipe()
        launch.err_r, launch.err_w = os.pipe()
        if zygote:
            launch.bw_r, launch.bw_w = os.pipe()
        if launch.rep_w >= 0 and not zygote:
            launch.pass_fds = (launch.rep_w,)
        if spec.isolation == "bwrap":
            launch.info_r, launch.info_w = os.pipe()
            launch.block_r, launch.block_w = os.pipe()
            launch.gate = (launch.info_w, launch.block_r)
            # With the zygote, bwrap's own command never runs: the jail is entered at the gate
            # and killed afterwards (were the service to die first, it would run /bin/true).
            bw_spec = (
                dataclasses.replace(launch.spec, argv=["/bin/true"]) if zygote else launch.spec
            )
            launch.argv, launch.args_fd = bwrap_hidden_options(bw_spec, launch.gate)
            launch.pass_fds += (*launch.gate, launch.args_fd)
        else:
            if spec.isolation == "unshare":  # its plan names host paths: off pid 1's cmdline
                launch.args_fd = os.memfd_create("unshare-plan", os.MFD_CLOEXEC)
                launch.pass_fds += (launch.args_fd,)
            launch.argv = launcher_argv(launch.spec, cg, launch.args_fd)
        return launch

    @property
    def gated(self) -> bool:
        return self.gate is not None

    def popen(self, cg: TaskCgroups | None) -> subprocess.Popen[bytes]:
        """Start the launcher; on failure every pipe is closed and the cgroups removed."""
        zygote = self.zargs is not None
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self.out_w if not zygote else subprocess.DEVNULL,
                stderr=self.err_w if not zygote else self.bw_w,
                pass_fds=self.pass_fds,
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            self.close_all()
            if cg:
                cg.remove()
            raise
        self.close("bw_w", "info_w", "block_r", "args_fd")
        if not zygote:  # the launcher holds the task's ends (with the zygote: after the gate)
            self.close("rep_w", "out_w", "err_w")
        return proc

    def close(self, *names: str) -> None:
        for name in names:
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)

    def close_all(self) -> None:
        self.close(*_PIPE_ENDS)


def _through_gate(
    launch: _Launch, proc: subprocess.Popen[bytes], cg: TaskCgroups | None, deadline: float
) -> socket.socket | None:
    """bwrap, with the jail's first process waiting on the block fd: confine it (cgroups,
    rlimits) and release it, or have the zygote fork the task into it (then the task's status
    socket is returned). On any failure the jail is killed before anything of it runs."""
    assert launch.gate is not None
    zargs = launch.zargs
    zsock: socket.socket | None = None
    try:
        pid = _jail_pid(launch.info_r, deadline)
        if pid is None:
            if zargs is not None:  # bwrap failed: what it said is the task's stderr
                os.write(launch.err_w, os.read(launch.bw_r, 1 << 16))
        elif zargs is None:
            _confine(pid, launch.spec, cg)
            os.write(launch.block_w, b"1")
        else:
            _wait_at_gate(pid, launch.gate[1], proc, deadline)
            stdio = (launch.out_w, launch.err_w, launch.rep_w)
            zsock = _enter_with_zygote(pid, launch.spec, cg, zargs, stdio)
    except BaseException as e:
        if isinstance(e, GateError) and zargs is not None and proc.poll() is not None:
            os.set_blocking(launch.bw_r, False)
            with contextlib.suppress(OSError):  # bwrap's own word on why it failed
                e.args = (f"{e.args[0]}: {os.read(launch.bw_r, 4096).decode(errors='replace')}",)
        _kill_tree(proc, cg)  # before the block fd closes: EOF on it would release the jail
        proc.wait()  # (it may have been reaped by the poll in _wait_at_gate)
        launch.close_all()
        if cg:
            cg.remove()
        raise
    finally:
        launch.close("info_r")
    if zargs is not None:  # the task process holds its own ends now
        launch.close("rep_w", "out_w", "err_w", "bw_r")
    # block_w stays open until the jail is dead (closed in _wait, after the kill)
    return zsock


@dataclass
class _Watch:
    """What the wait saw: the task's streams and report, how and when it ended."""

    out: HeadTail
    err: HeadTail
    rep: bytearray = field(default_factory=bytearray)
    rep_overflow: bool = False
    status: int | None = None  # wait status
    rusage: resource.struct_rusage | None = None
    exit_seen_at: float = 0.0
    timed_out: bool = False
    cancelled: bool = False
    pids_hit: bool = False
    oom_hit: bool = False
    zygote_error: str = ""
    keeper_started: bool = False  # the keeper's first message: the task process exists
    next_pids_check: float = 0.0

    def must_stop(
        self, now: float, deadline: float, cancel: Cancel | None, cg: TaskCgroups | None
    ) -> bool:
        """Whether the running task is to be killed: wall clock, cancel, pids or memory cap."""
        if now >= deadline:
            self.timed_out = True
        elif cancel is not None and cancel.is_set():
            self.cancelled = True
        elif cg is not None and now >= self.next_pids_check:
            self.next_pids_check = now + 0.05  # not on every output wake-up
            self.pids_hit = cg.pids_limit_hit()
            self.oom_hit = cg.under_oom()
        return self.timed_out or self.cancelled or self.pids_hit or self.oom_hit

    def report(self, data: bytes) -> None:
        if len(self.rep) + len(data) > REPORT_CAP:
            self.rep_overflow = True
        else:
            self.rep += data

    def keeper(self, msg: bytes, now: float) -> bool:
        """A message from the zygote's keeper of the task process; True: the task ended."""
        rec = json.loads(msg) if msg else {"status": signal.SIGKILL}
        if not msg and not self.keeper_started:
            rec = {"error": "the keeper died before starting the task process"}
        self.keeper_started = self.keeper_started or "pid" in rec
        if "error" in rec:
            self.zygote_error = str(rec["error"])
        if "status" in rec or "error" in rec or not msg:
            # as with bwrap's own command: the streams get up to 1 s to close
            self.status, self.exit_seen_at = int(rec.get("status", signal.SIGKILL)), now
            return True
        return False


def _wait(
    launch: _Launch,
    proc: subprocess.Popen[bytes],
    cg: TaskCgroups | None,
    zsock: socket.socket | None,
    cancel: Cancel | None,
    start: float,
    deadline: float,
) -> _Watch:
    """Collect output and report until the task ends (then its streams get up to 1 s to close)
    or a limit, the wall clock or ``cancel`` ends it; then the whole tree is killed and reaped."""
    lim = launch.spec.limits
    w = _Watch(HeadTail(lim.output_bytes), HeadTail(lim.output_bytes))
    sel = selectors.DefaultSelector()
    streams = {launch.out_r: w.out, launch.err_r: w.err}
    for fd in streams:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    if launch.rep_r >= 0:
        os.set_blocking(launch.rep_r, False)
        sel.register(launch.rep_r, selectors.EVENT_READ)
    # The task ends when the launcher exits (a pidfd wakes the loop at once), or, entered by
    # the zygote, when its keeper reports the task process's wait status.
    pidfd = -1
    if zsock is not None:
        sel.register(zsock, selectors.EVENT_READ)
    else:
        pidfd = _pidfd_open(proc.pid)
        if pidfd >= 0:
            sel.register(pidfd, selectors.EVENT_READ)
    try:
        while True:
            now = time.monotonic()
            if w.status is None and zsock is None:
                pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    w.status, w.rusage, w.exit_seen_at = st, ru, now
                    proc.returncode = os.waitstatus_to_exitcode(st)
                    if pidfd >= 0:
                        sel.unregister(pidfd)
            streams_open = len(sel.get_map()) - (pidfd >= 0 and w.status is None)
            if w.status is not None and (not streams_open or now - w.exit_seen_at > 1.0):
                break
            if (
                zsock is not None
                and not w.keeper_started
                and (now - start > ZYGOTE_START_S or now >= deadline)
            ):
                # the zygote did not fork the task: its fault, not the task's (infra_error)
                w.zygote_error = f"no task process {now - start:.0f} s after the hand-over"
                _kill_tree(proc, cg)
                break
            if w.status is None and w.must_stop(now, deadline, cancel, cg):
                _kill_tree(proc, cg)
                deadline = now + 3600  # waiting for the kill to land
            for key, _ in sel.select(timeout=0.05):
                if key.fileobj is zsock:
                    assert zsock is not None
                    if w.keeper(zsock.recv(4096), now):
                        sel.unregister(zsock)
                    continue
                fd = int(key.fd)
                if fd == pidfd:
                    continue  # exited: reaped at the top of the loop
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(fd)
                elif fd == launch.rep_r:
                    w.report(data)
                else:
                    streams[fd].feed(data)
    finally:
        sel.close()
        if pidfd >= 0:
            os.close(pidfd)
        if zsock is not None:
            zsock.close()
        _reap(proc, cg, w)
        launch.close_all()  # block_w (the jail is dead now) and our read ends
    return w


def _reap(proc: subprocess.Popen[bytes], cg: TaskCgroups | None, w: _Watch) -> None:
    """Kill what is left of the task (daemons that escaped the session die with it) and reap
    the launcher, whose status is the task's unless the loop already had one."""
    _kill_tree(proc, cg)
    _, st, ru = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
    if w.status is None:
        w.status, w.rusage = st, ru
    if proc.returncode is None:
        proc.returncode = os.waitstatus_to_exitcode(st)


def _outcome(spec: JailSpec, cg: TaskCgroups | None, w: _Watch, start: float) -> JailOutcome:
    """The verdict's raw material: exit, streams, report, which limit hit, what it used."""
    oom = w.oom_hit or bool(cg and (cg.oom_killed() or cg.under_oom()))
    pids_hit = w.pids_hit or bool(cg and cg.pids_limit_hit())
    mem_peak = cg.memory_peak_mb() if cg else None
    pids_peak = cg.pids_peak() if cg else None
    # bwrap's monitor exits without reaping the jail's init, so the launcher's rusage misses
    # the task's processes: the cgroup's accounting is the task's real CPU time.
    cpu_s = cg.cpu_seconds() if cg else None
    rusage = w.rusage
    if cpu_s is None and rusage is not None and spec.isolation != "bwrap":
        cpu_s = rusage.ru_utime + rusage.ru_stime
    if cg:
        cg.remove()
    assert w.status is not None
    code = os.waitstatus_to_exitcode(w.status)
    return JailOutcome(
        exit_code=code,
        stdout=w.out.text(),
        stderr=w.err.text(),
        stdout_truncated=w.out.truncated,
        stderr_truncated=w.err.truncated,
        report=bytes(w.rep),
        report_overflow=w.rep_overflow,
        timed_out=w.timed_out,
        oom=oom,
        pids_limit=pids_hit,
        cancelled=w.cancelled,
        duration_s=time.monotonic() - start,
        cpu_s=cpu_s,
        # (the monitor's own rusage under bwrap: not the task's, so not reported)
        max_rss_mb=(rusage.ru_maxrss / 1024) if rusage and spec.isolation != "bwrap" else None,
        memory_peak_mb=mem_peak,
        pids_peak=pids_peak,
    )
