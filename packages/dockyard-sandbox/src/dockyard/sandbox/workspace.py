"""Private workspaces and task uids.

Each task (or session) gets a workspace on its own size- and inode-capped tmpfs mounted by the
service (threat 5: a huge file or millions of small files hit ``ENOSPC``, and the workspace is
gone with the unmount). Where the service may not mount (not root), a plain directory is used
with RLIMIT_FSIZE only, and a warning. Each running task also gets its own unprivileged uid.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import shutil
import threading
import uuid
from pathlib import Path

_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mount_tmpfs(path: Path, options: str) -> None:
    """mount(2) directly: two fewer process spawns per task than mount/umount."""
    if (
        _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode())
        != 0
    ):
        err = ctypes.get_errno()
        raise OSError(err, f"mounting the workspace tmpfs at {path}: {os.strerror(err)}")


def _umount(path: Path) -> None:
    _libc.umount2(os.fsencode(path), _MNT_DETACH)


def _unescape(field: str) -> str:
    """A /proc/self/mounts field: space, tab, newline and backslash are octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts_under(path: Path, include_self: bool = True) -> list[Path]:
    """Mount points below (and at) ``path`` in this mount namespace, deepest (latest) first."""
    root = os.path.realpath(path)
    try:
        with open("/proc/self/mounts") as f:
            points = [_unescape(line.split()[1]) for line in f if len(line.split()) > 1]
    except OSError:
        return []
    found = [
        m for m in points if (include_self and m == root) or m.startswith(root.rstrip("/") + "/")
    ]
    order = sorted(enumerate(found), key=lambda im: (im[1].count("/"), im[0]), reverse=True)
    return [Path(m) for _, m in order]


def unmount_all(path: Path, include_self: bool = True) -> list[Path]:
    """Detach every mount below (and at) ``path``, stacked ones too; returns those still there."""
    for _ in range(8):  # a mount point can hold several stacked mounts
        found = mounts_under(path, include_self)
        if not found:
            return []
        for m in found:
            _umount(m)
    return mounts_under(path, include_self)


class UidPool:
    """Unprivileged uids, one per running task or live session (``base .. base + size``)."""

    def __init__(self, base: int = 200_000, size: int = 4096):
        self.base, self.size = base, size
        self._free = list(range(base + size - 1, base - 1, -1))
        self._lock = threading.Lock()

    def acquire(self) -> int:
        if os.geteuid() != 0:
            return os.geteuid()
        with self._lock:
            if not self._free:
                raise RuntimeError("uid pool exhausted: too many concurrent tasks and sessions")
            return self._free.pop()

    def release(self, uid: int) -> None:
        if os.geteuid() != 0:
            return
        with self._lock:
            self._free.append(uid)


class Workspaces:
    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o711)  # task uids may traverse to their own workspace, not list others
        self.cleanup_stale()
        self.tmpfs = self._can_mount()
        self._mounts: list[Path] = []
        self.warning = (
            ""
            if self.tmpfs
            else "dockyard-sandbox: WARNING: cannot mount a tmpfs per workspace (needs root): "
            "workspaces are plain directories, capped only per file (RLIMIT_FSIZE), not in "
            "total size or file count."
        )

    def _can_mount(self) -> bool:
        probe = self.root / f".probe-{uuid.uuid4().hex[:8]}"
        probe.mkdir()
        try:
            _mount_tmpfs(probe, "size=1m")
        except OSError:
            return False
        else:
            _umount(probe)
            return True
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()

    def service_tmpfs(self, path: Path, size_mb: int = 1024) -> Path:
        """A root-only (0711) tmpfs at ``path`` for the service's own per-task files (trusted
        configs, pre-rewritten bytecode): files made and removed in every task cost inode
        allocations on a disk file system, none here. A plain directory where mounts fail.
        Unmounted by :meth:`close`; one a killed service left is replaced."""
        unmount_all(path)
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o711)
        if self.tmpfs:
            _mount_tmpfs(path, f"size={size_mb}m,mode=0711")
            self._mounts.append(path)
        return path

    def close(self) -> None:
        for p in self._mounts:
            _umount(p)
        self._mounts.clear()

    def create(self, name: str, uid: int, disk_mb: int, inodes: int) -> Path:
        ws = self.root / name
        ws.mkdir(mode=0o700)
        if self.tmpfs:
            try:
                _mount_tmpfs(
                    ws, f"size={disk_mb}m,nr_inodes={inodes},mode=0700,uid={uid},gid={uid}"
                )
            except OSError:
                ws.rmdir()
                raise
        os.chown(ws, uid, uid)
        return ws

    def destroy(self, ws: Path) -> None:
        if self.tmpfs:
            _umount(ws)
        shutil.rmtree(ws, ignore_errors=True)

    def full(self, ws: Path) -> bool:
        """True when the workspace ran out of space or inodes (only meaningful on tmpfs)."""
        if not self.tmpfs:
            return False
        st = os.statvfs(ws)
        return st.f_bavail == 0 or st.f_favail == 0

    def cleanup_stale(self) -> None:
        """Unmount and remove workspaces left behind by a previous run of the service."""
        unmount_all(self.root, include_self=False)
        for p in self.root.iterdir():
            shutil.rmtree(p, ignore_errors=True)
