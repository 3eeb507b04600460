"""Walking and copying a whole tree that a sandboxed process may be changing (threats 23, 24).

Built on :mod:`dockyard.sandbox.paths`'s rule: nothing is opened by path. :func:`walk` is
iterative, lists each directory with ``scandir`` of an fd and opens each subdirectory
``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's fd, holding two fds per level of a tree
whose depth is bounded; :func:`copy_tree` mirrors a walk into another tree through the same fds
(what ``cp -a`` did by name, as root, over a tree the agent could swap links into).

Bounds are the content's doing: :class:`TreeTooLarge` (``resource_limit``) past ``max_depth`` or
``max_entries``; an entry that vanishes or changes kind mid-walk is skipped.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dockyard.sandbox.paths import (
    DIR_FLAGS,
    GONE,
    LEAF_FLAGS,
    MAX_DEPTH,
    NOT_A_DIR,
    UnsafePath,
    closing_fd,
    kind_of,
    open_root,
    read_regular,
)

MAX_ENTRIES = 1_000_000  # per walk (a workspace's inode cap is the tighter bound in practice)


class TreeTooLarge(Exception):
    """A walk or copy past its depth or entry bound: the content's doing (``resource_limit``)."""


@dataclass(frozen=True)
class Entry:
    """One walked entry: ``rel`` (``a/b``), ``kind`` ('d' dir, 'f' regular, 'l' symlink, 'o'
    other: FIFO, socket, device), its ``lstat``, and ``dir_fd`` / ``name``: its parent's fd and
    its name there, valid until the walk moves on (open the entry through them, not by path)."""

    rel: str
    kind: str
    st: os.stat_result
    dir_fd: int
    name: str

    def open(self) -> int | None:
        """The entry opened for reading (``O_NOFOLLOW | O_NONBLOCK``); None if it vanished or
        was swapped for a link since it was listed. Check ``fstat`` on the fd, not ``st``."""
        try:
            return os.open(self.name, LEAF_FLAGS, dir_fd=self.dir_fd)
        except OSError as e:
            if e.errno in GONE + NOT_A_DIR:
                return None
            raise

    def read(self, max_bytes: int) -> bytes | None:
        """The regular file's bytes (UnsafePath past ``max_bytes``); None if it vanished or is
        no longer a regular file."""
        fd = self.open()
        if fd is None:
            return None
        with closing_fd(fd):
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return read_regular(fd, self.rel, max_bytes)

    def readlink(self) -> str | None:
        try:
            return os.readlink(self.name, dir_fd=self.dir_fd)
        except OSError as e:
            if e.errno in (*GONE, errno.EINVAL):
                return None
            raise


def bad_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def walk(
    root: os.PathLike[str] | str | int,
    *,
    skip_dirs: frozenset[str] = frozenset(),
    max_entries: int = MAX_ENTRIES,
    max_depth: int = MAX_DEPTH,
    allow_bad_names: bool = False,
    on_dir: Callable[[str, int], None] | None = None,
) -> Iterator[Entry]:
    """Every entry under ``root`` (a path or a directory fd), parents before children, without
    following links. Directories named in ``skip_dirs`` are reported but not entered. A name
    that is not UTF-8 raises UnsafePath (unless ``allow_bad_names``: it then comes as Python's
    surrogate-escaped ``str``, which ``os`` functions turn back into the same bytes); more than ``max_entries`` entries or a directory deeper
    than ``max_depth`` raises :class:`TreeTooLarge`. ``on_dir(rel, fd)`` is called with each
    entered directory's fd (valid during the call) — how :func:`copy_tree` mirrors the tree."""
    top = os.dup(root) if isinstance(root, int) else open_root(root)
    stack: list[tuple[int, str, Iterator[os.DirEntry[str]]]] = []
    count = 0
    try:
        if on_dir is not None:
            on_dir("", top)
        stack.append((top, "", os.scandir(top)))
        while stack:
            fd, prefix, it = stack[-1]
            entry = next(it, None)
            if entry is None:
                stack.pop()
                it.close()  # type: ignore[attr-defined]
                os.close(fd)
                continue
            if not allow_bad_names and bad_name(entry.name):
                raise UnsafePath(f"a name under {prefix or '.'!r} is not UTF-8: {entry.name!r}")
            rel = f"{prefix}/{entry.name}" if prefix else entry.name
            count += 1
            if count > max_entries:
                raise TreeTooLarge(f"the tree has more than {max_entries} entries")
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # vanished since it was listed
            kind = kind_of(st.st_mode)
            yield Entry(rel, kind, st, fd, entry.name)
            if kind != "d" or entry.name in skip_dirs:
                continue
            if len(stack) > max_depth:
                raise TreeTooLarge(
                    f"the tree is deeper than {max_depth} directories ({rel[:200]}...)"
                )
            try:
                sub = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in GONE + NOT_A_DIR:
                    continue  # removed or swapped for a link since it was listed: not entered
                raise
            try:
                if on_dir is not None:
                    on_dir(rel, sub)
                stack.append((sub, rel, os.scandir(sub)))
            except BaseException:
                os.close(sub)
                raise
    finally:
        for fd, _, it in stack:
            it.close()  # type: ignore[attr-defined]
            os.close(fd)


def copy_tree(
    src: os.PathLike[str] | str,
    dest: os.PathLike[str] | str,
    *,
    uid: int,
    gid: int,
    skip_dirs: frozenset[str] = frozenset(),
    max_entries: int = MAX_ENTRIES,
    id_map: Callable[[int], int] | None = None,
) -> list[str]:
    """Copy everything under ``src`` into the (existing, empty) directory ``dest``, as ``cp -a``
    would but by fds only: links copied as links (never followed), directories and regular files
    with their permission bits (set-id bits dropped) and times, everything owned ``uid:gid`` (or,
    with ``id_map``, by ``id_map`` of the source's owner and group), names as the same bytes.
    Special files are not copied; returns their relative paths. Entries that vanish or change
    kind mid-copy are skipped (copy a frozen tree when it must be consistent)."""
    mirror = _Mirror(open_root(dest), uid, gid, id_map)
    modes: dict[str, os.stat_result] = {}  # directories listed, waiting to be entered
    skipped: list[str] = []

    def on_dir(rel: str, _src_fd: int) -> None:
        if rel:
            mirror.enter(rel, modes.pop(rel))

    try:
        entries = walk(src, skip_dirs=skip_dirs, max_entries=max_entries, allow_bad_names=True,
                       on_dir=on_dir)  # fmt: skip
        for e in entries:
            out = mirror.at(e.rel.rpartition("/")[0])
            if e.kind == "d":
                modes[e.rel] = e.st  # entered (on_dir) next, unless skipped
            elif e.kind == "l":
                target = e.readlink()
                if target is not None:
                    os.symlink(target, e.name, dir_fd=out)
                    lu, lg = mirror.owner(e.st)
                    os.chown(e.name, lu, lg, dir_fd=out, follow_symlinks=False)
            elif e.kind == "f":
                _copy_file(e, out, mirror.owner)
            else:
                skipped.append(e.rel)
    finally:
        mirror.close()
    return skipped


class _Mirror:
    """The destination directories of a copy that the walk is inside, by fd (the root's and
    the current directory's ancestors'); each one's mode, owner and times are set through its fd
    when the walk leaves it, after its content (a read-only directory is filled first)."""

    def __init__(self, root_fd: int, uid: int, gid: int,
                 id_map: Callable[[int], int] | None = None) -> None:  # fmt: skip
        self.open: dict[str, tuple[int, os.stat_result | None]] = {"": (root_fd, None)}
        self.uid, self.gid, self.id_map = uid, gid, id_map

    def owner(self, st: os.stat_result) -> tuple[int, int]:
        if self.id_map is None:
            return self.uid, self.gid
        return self.id_map(st.st_uid), self.id_map(st.st_gid)

    def enter(self, rel: str, st: os.stat_result) -> None:
        head, _, name = rel.rpartition("/")
        pfd = self.at(head)
        os.mkdir(name, 0o700, dir_fd=pfd)
        self.open[rel] = (os.open(name, DIR_FLAGS, dir_fd=pfd), st)

    def at(self, rel: str) -> int:
        """The fd of ``rel``'s mirror, after closing (and finishing) those the walk has left."""
        keep = {""}
        if rel:
            parts = rel.split("/")
            keep |= {"/".join(parts[: i + 1]) for i in range(len(parts))}
        for left in sorted(set(self.open) - keep, key=len, reverse=True):  # deepest first
            self._finish(left)
        return self.open[rel][0]

    def _finish(self, rel: str) -> None:
        fd, st = self.open.pop(rel)
        try:
            if st is not None:
                os.fchown(fd, *self.owner(st))
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o1777)
                os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(fd)

    def close(self) -> None:
        for rel in sorted(self.open, key=len, reverse=True):
            self._finish(rel)


def _copy_file(e: Entry, dest_dir: int, owner: Callable[[os.stat_result], tuple[int, int]]) -> None:
    fd = e.open()
    if fd is None:
        return
    with closing_fd(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return  # swapped for something else since it was listed
        out = os.open(e.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o600, dir_fd=dest_dir)  # fmt: skip
        with closing_fd(out):
            _copy_bytes(fd, out, st.st_size)
            os.fchown(out, *owner(st))
            os.fchmod(out, stat.S_IMODE(st.st_mode) & 0o777)
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))


def _copy_bytes(src: int, dst: int, size: int) -> None:
    try:
        left = size
        while left > 0:
            n = os.copy_file_range(src, dst, left)
            if n == 0:
                break
            left -= n
        else:
            return
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    while chunk := os.read(src, 1 << 20):  # a file that grew, or no copy_file_range here
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view) :]
