"""The service's handle on the runner zygote (``zygote_main.py``; the design is there).

Started on first use and again if it died; refused (the service runs every test phase with a
fresh interpreter instead) where it cannot work: not root (entering a jail's namespaces needs
``CAP_SYS_ADMIN`` outside them), or a CPU whose ``read`` syscall number we do not know (the
jail's readiness is read from ``/proc/<pid>/syscall``).
"""

from __future__ import annotations

import array
import json
import logging
import os
import platform
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from dockyard.sandbox.toolchain import python_executable, site_dirs

log = logging.getLogger("dockyard.sandbox")

MAIN = Path(__file__).resolve().parent / "zygote_main.py"
NAMESPACES = ("cgroup", "ipc", "uts", "net", "pid", "mnt")  # the order zygote_main expects
READ_SYSCALL = {"x86_64": 0, "aarch64": 63}.get(platform.machine())
START_TIMEOUT_S = 120.0


class ZygoteError(RuntimeError):
    """The zygote could not be started or reached."""


def supported() -> str | None:
    """None when the zygote can work here, else why not."""
    if os.geteuid() != 0:
        return "the service is not root (it cannot enter a jail's namespaces)"
    if READ_SYSCALL is None:
        return f"unknown read(2) syscall number on {platform.machine()}"
    return _child_syscall_readable()


def _child_syscall_readable() -> str | None:
    """The jail's readiness is read from ``/proc/<pid>/syscall`` of another process: check that
    this host lets us (``CONFIG_HAVE_ARCH_TRACEHOOK``, no ptrace lockdown such as Yama 3)."""
    try:
        child = subprocess.Popen(["sleep", "5"], stdin=subprocess.DEVNULL)
    except OSError as e:
        return f"cannot start a probe process ({e})"
    try:
        for _ in range(200):
            try:
                with open(f"/proc/{child.pid}/syscall") as f:
                    if f.read().split(" ", 1)[0].isdigit():  # in a syscall (e.g. sleeping)
                        return None
            except FileNotFoundError:
                return "no /proc/<pid>/syscall on this kernel (CONFIG_HAVE_ARCH_TRACEHOOK)"
            except PermissionError:
                return "/proc/<pid>/syscall of a child is not readable (ptrace restrictions)"
            time.sleep(0.005)
        return "a probe process never showed a syscall in /proc/<pid>/syscall"
    finally:
        child.kill()
        child.wait()


def launch(
    argv: Callable[[int], list[str]], what: str
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start a pre-started interpreter (``argv(its control fd)``: the zygote, the jail server)
    with an empty environment in its own session; wait for its ``ready`` line."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        argv(theirs.fileno()), pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, env={"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"},
        start_new_session=True,
    )  # fmt: skip
    theirs.close()
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    line = b""
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 64)
            if not chunk:
                break
            line += chunk
    if line != b"ready\n":
        proc.kill()
        proc.wait()
        ours.close()
        raise ZygoteError(f"{what} did not start (exit {proc.returncode})")
    return proc, ours


def _zygote_argv(fd: int) -> list[str]:
    return [python_executable(), "-I", "-S", "-B", str(MAIN), str(fd), site_dirs()]


class Zygote:
    """A pre-started interpreter that forks per request (``spawn``), started on first use and
    again if it died: the runner zygote by default; ``layers/runner.py``'s jail server too."""

    def __init__(
        self, argv: Callable[[int], list[str]] = _zygote_argv, what: str = "the runner zygote"
    ) -> None:
        self._argv, self.what = argv, what
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self.starts = 0

    def _ensure(self) -> socket.socket:
        if self._proc is not None and self._proc.poll() is None and self._ctl is not None:
            return self._ctl
        if self._ctl is not None:
            self._ctl.close()
        proc, ours = launch(self._argv, self.what)
        self._proc, self._ctl = proc, ours
        self.starts += 1
        if self.starts > 1:
            log.warning("%s restarted (start %d)", self.what, self.starts)
        return ours

    def spawn(self, request: dict, fds: list[int]) -> None:
        """Hand one request to the server (it forks for it and returns at once)."""
        payload = json.dumps(request).encode()
        with self._lock:
            ctl = self._ensure()
            try:
                ctl.sendmsg(
                    [payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                )
            except OSError as e:
                raise ZygoteError(f"{self.what} is unreachable: {e}") from e

    def close(self) -> None:
        with self._lock:
            if self._ctl is not None:
                self._ctl.close()
                self._ctl = None
            if self._proc is not None:
                self._proc.kill()
                self._proc.wait()
                if self._proc.stdout is not None:
                    self._proc.stdout.close()
                self._proc = None
