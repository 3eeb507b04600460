"""Run one build-jail plan (``jail_main.py``) under the service's limits.

Each jail is a fork of the *jail server* (``jail_main.py --serve``, started once per service
as host root, an interpreter with every module an op needs already imported): the fork joins the
step's pids/memory cgroups and takes its rlimits before anything else runs, then runs the plan
as ``python jail_main.py`` would. A container's pid 1 and every command entering it start in a
few ms instead of an interpreter's start each (``bench/layers_session.py``). Output is captured
head+tail; at the wall clock the jail's process and its cgroups are killed. Returns a
:class:`StepOutcome`; never raises for what the step did.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import socket
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dockyard.sandbox import egress
from dockyard.sandbox.capture import HeadTail
from dockyard.sandbox.cgroups import Probe, TaskCgroups
from dockyard.sandbox.layers.bases import UID_BASE, UID_COUNT
from dockyard.sandbox.layers.store import Store
from dockyard.sandbox.zygote import Zygote

JAIL_MAIN = Path(__file__).resolve().parent / "jail_main.py"
OUTPUT_CAP = 64 << 10
SETUP_FAILED = 125
FILE_CAP = 4 << 30  # bytes: RLIMIT_FSIZE of every process of a build step


class JailLost(RuntimeError):
    """The jail server died with a jail running (every jail dies with it): the service's fault."""


@dataclass
class StepOutcome:
    exit_code: int | None
    output: str
    timed_out: bool
    oom: bool
    pids_limit: bool
    seconds: float
    truncated: bool = False  # the output's middle was left out (head and tail kept)
    started: bool = False  # a run step's jail was set up and its command about to start
    errput: str = ""  # with ``split``: stderr apart (``output`` is then stdout only)
    err_truncated: bool = False

    def why(self) -> str:
        """'' when the step succeeded, else what went wrong (for the build log and reports)."""
        if self.timed_out:
            return "timed out"
        if self.oom:
            return "ran out of memory"
        if self.pids_limit:
            return "hit the process limit"
        return "" if self.exit_code == 0 else f"exited {self.exit_code}"


def overlay_plan(store: Store, base_root: Path, layers: list[str], root: Path, *,
                 above: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """The mounts of a run plan over an image: its layers (``above`` stacked on them: a
    session's upper under its verifier) under a new writable layer in ``root`` (``upper``,
    ``work`` and the mount point ``merged`` made here, the first two owned by the namespace's
    root)."""
    for d in ("upper", "work"):
        (root / d).mkdir(mode=0o755)
        os.chown(root / d, UID_BASE, UID_BASE)
    (root / "merged").mkdir(mode=0o755)
    return {
        "uid_base": UID_BASE, "uid_count": UID_COUNT, "chdir": str(store.layers_dir),
        "lower": [*above, *store.lower(base_root, layers)], "upper": str(root / "upper"),
        "work": str(root / "work"), "merged": str(root / "merged"),
    }  # fmt: skip


class Flag(Protocol):
    """What ``run_plan`` polls to end a jail early (a ``threading.Event``, ``jail.Cancel``)."""

    def is_set(self) -> bool: ...


EGRESS_DIR = "/dev/.egress"  # where jail_main.py mounts the proxy's dir (its socket, the CA)
EGRESS_VERIFY_DIR = "/.dockyard-egress"  # a live verifier's: a top-level dir of its own root


def egress_plan(plan: dict, proxy: egress.Proxy, *, live: bool = False) -> dict:
    """``plan`` reaching the registries through ``proxy``: the forwarder, the socket's dir, and
    the proxy and trust variables (``egress.jail_env``) pointing where this jail mounts them.
    ``live``: a verifier in a live container (``op: verify``), whose network namespace is the
    agent's: another dir, and port 0 — a free one the kernel picks (jail_main.py's
    ``_forwarder`` puts it in the proxy variables), never a port an agent's process could hold."""
    where, port = (EGRESS_VERIFY_DIR, 0) if live else (EGRESS_DIR, egress.PORT)
    env = {
        k: v.replace(egress.MOUNT, where).replace(f":{egress.PORT}/", f":{port}/")
        for k, v in egress.jail_env().items()
    }
    return plan | {
        "env": plan["env"] | env, "forwarder": egress.FORWARDER, "sock_dir": str(proxy.dir),
        "sock_name": egress.SOCKET, "port": port, "egress_dir": where,
    }  # fmt: skip


SERVER = Zygote(
    lambda fd: [sys.executable, "-I", "-S", "-B", str(JAIL_MAIN), "--serve", str(fd)],
    "the jail server",
)
_RLIMITS = {"cpu": resource.RLIMIT_CPU, "nofile": resource.RLIMIT_NOFILE}
REAP_TIMEOUT_S = 30.0
LINGER_GRACE_S = 0.2  # output a lingering process writes after its jail ended: not the jail's


def run_plan(plan: dict, probe: Probe, timeout_s: float, memory_mb: int, pids: int, *,
             output_cap: int = OUTPUT_CAP, rlimits: dict[str, int] | None = None, name: str = "",
             cancel: Flag | None = None, fds: dict[str, int] | None = None,
             split: bool = False, linger: str = "") -> StepOutcome:  # fmt: skip
    """``rlimits``: more limits by ``prlimit``'s names (a verifier's ``cpu``, ``nofile``);
    ``name``: the cgroups' name (freezer.py finds the processes by it); ``cancel``: set, the
    jail is killed as at its wall clock; ``fds``: more fds for the plan, by the plan's key
    (``pid_fd``; closed here once the server has them); ``split``: stderr captured apart from
    stdout; ``linger``: the name of a container's cgroups — what the jail's process leaves
    running when it ends by itself is moved there and runs on (``docker exec``'s semantics),
    where it is otherwise killed with the jail.

    The jail is a fork of the jail server (``jail_main.py --serve``, one per service), which
    joins the cgroups (v1's ``tasks``: ~10 ms sooner per controller than ``cgroup.procs``) and
    sets the rlimits before anything else runs, then runs the plan as the script would."""
    cg = _cgroups(probe, name, memory_mb, pids) if probe.controllers else None
    # no single file over FILE_CAP (a layer's disk is the store's; see the docs' limits), no core
    limits = [(resource.RLIMIT_FSIZE, FILE_CAP), (resource.RLIMIT_CORE, 0)]
    limits += [(_RLIMITS[k], v) for k, v in (rlimits or {}).items()]
    out = HeadTail(output_cap)
    err = HeadTail(output_cap) if split else None
    t0 = time.monotonic()
    # pid 1 of a run jail writes one byte here once it is set up, then closes it before the
    # step starts: no output or exit code of the step can pass for a setup failure, or hide one
    ready_r, ready_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe() if split else (None, os.dup(out_w))
    # the jail writes its exit code here as it ends, before its own teardown (the server's
    # status comes ~0.5 ms later: reaped, then sent); no code there (the jail was killed, or
    # died): the server's status
    done_r, done_w = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    passed = {"reply": theirs.fileno(), "out": out_w, "err": err_w, "ready_fd": ready_w,
              "done_fd": done_w, **(fds or {})}  # fmt: skip
    request = {
        "plan": plan, "fds": list(passed), "rlimits": limits,
        "join": [str(p) for p in (cg.self_join_files if cg else [])],
    }  # fmt: skip
    try:
        SERVER.spawn(request, list(passed.values()))
    finally:
        theirs.close()
        for fd in (out_w, err_w, ready_w, done_w, *(fds or {}).values()):
            os.close(fd)
    # the output is read on this thread, polled with the jail's end (no reader threads: they
    # cost a command ~0.7 ms to start); what a lingering process keeps open is handed over below
    pipes = {out_r: out} | ({err_r: err} if err is not None and err_r is not None else {})
    timed_out, status, code, pidfd = False, None, None, -1
    try:
        pidfd = _pidfd(ours)
        if pidfd >= 0:
            timed_out, code = _watch(ours, done_r, pipes, t0 + max(0.1, timeout_s), cancel)
    finally:
        os.close(done_r)
        # the jail's process ended by itself (its status is waiting): it may leave processes
        keep = bool(linger) and pidfd >= 0 and not timed_out and not (cancel and cancel.is_set())
        jail = 0  # the jail, when it reported its code: ending, in its cgroups a while yet
        if pidfd >= 0:
            if code is not None:
                jail = _pid_of(pidfd)
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
        if cg is not None and not (keep and cg.move_to(linger, skip=jail)):
            cg.kill_all(skip=jail)
        if code is None:
            status = _status(ours, REAP_TIMEOUT_S)
        ours.close()  # (the server's status, if it comes, finds it closed: it ignores that)
        # a process left running may hold the pipes: read them a grace period, then leave them
        # to a thread that discards what it writes (closing them would kill it with SIGPIPE)
        _read_until(pipes, time.monotonic() + (LINGER_GRACE_S if keep else 5))
        for fd in pipes:
            threading.Thread(target=_discard, args=(fd,), daemon=True).start()
        os.set_blocking(ready_r, False)
        try:
            started = os.read(ready_r, 1) == b"1"
        except BlockingIOError:
            started = False
        os.close(ready_r)
    if code is None and status is not None:
        code = os.waitstatus_to_exitcode(status)
    if code is None and not timed_out:
        if cg is not None:
            cg.remove()  # (kills what is left)
        raise JailLost(f"{SERVER.what} ended before the jail reported (see the service's log)")
    res = StepOutcome(
        exit_code=None if timed_out else code,
        output=out.text(), timed_out=timed_out,
        oom=bool(cg and cg.oom_killed()), pids_limit=bool(cg and cg.pids_limit_hit()),
        seconds=time.monotonic() - t0, truncated=out.truncated, started=started,
        errput=err.text() if err is not None else "",
        err_truncated=err.truncated if err is not None else False,
    )  # fmt: skip
    if cg is not None and name:
        cg.remove()  # a name given may be given again at once (a container started anew)
    elif cg is not None:
        _RETIRE.submit(cg.remove)  # empty (or its processes moved, or killed): off the reply's path
        _RETIRE.submit(_make_spare, probe, (id(probe), memory_mb, pids))  # the next command's
    return res


# makes the next jail's cgroups ahead and removes them once done with (~0.5 and ~0.3 ms each,
# longer while a killed process exits), off the commands' path: one thread, in order; what is
# left at the service's stop goes with its tree (cgroups.py)
_RETIRE = ThreadPoolExecutor(1, thread_name_prefix="jail-cgroups")
_SPARES: dict[tuple[int, int, int], tuple[Probe, TaskCgroups]] = {}  # by (probe, memory, pids)
_SPARES_LOCK = threading.Lock()


def _cgroups(probe: Probe, name: str, memory_mb: int, pids: int) -> TaskCgroups:
    """The jail's cgroups: ``name``'s, made now; unnamed, the ones made ahead for its limits
    (the next made meanwhile) — a container's commands all have the same."""
    if name:
        return TaskCgroups.create(probe, name, memory_mb << 20, pids)
    key = (id(probe), memory_mb, pids)
    with _SPARES_LOCK:
        spare = _SPARES.pop(key, None)
    if (
        spare is not None
        and spare[0] is probe
        and all(d.is_dir() for _, d in spare[1].dirs.values())
    ):
        return spare[1]
    return TaskCgroups.create(probe, f"build-{uuid.uuid4().hex[:12]}", memory_mb << 20, pids)


def _make_spare(probe: Probe, key: tuple[int, int, int]) -> None:
    with _SPARES_LOCK:
        if key in _SPARES:
            return
    try:
        cg = TaskCgroups.create(probe, f"build-{uuid.uuid4().hex[:12]}", key[1] << 20, key[2])
    except OSError:  # the service's tree is gone (it stopped): the next jail makes its own
        return
    with _SPARES_LOCK:
        old = _SPARES.pop(key, None)
        _SPARES[key] = (probe, cg)
    if old is not None:
        old[1].remove()


def _pid_of(pidfd: int) -> int:
    """The pid a pidfd refers to (its ``fdinfo``); 0 if unknown."""
    with contextlib.suppress(OSError), open(f"/proc/self/fdinfo/{pidfd}") as f:
        for line in f:
            if line.startswith("Pid:"):
                return max(0, int(line.split()[1]))
    return 0


def _pidfd(reply: socket.socket) -> int:
    """The jail's pidfd, the server's first answer (-1: it refused the request or died)."""
    with contextlib.suppress(OSError):
        _, got, _, _ = socket.recv_fds(reply, 16, 1)
        if got:
            return got[0]
    return -1


def _watch(reply: socket.socket, done: int, pipes: dict[int, HeadTail], deadline: float,
           cancel: Flag | None) -> tuple[bool, int | None]:  # fmt: skip
    """Read ``pipes`` (fd -> its capture; an fd at EOF is closed and leaves the dict) until the
    jail's end — its exit code on ``done`` (returned), or the server's status on ``reply`` (or
    its close) — ``deadline`` (True: it passed) or ``cancel`` is set (looked at every 50 ms).
    ``poll``, not ``select``: a busy service's descriptors may pass FD_SETSIZE."""
    p = select.poll()
    for fd in (reply.fileno(), done, *pipes):
        p.register(fd, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return True, None
        if cancel is not None and cancel.is_set():
            return False, None
        for fd, _ in p.poll((left if cancel is None else min(left, 0.05)) * 1000):
            if fd == reply.fileno():
                return False, None
            if fd == done:
                word = os.read(done, 16)
                if word.isdigit():
                    return False, int(word)
                p.unregister(done)  # closed unwritten (killed): the server's status comes
            elif not _read(fd, pipes):
                p.unregister(fd)


def _read_until(pipes: dict[int, HeadTail], deadline: float) -> None:
    """Read ``pipes`` to their EOF (closed and removed) or until ``deadline``."""
    p = select.poll()
    for fd in pipes:
        p.register(fd, select.POLLIN)
    while pipes and (left := deadline - time.monotonic()) > 0:
        for fd, _ in p.poll(left * 1000):
            if not _read(fd, pipes):
                p.unregister(fd)


def _read(fd: int, pipes: dict[int, HeadTail]) -> bool:
    """One read of a readable pipe into its capture; False (closed, removed) at its EOF."""
    chunk = os.read(fd, 65536)
    if chunk:
        pipes[fd].feed(chunk)
        return True
    del pipes[fd]
    os.close(fd)
    return False


def _readable(sock: socket.socket, timeout_s: float) -> bool:
    """``poll``, not ``select`` (``_watch``)."""
    p = select.poll()
    p.register(sock, select.POLLIN)
    return bool(p.poll(max(0.0, timeout_s) * 1000))


def _status(reply: socket.socket, timeout_s: float) -> int | None:
    """The jail's wait status as the server reaped it (None: the server went first)."""
    if not _readable(reply, timeout_s):
        return None
    with contextlib.suppress(OSError):
        msg = reply.recv(64)
        if msg.startswith(b"status:"):
            return int(msg[7:])
    return None


def _discard(fd: int) -> None:
    """Read ``fd`` to its EOF, dropping what comes (output after the jail's report)."""
    try:
        while os.read(fd, 65536):
            pass
    finally:
        os.close(fd)
