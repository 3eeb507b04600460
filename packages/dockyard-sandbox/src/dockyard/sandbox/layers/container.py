"""A session's container: a layered image run the way Docker runs one, without Docker.

A session over a layered image (``SessionCreate.container``, on by default for one) is what
``docker run -d IMAGE`` + ``docker exec`` give a Harbor or Terminal-Bench agent: the image's
USER (root unless the Dockerfile says otherwise) over a writable layer of the session's own, so
``apt-get install``, a system ``pip install``, files under ``/etc`` and a server one command
starts in the background for the terminal's next keystroke all work as published tasks expect.

* **Pid 1** (``jail_main.py``, ``op: hold``) holds the namespaces — user (its root is the host's
  unprivileged ``UID_BASE``), mount, pid, ipc, uts, net — and the mounts: the image's layers
  under the session's *upper* (a tmpfs of the session's ``disk_mb`` beside its workspace), the
  workspace at /workspace and at the WORKDIR, a small dir for the terminal's socket, the egress
  forwarder when the session has a proxy. It runs in cgroups of its own until the session ends.
* **Every command** — an ``exec``, the terminal's server, each keystroke call — is an ``op:
  enter``: it joins pid 1's namespaces and runs in cgroups of its own (the session's memory and
  pids limits, its rlimits, a wall clock), stdout and stderr apart. When an ``exec`` ends by
  itself, what it left running in the background runs on, as under ``docker exec`` (a server
  the oracle's ``solve.sh`` starts is there for the tests): moved into pid 1's cgroups, where
  everything the session leaves behind shares the session's limits once. A command killed at
  its wall clock takes its background with it.
* A container whose pid 1 is gone (killed from inside) is started again over the same upper at
  the next command: what the session wrote survives, its processes do not.
* The verifier (``scriptverify.py``) runs in the live container (``verify``: its network, files
  and servers, with a mount and pid namespace of its own, where none of the agent's processes
  reach its /tests and /logs); with ``live: false`` it stacks a fresh throwaway layer on the
  session's upper while the container's processes are frozen.

Every session's root is the same host uid (``UID_BASE``, as every verifier's): sessions never
share a mount, pid, ipc or network namespace, and their dirs are reachable only through their
own mounts, so a shared host uid gives one nothing of another (no process to signal or trace,
no path to open).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from dockyard.sandbox.cgroups import Probe
from dockyard.sandbox.layers.runner import Flag, JailLost, StepOutcome, run_plan
from dockyard.sandbox.models import Limits
from dockyard.sandbox.zygote import ZygoteError

MAX_LIFE_S = 86_400.0
log = logging.getLogger("dockyard.sandbox")
START_TIMEOUT_S = 60.0


class ContainerFailed(RuntimeError):
    """Pid 1 could not set the container up (its last words): the service's fault, a 5xx."""


@dataclass
class Container:
    """One session's container. ``plan``: a run plan of ``jail_main.py`` (the overlay, binds,
    env, egress, user and workdir: ``runner.overlay_plan`` + the session's parts)."""

    probe: Probe
    plan: dict
    limits: Limits
    hide: tuple[str, ...] = ()  # mounts of the container a live verifier does not see (verify)
    name: str = field(default_factory=lambda: f"c-{uuid.uuid4().hex[:12]}")
    pid: int = 0
    userns: int = 0
    starts: int = 0  # how often pid 1 was started (a restart: > 1)
    last_words: str = ""
    _pidfd: int = -1  # pid 1's (stop: killed at once, not at the jail's next 50 ms look)
    _cancel: threading.Event = field(default_factory=threading.Event)
    _ended: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)  # one restart at a time

    @property
    def alive(self) -> bool:
        return self._thread is not None and not self._ended.is_set()

    def start(self) -> None:
        """Start pid 1 and wait until it has set the container up; raises ContainerFailed."""
        self._cancel, self._ended = threading.Event(), threading.Event()
        r, w = os.pipe()
        plan = self.plan | {"op": "hold", "argv": []}

        def hold() -> None:
            try:
                o = run_plan(
                    plan, self.probe, MAX_LIFE_S, self.limits.memory_mb, self.limits.pids,
                    name=self.name, cancel=self._cancel, fds={"pid_fd": w},
                    rlimits={"nofile": self.limits.open_files},
                )  # fmt: skip
                self.last_words = f"exit {o.exit_code}: {o.output.strip()[-300:]}"
            except (JailLost, ZygoteError) as e:
                self.last_words = str(e)
            finally:
                self._ended.set()

        self._thread = threading.Thread(target=hold, name=f"container-{self.name}", daemon=True)
        self._thread.start()
        self.starts += 1
        pid, ready = _read_start(r, time.monotonic() + START_TIMEOUT_S)
        if pid and ready:
            try:
                self._pidfd = os.pidfd_open(pid)
                self.pid, self.userns = pid, os.stat(f"/proc/{pid}/ns/user").st_ino
                return
            except OSError:
                pass
        self.stop()
        raise ContainerFailed(f"the session's container could not start: {self.last_words}")

    def run(self, argv: list[str], cwd: str, timeout_s: float, *, env: dict[str, str],
            output_cap: int, name: str = "", cancel: Flag | None = None,
            linger: bool = False) -> StepOutcome:  # fmt: skip
        """``argv`` in the container (module docstring), started again first if it ended;
        ``linger``: what it leaves running when it ends by itself runs on in the container
        (``docker exec``'s semantics), in pid 1's cgroups (the session's limits, once for all)."""
        for attempt in (0, 1):
            pid, userns = self._ensure(dead=0)
            o = run_plan(
                {"op": "enter", "pid": pid, "userns": userns, "cwd": cwd,
                 "user": self.plan.get("user") or "root", "env": env, "argv": argv},
                self.probe, timeout_s, self.limits.memory_mb, self.limits.pids,
                output_cap=output_cap, name=name, cancel=cancel, split=True,
                linger=self.name if linger else "",
                rlimits={"cpu": self.limits.cpu_s, "nofile": self.limits.open_files},
            )  # fmt: skip
            if o.started or o.timed_out:
                return o
            if attempt == 0 and "container has ended" in o.errput:
                self._ensure(dead=pid)  # its pid 1 is gone: start it again over the same upper
                continue
            why = (o.errput.strip().splitlines() or [f"exit {o.exit_code}"])[-1]
            raise ContainerFailed(f"could not enter the session's container: {why[:300]}")
        raise AssertionError("unreachable")

    def verify(self, plan: dict, limits: Limits, timeout_s: float, name: str) -> StepOutcome:
        """A script verifier in this container while it runs (``jail_main.py``'s ``op: verify``:
        the container's network, its files as they are, none of its processes), under
        ``limits`` and cgroups of its own; ``hide`` (the agent's terminal) is not in its view."""
        pid, userns = self._ensure(dead=0)
        return run_plan(
            plan | {"op": "verify", "pid": pid, "userns": userns, "hide": list(self.hide)},
            self.probe, timeout_s, limits.memory_mb, limits.pids, output_cap=limits.output_bytes,
            name=name, rlimits={"cpu": limits.cpu_s, "nofile": limits.open_files},
        )  # fmt: skip

    def _ensure(self, dead: int) -> tuple[int, int]:
        """(pid, userns) of a live pid 1: started again if it ended, or if it is ``dead`` (a
        command found it gone) and no other thread has started a new one meanwhile."""
        with self._lock:
            if self.alive and self.pid != dead:
                return self.pid, self.userns
            log.warning("container %s had ended (%s); starting it again over its layer",
                        self.name, self.last_words or "pid 1 gone")  # fmt: skip
            self.stop()
            self.start()
            return self.pid, self.userns

    def stop(self) -> None:
        """Kill pid 1 (so every process of the container) and wait for its jail to end."""
        self._cancel.set()
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def upper(self) -> Path:
        return Path(self.plan["upper"])


def _read_start(r: int, deadline: float) -> tuple[int, bool]:
    """Read ``pid:<n>`` and ``ready`` lines (either order) until both came, EOF or deadline."""
    buf, pid, ready = b"", 0, False
    try:
        while not (pid and ready):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                break
            chunk = os.read(r, 256)
            if not chunk:
                break
            buf += chunk
            for line in buf.split(b"\n")[:-1]:
                if line.startswith(b"pid:") and line[4:].isdigit():
                    pid = int(line[4:])
                elif line == b"ready":
                    ready = True
            buf = buf.rsplit(b"\n", 1)[-1]
    finally:
        os.close(r)
    return pid, ready
