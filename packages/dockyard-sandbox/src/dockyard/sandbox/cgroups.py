"""Per-task cgroups (pids + memory), v1 or v2, whichever is writable here.

A task's whole process tree joins one cgroup per controller before bwrap starts, so the caps
hold for every descendant (a fork bomb, a memory bomb, tmpfs pages written to /dev/shm).
Where no controller is writable, :func:`probe` says so and the sandbox falls back to rlimits
(RLIMIT_NPROC per task uid, RLIMIT_AS) with a warning: those do not bound tmpfs pages.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

_ROOT = Path("/sys/fs/cgroup")
_PARENT = "dockyard-sandbox"


def _mounts() -> list[tuple[str, Path, set[str]]]:
    """(fstype, mountpoint, controllers) for each cgroup mount."""
    out = []
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) < 4 or parts[2] not in ("cgroup", "cgroup2"):
            continue
        mnt = Path(parts[1].replace("\\040", " "))
        if parts[2] == "cgroup":
            ctrls = {o for o in parts[3].split(",") if o in ("pids", "memory", "cpuacct")}
        else:
            try:
                ctrls = set((mnt / "cgroup.controllers").read_text().split()) & {"pids", "memory"}
            except OSError:
                ctrls = set()
        out.append((parts[2], mnt, ctrls))
    return out


def _own_path(version: str, controller: str) -> str:
    """This process's cgroup path for ``controller`` (v1) or the unified hierarchy (v2)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hid, ctrls, path = line.split(":", 2)
            if version == "cgroup2" and hid == "0":
                return path
            if version == "cgroup" and controller in ctrls.split(","):
                return path
    except OSError:
        pass
    return "/"


@dataclass
class Controller:
    name: str  # "pids" | "memory"
    version: str  # "cgroup" (v1) | "cgroup2"
    base: Path  # parent dir under which per-task cgroups are created


@dataclass
class Probe:
    controllers: dict[str, Controller] = field(default_factory=dict)
    warning: str = ""

    def describe(self) -> dict[str, str]:
        return {
            n: f"{'v1' if c.version == 'cgroup' else 'v2'}:{c.base}"
            for n, c in self.controllers.items()
        }


def _kill_procs(d: Path, rounds: int = 50) -> None:
    """SIGKILL every process in the cgroup ``d`` (not its children) until it is empty."""
    with contextlib.suppress(OSError):  # v2 (5.14+): the kernel kills the whole subtree
        (d / "cgroup.kill").write_text("1")
    with contextlib.suppress(OSError):  # v1: a task frozen at its memory limit may die again
        (d / "memory.oom_control").write_text("0")
    for i in range(rounds):
        try:
            pids = [int(t) for t in (d / "cgroup.procs").read_text().split() if t.isdigit()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(min(0.02, 0.0005 * 2**i))


def remove_tree(d: Path) -> bool:
    """Kill every process in the cgroup ``d`` and below it, then remove its folders deepest
    first (a cgroup with processes or children cannot be removed). True when ``d`` is gone."""
    try:
        children = [c for c in d.iterdir() if c.is_dir() and not c.is_symlink()]
    except FileNotFoundError:
        return True
    except OSError:
        children = []
    for child in children:
        remove_tree(child)
    for i in range(100):
        _kill_procs(d)
        try:
            d.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno != errno.EBUSY:  # not ours to remove (EACCES, EPERM): no use waiting
                return False
            time.sleep(0.02 if i < 50 else 0.1)  # EBUSY while the killed processes exit
    return not d.exists()


def is_service_dir(d: Path) -> bool:
    """``d`` looks like a service's cgroup parent: ``<cgroup mount>/…/dockyard-sandbox/svc-<pid>``
    (what a state file may name; anything else there is not ours to kill or remove)."""
    d = Path(os.path.normpath(d))
    if d.parent.name != _PARENT or not d.name.startswith("svc-") or not d.name[4:].isdigit():
        return False
    return any(d.is_relative_to(mnt) and d != mnt for _, mnt, _ in _mounts())


def _remove_stale(top: Path) -> None:
    """Remove the cgroups of service processes that no longer exist, with any task cgroups
    left in them (their processes are killed first). A service whose pid was reused meanwhile
    is found by the next start on its work dir instead (its state file names its folders)."""
    for d in top.glob("svc-*"):
        pid = d.name[4:]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            remove_tree(d)


def probe() -> Probe:
    """Find a writable pids and memory controller (v1 preferred where both exist), and v1's
    cpuacct where mounted (the task's CPU time; v2 keeps it in every cgroup's ``cpu.stat``)."""
    found: dict[str, Controller] = {}
    for fstype, mnt, ctrls in sorted(_mounts(), key=lambda m: m[0] != "cgroup"):
        for c in sorted(ctrls):
            if c in found:
                continue
            top = mnt / _own_path(fstype, c).lstrip("/") / _PARENT
            base = top / f"svc-{os.getpid()}"  # one parent per service process
            try:
                top.mkdir(exist_ok=True)
                _remove_stale(top)
                base.mkdir(exist_ok=True)
                if fstype == "cgroup2":  # enable the controller for children
                    (top.parent / "cgroup.subtree_control").write_text(f"+{c}")
                    (top / "cgroup.subtree_control").write_text(f"+{c}")
                    (base / "cgroup.subtree_control").write_text(f"+{c}")
                test = base / f"probe-{os.getpid()}"
                test.mkdir(exist_ok=True)
                test.rmdir()
            except OSError:
                continue
            found[c] = Controller(c, fstype, base)
    p = Probe(found)
    missing = {"pids", "memory"} - set(found)
    if missing:
        p.warning = (
            f"dockyard-sandbox: WARNING: no writable cgroup controller for {sorted(missing)}; "
            "falling back to rlimits (RLIMIT_NPROC per task uid, RLIMIT_AS). These do not bound "
            "tmpfs pages (/dev/shm) nor kill a whole tree on OOM. Run the service as root on a host "
            "with cgroup v1 pids/memory or cgroup v2 (delegated) for full isolation."
        )
    return p


@dataclass
class TaskCgroups:
    """The cgroups of one running task. ``procs_files`` are what the launcher writes its pid to."""

    dirs: dict[str, tuple[Controller, Path]]

    @classmethod
    def create(cls, p: Probe, name: str, memory_bytes: int, pids: int) -> TaskCgroups:
        dirs: dict[str, tuple[Controller, Path]] = {}
        for cname, ctrl in p.controllers.items():
            d = ctrl.base / name
            d.mkdir(exist_ok=True)
            dirs[cname] = (ctrl, d)
            if cname == "pids":
                (d / "pids.max").write_text(str(pids))
            elif cname == "cpuacct":
                pass  # accounting only
            elif ctrl.version == "cgroup":
                (d / "memory.limit_in_bytes").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):  # only with swap accounting
                    (d / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                # An OOM ends the whole task, not one process of it (v1 has no oom.group): with
                # the killer off, the task freezes at the limit and the jail sees `under_oom`.
                with contextlib.suppress(OSError):
                    (d / "memory.oom_control").write_text("1")
            else:
                (d / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):
                    (d / "memory.swap.max").write_text("0")
                with contextlib.suppress(OSError):  # the kernel kills the whole cgroup at once
                    (d / "memory.oom.group").write_text("1")
        return cls(dirs)

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for _, d in self.dirs.values()]

    @property
    def self_join_files(self) -> list[Path]:
        """Where a single-threaded process writes ``0`` to join: v1's thread-level ``tasks``
        moves the writer without the global threadgroup lock (whose RCU grace period costs
        ~10 ms per join on an otherwise idle machine); v2 needs ``cgroup.procs``."""
        return [
            d / ("tasks" if ctrl.version == "cgroup" else "cgroup.procs")
            for ctrl, d in self.dirs.values()
        ]

    def _read(self, cname: str, fname: str) -> str:
        if cname not in self.dirs:
            return ""
        try:
            return (self.dirs[cname][1] / fname).read_text()
        except OSError:
            return ""

    @staticmethod
    def _kv(text: str, key: str) -> int:
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                with contextlib.suppress(ValueError):
                    return int(v)
        return 0

    def pids_limit_hit(self) -> bool:
        return self._kv(self._read("pids", "pids.events"), "max") > 0

    def oom_killed(self) -> bool:
        if "memory" not in self.dirs:
            return False
        ctrl = self.dirs["memory"][0]
        if ctrl.version == "cgroup":
            return self._kv(self._read("memory", "memory.oom_control"), "oom_kill") > 0
        return self._kv(self._read("memory", "memory.events"), "oom_kill") > 0

    def under_oom(self) -> bool:
        """v1: the task hit its memory limit and is frozen there (the killer is off)."""
        if "memory" not in self.dirs or self.dirs["memory"][0].version != "cgroup":
            return False
        return self._kv(self._read("memory", "memory.oom_control"), "under_oom") > 0

    def memory_peak_mb(self) -> float | None:
        if "memory" not in self.dirs:
            return None
        fname = (
            "memory.max_usage_in_bytes"
            if self.dirs["memory"][0].version == "cgroup"
            else "memory.peak"
        )
        raw = self._read("memory", fname).strip()
        return int(raw) / 2**20 if raw.isdigit() else None

    def cpu_seconds(self) -> float | None:
        """CPU time of every process the task ran (None where no cgroup accounts for it)."""
        raw = self._read("cpuacct", "cpuacct.usage").strip()
        if raw.isdigit():
            return int(raw) / 1e9
        for ctrl, d in self.dirs.values():
            if ctrl.version == "cgroup2":
                with contextlib.suppress(OSError):
                    usec = self._kv((d / "cpu.stat").read_text(), "usage_usec")
                    return usec / 1e6
        return None

    def pids_peak(self) -> int | None:
        raw = self._read("pids", "pids.peak").strip()
        return int(raw) if raw.isdigit() else None

    def pids(self) -> set[int]:
        out: set[int] = set()
        for cname in self.dirs:
            for tok in self._read(cname, "cgroup.procs").split():
                with contextlib.suppress(ValueError):
                    out.add(int(tok))
        return out

    def move_to(self, name: str, rounds: int = 20, skip: int = 0) -> bool:
        """Move every process of these cgroups but ``skip`` (an exiting one: a write to
        ``cgroup.procs`` can cost an RCU grace period, ~10 ms) into the cgroups named ``name``
        (another jail's, on the same controllers): True once none is left (a process forking
        meanwhile is caught by a later round), False if the target is gone or ``rounds`` did
        not suffice."""
        for _ in range(rounds):
            left = False
            for cname, (ctrl, _d) in self.dirs.items():
                target = ctrl.base / name / "cgroup.procs"
                for tok in self._read(cname, "cgroup.procs").split():
                    if tok == str(skip):
                        continue
                    left = True
                    try:
                        target.write_text(tok)
                    except ProcessLookupError:
                        continue
                    except OSError:
                        return False
            if not left:
                return True
        return not self.pids() - {skip}

    def kill_all(self, rounds: int = 50, skip: int = 0) -> None:
        """SIGKILL every process in the task's cgroups until they are empty (but for ``skip``,
        killed already and not waited for)."""
        for cname, (ctrl, d) in self.dirs.items():
            if ctrl.version == "cgroup2" and (d / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (d / "cgroup.kill").write_text("1")
                del cname
        for i in range(rounds):
            pids = self.pids() - {skip}
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(min(0.01, 0.0005 * 2**i))  # most trees are gone within a millisecond

    def remove(self) -> None:
        self.kill_all()
        for _, d in self.dirs.values():
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
