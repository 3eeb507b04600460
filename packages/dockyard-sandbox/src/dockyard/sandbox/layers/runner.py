"""Run one build-jail plan (``jail_main.py``) under the service's limits.

The helper runs as a child of the service (host root) in its own process group and in the
build's pids/memory cgroups (joined by ``sh`` before anything else runs, as ``jail.py``'s
unshare chain does); output is captured head+tail; at the wall clock the group and the cgroups
are killed. Returns a :class:`StepOutcome`; never raises for what the step did.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dockyard.sandbox import egress
from dockyard.sandbox.capture import HeadTail
from dockyard.sandbox.cgroups import Probe, TaskCgroups
from dockyard.sandbox.layers.bases import UID_BASE, UID_COUNT
from dockyard.sandbox.layers.store import Store

JAIL_MAIN = Path(__file__).resolve().parent / "jail_main.py"
OUTPUT_CAP = 64 << 10
SETUP_FAILED = 125
FILE_CAP = 4 << 30  # bytes: RLIMIT_FSIZE of every process of a build step


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


def egress_plan(plan: dict, proxy: egress.Proxy) -> dict:
    """``plan`` reaching the registries through ``proxy``: the forwarder, the socket's dir, and
    the proxy and trust variables (``egress.jail_env``) pointing where this jail mounts them."""
    env = {k: v.replace(egress.MOUNT, EGRESS_DIR) for k, v in egress.jail_env().items()}
    return plan | {
        "env": plan["env"] | env, "forwarder": egress.FORWARDER, "sock_dir": str(proxy.dir),
        "sock_name": egress.SOCKET, "port": egress.PORT,
    }  # fmt: skip


def run_plan(plan: dict, probe: Probe, timeout_s: float, memory_mb: int, pids: int, *,
             output_cap: int = OUTPUT_CAP, prlimits: tuple[str, ...] = (), name: str = "",
             cancel: Flag | None = None, pass_fds: tuple[int, ...] = (),
             split: bool = False) -> StepOutcome:  # fmt: skip
    """``prlimits``: more ``prlimit`` options (a verifier's ``--cpu=N``, ``--nofile=N``);
    ``name``: the cgroups' name (freezer.py finds the processes by it); ``cancel``: set, the
    jail is killed as at its wall clock; ``pass_fds``: more fds for the plan (closed here once
    the helper has them); ``split``: stderr captured apart from stdout."""
    cg = (
        TaskCgroups.create(probe, name or f"build-{uuid.uuid4().hex[:12]}", memory_mb << 20, pids)
        if probe.controllers
        else None
    )
    # sh is single-threaded: it joins by its thread (``self_join_files``: v1's ``tasks``, ~10 ms
    # sooner per controller than ``cgroup.procs``); what it execs and forks inherits the cgroups
    join = "".join(
        f"echo 0 > {shlex.quote(str(p))} || exit 125; " for p in (cg.self_join_files if cg else [])
    )
    # prlimit: no single file over FILE_CAP (a layer's disk is the store's; see the docs' limits)
    argv = ["/bin/sh", "-c", join + 'exec "$@"', "sh", "prlimit", f"--fsize={FILE_CAP}", "--core=0",
            *prlimits, "--", sys.executable, "-I", "-S", str(JAIL_MAIN)]  # fmt: skip
    out = HeadTail(output_cap)
    err = HeadTail(output_cap) if split else None
    t0 = time.monotonic()
    # pid 1 of a run jail writes one byte here once it is set up, then closes it before the
    # step starts: no output or exit code of the step can pass for a setup failure, or hide one
    ready_r, ready_w = os.pipe()
    plan = plan | {"ready_fd": ready_w}
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if split else subprocess.STDOUT, start_new_session=True,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, pass_fds=(ready_w, *pass_fds),
        )  # fmt: skip
    finally:
        for fd in (ready_w, *pass_fds):
            os.close(fd)
    readers = [threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True)]
    if err is not None:
        readers.append(threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True))
    for r in readers:
        r.start()
    timed_out = False
    try:
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(json.dumps(plan).encode())
            proc.stdin.close()
        timed_out = _wait(proc, t0 + max(0.1, timeout_s), cancel)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if cg is not None:
            cg.kill_all()
        proc.wait()
        for r in readers:
            r.join(timeout=5)
        os.set_blocking(ready_r, False)
        try:
            started = os.read(ready_r, 1) == b"1"
        except BlockingIOError:
            started = False
        os.close(ready_r)
    res = StepOutcome(
        exit_code=None if timed_out else proc.returncode, output=out.text(), timed_out=timed_out,
        oom=bool(cg and cg.oom_killed()), pids_limit=bool(cg and cg.pids_limit_hit()),
        seconds=time.monotonic() - t0, truncated=out.truncated, started=started,
        errput=err.text() if err is not None else "",
        err_truncated=err.truncated if err is not None else False,
    )  # fmt: skip
    if cg is not None:
        cg.remove()
    return res


def _wait(proc: subprocess.Popen[bytes], deadline: float, cancel: Flag | None) -> bool:
    """Wait for ``proc`` until ``deadline`` (True: it passed) or ``cancel`` is set (looked at
    every 50 ms, the process's exit seen at once through its pidfd)."""
    if cancel is None:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            return False
        except subprocess.TimeoutExpired:
            return True
    pidfd = os.pidfd_open(proc.pid)
    try:
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if cancel.is_set():
                return False
            select.select([pidfd], [], [], min(left, 0.05))
        return False
    finally:
        os.close(pidfd)


def _drain(stream: object, out: HeadTail) -> None:
    assert stream is not None
    while chunk := stream.read1(65536):  # type: ignore[attr-defined]
        out.feed(chunk)
