"""An id-mapped, read-only bind of one layer (stdlib only; run by the service as host root).

``python -I -S idmap_main.py SRC DST UID_BASE COUNT``: ``DST`` becomes a read-only view of
``SRC`` in which the on-disk owner ``UID_BASE + n`` reads as ``n`` (``mount_setattr(2)`` with
``MOUNT_ATTR_IDMAP``). Layers are written by build namespaces whose root is host uid
``UID_BASE``; through these views the image's files belong to root, its ``/etc/passwd`` users
and groups own theirs, and ``stat`` in a session says what it would say in Docker. (Overlayfs
itself cannot be id-mapped; the image's overlay is stacked on these views instead.)

The user namespace that carries the mapping belongs to a child that only waits; it is killed
once the mount holds a reference to it. Exit 0, or 1 with a ``dockyard-idmap:`` line.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

SYS = {"x86_64": (428, 429, 442), "aarch64": (428, 429, 442)}
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_EMPTY_PATH, AT_FDCWD = 1, 0o2000000, 0x1000, -100
MOVE_MOUNT_F_EMPTY_PATH = 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 1, 2, 4, 0x100000
CLONE_NEWUSER = 0x10000000


class _Attr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]  # fmt: skip


def main() -> int:
    src, dst, base, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    libc = ctypes.CDLL(None, use_errno=True)
    open_tree, move_mount, mount_setattr = SYS[os.uname().machine]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        if libc.unshare(CLONE_NEWUSER) != 0:
            os._exit(1)
        os.write(w, b"1")
        signal.pause()
        os._exit(0)
    try:
        if os.read(r, 1) != b"1":
            raise OSError("the mapping's user namespace could not be created")
        for f in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{f}", "w") as fh:
                fh.write(f"{base} 0 {count}\n")  # on-disk base+n <-> seen as n
        ns = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        fd = libc.syscall(
            open_tree, AT_FDCWD, os.fsencode(src), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC
        )
        if fd < 0:
            raise OSError(ctypes.get_errno(), f"open_tree {src}")
        attr = _Attr(
            MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, ns
        )
        if (
            libc.syscall(
                mount_setattr, fd, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr)
            )
            != 0
        ):
            raise OSError(ctypes.get_errno(), "mount_setattr (id-mapped mounts need Linux >= 5.12)")
        if (
            libc.syscall(move_mount, fd, b"", AT_FDCWD, os.fsencode(dst), MOVE_MOUNT_F_EMPTY_PATH)
            != 0
        ):
            raise OSError(ctypes.get_errno(), f"move_mount {dst}")
        return 0
    except OSError as e:
        print(f"dockyard-idmap: {e}", file=sys.stderr)
        return 1
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    sys.exit(main())
