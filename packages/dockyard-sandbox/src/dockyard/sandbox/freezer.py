"""Hold a running jail's processes still while the service reads the tree they can change.

A session's terminal (tty.py) keeps agent processes alive between calls. File operations are
race-free without this (paths.py, trees.py: by fds, nothing followed), but ``finish`` needs a
*consistent* tree — a diff or a copy of a workspace that a process keeps rewriting is neither —
so it runs with the session's live processes frozen, and thaws them after.

:func:`frozen` finds the jail's processes through its cgroups (cgroups.py: one per controller,
named after the jail) and, by what the host has:

* **cgroup v2**: ``cgroup.freeze`` of the jail's own cgroup, until ``cgroup.events`` says
  ``frozen 1``;
* **cgroup v1 with the freezer controller mounted**: the processes are moved into a freezer
  cgroup of the service whose ``freezer.state`` is ``FROZEN`` (a process moved into a frozen
  cgroup freezes, so a fork racing the move is caught by the next round), then moved back and
  the cgroup removed on thaw;
* **neither**: ``SIGSTOP`` to each process until a round finds no new one (a stopped process
  cannot fork), ``SIGCONT`` on thaw to those it stopped (one stopped already stays stopped).

Freezing is invisible to the processes in the first two cases, and none of them can resist it.
With no cgroup at all (the rlimit fallback), there is nothing to find the processes by: the
caller gets ``False`` and works on a live tree (safely, not consistently), and says so.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from dockyard.sandbox.cgroups import Probe

_V1_FREEZER = Path("/sys/fs/cgroup/freezer")
_ROUNDS = 50


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except OSError:
        return ""


def _pids(dirs: list[Path]) -> set[int]:
    return {int(t) for d in dirs for t in _read(d / "cgroup.procs").split() if t.isdigit()}


def _wait(cond: object, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.005)
    return False


@contextlib.contextmanager
def frozen(probe: Probe, name: str) -> Iterator[bool]:
    """Freeze the processes of the jail whose cgroups are named ``name`` for the ``with`` body;
    yields whether it could (False: no cgroup to find them by, or the jail has ended)."""
    dirs = [c.base / name for c in probe.controllers.values() if (c.base / name).is_dir()]
    if not dirs:
        yield False
        return
    v2 = next((c.base / name for c in probe.controllers.values() if c.version == "cgroup2"), None)
    if v2 is not None and (v2 / "cgroup.freeze").exists():
        with _v2(v2):
            yield True
    elif _V1_FREEZER.is_dir() and os.access(_V1_FREEZER, os.W_OK):
        with _v1(dirs, name):
            yield True
    else:
        with _stopped(dirs):
            yield True


@contextlib.contextmanager
def _v2(d: Path) -> Iterator[None]:
    (d / "cgroup.freeze").write_text("1")
    try:
        _wait(lambda: "frozen 1" in _read(d / "cgroup.events"))
        yield
    finally:
        with contextlib.suppress(OSError):
            (d / "cgroup.freeze").write_text("0")


def _own_v1_freezer() -> Path:
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, ctrls, path = line.split(":", 2)
        if "freezer" in ctrls.split(","):
            return _V1_FREEZER / path.lstrip("/")
    return _V1_FREEZER


@contextlib.contextmanager
def _v1(dirs: list[Path], name: str) -> Iterator[None]:
    home = _own_v1_freezer()
    fz = home / f"dockyard-freeze-{os.getpid()}-{name}"
    fz.mkdir(exist_ok=True)
    try:
        (fz / "freezer.state").write_text("FROZEN")
        for _ in range(_ROUNDS):
            todo = _pids(dirs) - _pids([fz])
            if not todo:
                break
            for pid in todo:
                with contextlib.suppress(OSError):  # exited meanwhile
                    (fz / "cgroup.procs").write_text(str(pid))
        _wait(lambda: _read(fz / "freezer.state").strip() == "FROZEN")
        yield
    finally:
        with contextlib.suppress(OSError):
            (fz / "freezer.state").write_text("THAWED")
        for pid in _pids([fz]):
            with contextlib.suppress(OSError):
                (home / "cgroup.procs").write_text(str(pid))
        with contextlib.suppress(OSError):
            fz.rmdir()


def _state(pid: int) -> str:
    stat_line = _read(Path(f"/proc/{pid}/stat"))
    return stat_line.rpartition(")")[2].split()[0] if ")" in stat_line else ""


@contextlib.contextmanager
def _stopped(dirs: list[Path]) -> Iterator[None]:
    mine: set[int] = set()
    try:
        for _ in range(_ROUNDS):
            new = {p for p in _pids(dirs) - mine if _state(p) not in ("T", "t")}
            if not new:
                break
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    mine.add(pid)
        _wait(lambda: all(_state(p) in ("T", "t", "") for p in mine))
        yield
    finally:
        for pid in mine:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
