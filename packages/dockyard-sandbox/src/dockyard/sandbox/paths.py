"""Path safety for everything the service writes or reads on a task's behalf.

Rules (threats 7, 8, 16): a task-supplied path is relative, has no ``..`` / ``.`` / empty
components, no NUL or backslash, never touches ``.git``; and no component that already exists
in the tree may be a symlink — so nothing is written or read through a link out of the tree.
The service only touches a workspace while no sandbox process of that task is alive, so
these checks cannot be raced.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path


class UnsafePath(ValueError):
    """A task-supplied path that would escape the tree or touch something protected."""


def check_rel(path: str) -> str:
    """Validate a task-supplied relative path; return it normalised (``a/b``)."""
    if not path or "\x00" in path or "\\" in path:
        raise UnsafePath(f"invalid path {path!r}")
    if path.startswith("/"):
        raise UnsafePath(f"absolute path {path!r} (paths are relative to the repository root)")
    parts = [p for p in path.split("/") if p != ""]
    if not parts:
        raise UnsafePath(f"invalid path {path!r}")
    for p in parts:
        if p in ("..", "."):
            raise UnsafePath(f"path {path!r} has a '{p}' component")
        if p == ".git":
            raise UnsafePath(f"path {path!r} is inside .git/")
    return "/".join(parts)


def resolve_in(root: Path, rel: str) -> Path:
    """``root/rel`` after checking that no existing component (the leaf included) is a symlink."""
    rel = check_rel(rel)
    cur = root
    for part in rel.split("/"):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(f"path {rel!r} goes through a symlink ({cur.relative_to(root)})")
    return cur


def remove_any(p: Path) -> None:
    """Remove a file, symlink or directory tree at ``p`` without following links."""
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(p)
    else:
        os.unlink(p)


def force_write(
    root: Path, rel: str, data: bytes, *, uid: int, gid: int, mode: int = 0o644
) -> Path:
    """Write ``data`` at ``root/rel``, replacing whatever is there (file, dir, symlink) and any
    parent that is not a real directory. Parents are created owned by ``uid``; the file is
    owned by ``uid:gid`` with ``mode`` (use uid 0 for held-out files the task may not edit)."""
    rel = check_rel(rel)
    cur = root
    parts = rel.split("/")
    for part in parts[:-1]:
        cur = cur / part
        try:
            st = os.lstat(cur)
            if not stat.S_ISDIR(st.st_mode):
                remove_any(cur)
                raise FileNotFoundError
        except FileNotFoundError:
            os.mkdir(cur, 0o755)
            os.chown(
                cur, uid if uid else os.lstat(root).st_uid, gid if gid else os.lstat(root).st_gid
            )
    target = cur / parts[-1]
    remove_any(target)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return target


def read_confined(root: Path, rel: str, max_bytes: int) -> bytes:
    p = resolve_in(root, rel)
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{rel!r} is not a regular file")
        if st.st_size > max_bytes:
            raise UnsafePath(f"{rel!r} is {st.st_size} bytes, over the {max_bytes}-byte cap")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
