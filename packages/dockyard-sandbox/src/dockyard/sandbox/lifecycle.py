"""The service's claim on its work dir: one live service per work dir, nothing left behind.

At start, :meth:`WorkDir.claim` takes an exclusive ``flock`` on ``<work>/.dockyard-sandbox.lock``
(held, by an open file description no child inherits, for the life of the process): a second
service on the same work dir is refused with :class:`WorkDirInUse` naming the first one's pid,
before it could unmount a live service's workspaces. With the lock taken, whatever a previous
service on this work dir left (it was killed: SIGKILL, OOM, a power cut) is reclaimed, as named
by its state file ``<work>/.dockyard-sandbox.state`` (written atomically; the lock, not the pid,
says that service is gone, so a reused pid misleads nothing):

* the mounts under ``ws/`` (workspaces) and at ``trusted/`` (the trusted tmpfs), then those dirs;
* its cgroup folders (``…/dockyard-sandbox/svc-<pid>`` per controller): the processes left in
  them and in their task cgroups are killed, then the folders removed, deepest first;
* repository-cache temp dirs (``.tmp-<key>-<pid>-<thread>``) of that service or of any dead pid.

At shutdown (after the drain), :meth:`WorkDir.close` removes what this service made: its cgroup
folders (killing what still runs there), the mounts, ``ws/``, ``trusted/``, the cache when it
lives in the work dir (the default; a ``--cache-dir`` given separately is the operator's
persistent cache and is kept, minus this service's own temp dirs), the state and lock files,
and the work dir itself if the service created it (a temp dir, or a path that did not exist).
An operator's existing ``--work-dir`` is left in place, empty of everything the service made;
anything else in it is not touched. Clean-up logs its failures and never raises.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockyard.sandbox.cgroups import is_service_dir, remove_tree
from dockyard.sandbox.workspace import mounts_under, unmount_all

log = logging.getLogger("dockyard.sandbox")

LOCK_NAME = ".dockyard-sandbox.lock"
STATE_NAME = ".dockyard-sandbox.state"
STATE_VERSION = 1


class WorkDirInUse(RuntimeError):
    """Another live service holds the work dir's lock."""

    def __init__(self, work_dir: Path, pid: int | None):
        self.work_dir, self.pid = work_dir, pid
        who = f"pid {pid}" if pid else "pid unknown"
        super().__init__(
            f"--work-dir {work_dir} is in use by another live dockyard-sandbox service ({who}); "
            "give each service its own work dir, or stop that one first"
        )


def _holder_pid(fd: int, work_dir: Path) -> int | None:
    """The pid the lock holder wrote into the lock file (or its state file)."""
    for _ in range(20):  # the holder writes its pid just after taking the lock
        with contextlib.suppress(OSError, ValueError):
            raw = os.pread(fd, 32, 0).decode().strip()
            if raw:
                return int(raw)
        time.sleep(0.05)
    pid = _read_state(work_dir).get("pid")
    return pid if isinstance(pid, int) else None


def _lock(work_dir: Path) -> int:
    """An fd holding the exclusive lock on ``work_dir``'s lock file, our pid written into it."""
    path = work_dir / LOCK_NAME
    for _ in range(20):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise
            pid = _holder_pid(fd, work_dir)
            os.close(fd)
            raise WorkDirInUse(work_dir, pid) from None
        # A service shutting down unlinks the file: a lock on the unlinked one would be no lock.
        try:
            st, cur = os.fstat(fd), os.stat(path, follow_symlinks=False)
            same = (st.st_dev, st.st_ino) == (cur.st_dev, cur.st_ino)
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)
    raise RuntimeError(f"could not lock {path}: it keeps being replaced")


def _read_state(work_dir: Path) -> dict[str, Any]:
    path = work_dir / STATE_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as e:
        log.warning("cannot read %s: %s", path, e)
        return {}
    try:
        if os.fstat(fd).st_uid != os.geteuid():  # not written by a service running as us
            log.warning("ignoring %s: not owned by uid %d", path, os.geteuid())
            return {}
        with os.fdopen(os.dup(fd), "rb") as f:
            state = json.loads(f.read(1 << 20))
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        return {}
    finally:
        os.close(fd)


def _tmp_pid(name: str) -> int | None:
    """The pid in a cache temp dir's name, ``.tmp-<key>-<pid>-<thread>``."""
    parts = name[len(".tmp-") :].split("-")
    return int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else None


def _rmtree(path: Path) -> None:
    """Remove ``path`` (a file or a tree) unless something is still mounted below it."""
    if not os.path.lexists(path):
        return
    if unmount_all(path):
        raise OSError(f"{path}: mounts remain below it, not removed")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _step(what: str, fn: Any, *args: Any) -> Any:
    """Run one clean-up step: a failure is logged, never raised."""
    try:
        return fn(*args)
    except Exception:
        log.exception("clean-up: %s failed", what)
        return None


@dataclass
class WorkDir:
    """The work dir a live service holds (see the module docstring)."""

    path: Path
    cache_dir: Path
    own_cache: bool  # the cache is the default one inside the work dir: removed at shutdown
    created: bool  # made by this service (or by the dead one it took over from): removed
    lock_fd: int = -1
    cgroups: list[str] = field(default_factory=list)
    reclaimed: dict[str, list[str]] = field(default_factory=dict)  # what the claim removed
    closed: bool = False

    @classmethod
    def claim(cls, work_dir: Path | None, cache_dir: Path | None = None) -> WorkDir:
        """Lock ``work_dir`` (a new temp dir when None), reclaim what a dead service left in it,
        and record this service in its state file. Raises :class:`WorkDirInUse`."""
        if work_dir is None:
            path, created = Path(tempfile.mkdtemp(prefix="dockyard-sandbox-")), True
        else:
            path = Path(work_dir)
            created = not os.path.lexists(path)
            path.mkdir(parents=True, exist_ok=True)
        try:
            fd = _lock(path)
        except BaseException:
            if created:
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
        try:
            prev = _read_state(path)
            wd = cls(
                path=path,
                cache_dir=cache_dir if cache_dir is not None else path / "cache",
                own_cache=cache_dir is None,
                # a dir the dead service created is still the service's to remove
                created=created or bool(prev.get("created_work_dir")),
                lock_fd=fd,
            )
            wd._reclaim(prev)
            wd._write_state()
        except BaseException:
            os.close(fd)
            raise
        return wd

    @property
    def env_cache(self) -> Path:
        """Where provisioned environments go without ``--env-cache-dir`` (removed at shutdown)."""
        return self.path / "envs"

    @property
    def ws(self) -> Path:
        return self.path / "ws"

    @property
    def trusted(self) -> Path:
        return self.path / "trusted"

    def record_cgroups(self, dirs: list[Path]) -> None:
        """Note this service's cgroup folders in the state file (for the next start)."""
        self.cgroups = [str(d) for d in dirs]
        self._write_state()

    def _write_state(self) -> None:
        state = {
            "version": STATE_VERSION,
            "pid": os.getpid(),
            "started": time.time(),
            "work_dir": str(self.path),
            "created_work_dir": self.created,
            "cache_dir": str(self.cache_dir),
            "own_cache": self.own_cache,
            "cgroups": self.cgroups,
        }
        tmp = self.path / f"{STATE_NAME}.tmp"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.write(fd, json.dumps(state, indent=1).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path / STATE_NAME)
        dfd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _reclaim(self, prev: dict[str, Any]) -> None:
        """Remove what a killed service left (we hold the lock: it is not alive)."""
        found: dict[str, list[str]] = {"mounts": [], "cgroups": [], "cache_tmp": []}
        for root, below_only in ((self.ws, True), (self.trusted, False)):
            found["mounts"] += [str(m) for m in mounts_under(root, include_self=not below_only)]
            left = unmount_all(root, include_self=not below_only)
            if left:
                log.warning("cannot unmount what a previous service left: %s", left)
            elif below_only and root.is_dir():
                for p in root.iterdir():
                    _step(f"removing stale {p}", _rmtree, p)
            else:
                _step(f"removing stale {root}", _rmtree, root)
        for d in prev.get("cgroups") or []:
            d = Path(str(d))
            if not is_service_dir(d):
                log.warning("state file names %s: not a service cgroup folder, left alone", d)
                continue
            if d.exists():
                found["cgroups"].append(str(d))
                if not remove_tree(d):
                    log.warning("cannot remove the stale cgroup %s", d)
        dead = {prev["pid"]} if isinstance(prev.get("pid"), int) else set()
        caches = {self.cache_dir}
        if prev.get("cache_dir"):
            caches.add(Path(str(prev["cache_dir"])))
        for cache in caches:
            found["cache_tmp"] += self._remove_cache_tmp(cache, dead, only_dead=True)
        self.reclaimed = found
        if any(found.values()):
            log.warning(
                "reclaimed what a previous service (pid %s) left in %s: %d mounts, %d cgroup "
                "folders, %d cache temp dirs",
                prev.get("pid", "?"),
                self.path,
                len(found["mounts"]),
                len(found["cgroups"]),
                len(found["cache_tmp"]),
            )

    @staticmethod
    def _remove_cache_tmp(cache: Path, pids: set[int], only_dead: bool) -> list[str]:
        """Remove the cache temp dirs of ``pids`` (and, with ``only_dead``, of any pid not
        alive: a live service sharing the cache may be materialising into one)."""
        out = []
        try:
            entries = [p for p in cache.iterdir() if p.name.startswith(".tmp-")]
        except OSError:
            return out
        for p in entries:
            pid = _tmp_pid(p.name)
            if pid is None:
                continue
            if pid in pids or (only_dead and not os.path.exists(f"/proc/{pid}")):
                out.append(str(p))
                _step(f"removing {p}", shutil.rmtree, p)
        return out

    def close(self) -> None:
        """Remove what this service made (see the module docstring); idempotent, never raises."""
        if self.closed:
            return
        self.closed = True
        for d in self.cgroups:
            if not _step(f"removing cgroup {d}", remove_tree, Path(d)):
                log.warning("clean-up: the cgroup %s could not be removed", d)
        for root, below_only in ((self.ws, True), (self.trusted, False)):
            left = _step(f"unmounting under {root}", unmount_all, root, not below_only)
            if left:
                log.warning("clean-up: still mounted: %s", left)
        _step("removing the workspaces", _rmtree, self.ws)
        _step("removing the trusted dir", _rmtree, self.trusted)
        # provisioned environments kept here when no --env-cache-dir is given: the service's own
        _step("unmounting images under the environment cache", unmount_all, self.env_cache, True)
        _step("removing the default environment cache", _rmtree, self.env_cache)
        if self.own_cache:
            _step("removing the repository cache", _rmtree, self.cache_dir)
        else:
            _step(
                "removing cache temp dirs",
                self._remove_cache_tmp,
                self.cache_dir,
                {os.getpid()},
                False,
            )
        for name in (f"{STATE_NAME}.tmp", STATE_NAME, LOCK_NAME):
            _step(f"removing {name}", (self.path / name).unlink, True)  # missing_ok
        if self.lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.lock_fd)
            self.lock_fd = -1
        if self.created:
            try:
                self.path.rmdir()
            except FileNotFoundError:
                pass
            except OSError as e:
                left = sorted(os.listdir(self.path)) if self.path.is_dir() else []
                log.warning("clean-up: %s kept (%s): it holds %s", self.path, e.strerror, left[:20])


def reclaim(work_dir: str | os.PathLike[str]) -> bool:
    """Do what the next start on ``work_dir`` would do about a dead service's leftovers, then
    remove the work dir as that service's own shutdown would have (tests, tooling). False when
    there is nothing to reclaim or a live service holds it."""
    path = Path(work_dir)
    if not (path / LOCK_NAME).exists() and not (path / STATE_NAME).exists():
        return False
    prev = _read_state(path)
    cache = prev.get("cache_dir")
    own = prev.get("own_cache", True)
    try:
        wd = WorkDir.claim(path, None if own or not cache else Path(str(cache)))
    except WorkDirInUse:
        return False
    wd.close()
    return True
