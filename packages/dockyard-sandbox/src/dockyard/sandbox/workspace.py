"""Private workspaces and task uids.

Each task (or session) gets a workspace on its own size- and inode-capped tmpfs mounted by the
service (threat 5: a huge file or millions of small files hit ``ENOSPC``, and the workspace is
gone with the unmount). Where the service may not mount (not root), a plain directory is used
with RLIMIT_FSIZE only, and a warning. Each running task also gets its own unprivileged uid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import uuid
from pathlib import Path


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
            r = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True
            )
            if r.returncode != 0:
                return False
            subprocess.run(["umount", str(probe)], capture_output=True)
            return True
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()

    def create(self, name: str, uid: int, disk_mb: int, inodes: int) -> Path:
        ws = self.root / name
        ws.mkdir(mode=0o700)
        if self.tmpfs:
            r = subprocess.run(
                [
                    "mount",
                    "-t",
                    "tmpfs",
                    "-o",
                    f"size={disk_mb}m,nr_inodes={inodes},mode=0700,uid={uid},gid={uid},nosuid,nodev",
                    "tmpfs",
                    str(ws),
                ],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                ws.rmdir()
                raise OSError(f"mounting the workspace tmpfs failed: {r.stderr.strip()}")
        os.chown(ws, uid, uid)
        return ws

    def destroy(self, ws: Path) -> None:
        if self.tmpfs:
            subprocess.run(["umount", "-l", str(ws)], capture_output=True)
        shutil.rmtree(ws, ignore_errors=True)

    def full(self, ws: Path) -> bool:
        """True when the workspace ran out of space or inodes (only meaningful on tmpfs)."""
        if not self.tmpfs:
            return False
        st = os.statvfs(ws)
        return st.f_bavail == 0 or st.f_favail == 0

    def cleanup_stale(self) -> None:
        """Unmount and remove workspaces left behind by a previous run of the service."""
        for p in self.root.iterdir():
            if os.path.ismount(p):
                subprocess.run(["umount", "-l", str(p)], capture_output=True)
            shutil.rmtree(p, ignore_errors=True)
