"""Path safety for everything the service reads or writes in a tree on a task's behalf.

Task-supplied paths (threats 7, 8, 16, 24): :func:`check_rel` — relative, no ``..`` / ``.`` /
empty components, no NUL or backslash, never ``.git`` — and :func:`parts_of` — every name within
``NAME_MAX`` bytes, at most :data:`MAX_DEPTH` levels deep.

Race-free by construction (threat 23). Since sessions gained a persistent terminal (tty.py),
agent processes keep running between the service's calls, and a check-then-open by name
(``lstat`` every component, then ``open(path)``) is a race the agent wins: a process swapping a
directory for a symlink (``renameat2(RENAME_EXCHANGE)`` in a loop) made the service, as root,
read, create and remove host files. So nothing here opens a tree's path by name. Every operation
starts from a directory fd of the tree's root (the service made it: trusted) and opens one
component at a time relative to its parent's fd, with ``O_NOFOLLOW`` (``| O_DIRECTORY`` for
directories):

* a component that is a symlink fails (``ELOOP`` / ``ENOTDIR``) instead of being followed;
* a component swapped *after* it was opened changes nothing: the fd still names the directory
  that was opened, inside the tree (a workspace is its own tmpfs: a rename out of it is
  ``EXDEV``), and no ``..`` is ever resolved;
* leaves are opened ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot stall the service) and checked
  with ``fstat`` on the fd that is then read; removal is ``unlinkat``, or ``shutil.rmtree`` with
  ``dir_fd`` (its fd-based implementation).

``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` resolves a whole path in one call with the
same guarantee; the component walk gives it on every kernel, and Python has no binding for it.
Whole trees (walk, copy) are :mod:`dockyard.sandbox.trees`.

What a tree's content can make fail is the content's doing and the caller's verdict, never
``infra_error`` (threat 24): :class:`UnsafePath` for a name past ``NAME_MAX``, a path deeper than
:data:`MAX_DEPTH`, a symlink or special file where a file or directory is needed; an ``OSError``
with an errno in :data:`FULL_ERRNOS` for a write that ran out of room.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterator

MAX_DEPTH = 128  # directories below the root; deeper content is refused, not walked
NAME_MAX = 255
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EMLINK})
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
LEAF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
GONE = (errno.ENOENT,)
NOT_A_DIR = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)  # EMLINK: O_NOFOLLOW on a link (BSDs)
CHANGED = (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST)  # the name changed under a removal


class UnsafePath(ValueError):
    """A task-supplied path that would escape the tree or touch something protected."""


def check_rel(path: str) -> str:
    """Validate a task-supplied relative path; return it normalised (``a/b``)."""
    if not path or "\x00" in path or "\\" in path:
        raise UnsafePath(f"invalid path {path!r}")
    try:
        path.encode("utf-8")  # a lone surrogate from JSON has no bytes on disk
    except UnicodeEncodeError:
        raise UnsafePath(f"path {path!r} is not valid UTF-8") from None
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


def kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "d"
    if stat.S_ISREG(mode):
        return "f"
    return "l" if stat.S_ISLNK(mode) else "o"


def parts_of(rel: str) -> list[str]:
    """``rel``'s components after :func:`check_rel`, each within ``NAME_MAX`` bytes, at most
    :data:`MAX_DEPTH` deep (``UnsafePath`` otherwise: a request the tree could never hold)."""
    parts = check_rel(rel).split("/")
    if len(parts) > MAX_DEPTH + 1:
        raise UnsafePath(f"path {rel[:200]!r}... is {len(parts)} levels deep (at most {MAX_DEPTH})")
    for p in parts:
        if len(os.fsencode(p)) > NAME_MAX:
            raise UnsafePath(f"a name in {rel[:200]!r} is longer than {NAME_MAX} bytes")
    return parts


@contextlib.contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def open_root(root: os.PathLike[str] | str) -> int:
    """An fd of the tree's root (the caller's own directory: trusted, opened by name)."""
    return os.open(root, DIR_FLAGS)


def open_dir(dir_fd: int, name: str, rel: str) -> int:
    """``name`` under ``dir_fd`` as a directory fd; a symlink or non-directory is UnsafePath."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in NOT_A_DIR:
            raise UnsafePath(f"path {rel!r}: {name!r} is a symlink or not a directory") from e
        if e.errno == errno.ENAMETOOLONG:
            raise UnsafePath(f"path {rel!r}: a name is too long") from e
        raise


def _make_dir(dir_fd: int, name: str, uid: int, gid: int, rel: str) -> int:
    """Make ``name`` under ``dir_fd`` and open it. The tree's own processes may make, swap or
    remove the name meanwhile: that is UnsafePath (the content's doing), never a server error."""
    try:
        os.mkdir(name, 0o755, dir_fd=dir_fd)
        os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        return open_dir(dir_fd, name, rel)
    except (FileExistsError, FileNotFoundError) as e:
        raise UnsafePath(f"path {rel!r}: {name!r} changed while it was being made") from e


@contextlib.contextmanager
def parent(
    root: os.PathLike[str] | str, rel: str, *, create: tuple[int, int] | None = None
) -> Iterator[tuple[int, str]]:
    """``(fd of rel's parent directory, leaf name)``. ``create=(uid, gid)``: missing parents are
    made (0755, owned so) and a parent that is not a real directory is replaced by one; else a
    missing parent raises ``FileNotFoundError``."""
    parts = parts_of(rel)
    fd = open_root(root)
    try:
        for i, name in enumerate(parts[:-1]):
            try:
                nxt = open_dir(fd, name, rel)
            except FileNotFoundError:
                if create is None:
                    raise
                nxt = _make_dir(fd, name, *create, rel)
            except UnsafePath:
                if create is None:
                    raise
                remove_at(fd, name)
                nxt = _make_dir(fd, name, *create, "/".join(parts[: i + 1]))
            os.close(fd)
            fd = nxt
        yield fd, parts[-1]
    finally:
        os.close(fd)


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def remove_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` under ``dir_fd`` (a file, link, or a whole directory tree by fds).

    A name another process swaps meanwhile makes shutil's fd-based ``rmtree`` stop (it checks
    that what it opened is what it ``lstat``-ed, and ``rmdir`` never follows a link), and one
    that writes into the directory as it is emptied makes its ``rmdir`` fail (``ENOTEMPTY``):
    both are UnsafePath, never a removal outside the tree nor a server error."""
    st = lstat_at(dir_fd, name)
    if st is None:
        return
    try:
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=dir_fd)  # the fd-based, symlink-attack-safe rmtree
        else:
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno is None or e.errno in (*NOT_A_DIR, *CHANGED):
            raise UnsafePath(f"{name!r} changed while it was being removed") from e
        raise


def lstat(root: os.PathLike[str] | str, rel: str) -> os.stat_result | None:
    """``lstat`` of ``root/rel`` (None when it or a parent is missing)."""
    try:
        with parent(root, rel) as (fd, leaf):
            return lstat_at(fd, leaf)
    except FileNotFoundError:
        return None


def remove(root: os.PathLike[str] | str, rel: str) -> None:
    """Remove ``root/rel`` (anything, never following links); missing is fine."""
    try:
        with parent(root, rel) as (fd, leaf):
            remove_at(fd, leaf)
    except FileNotFoundError:
        return


def read_file(root: os.PathLike[str] | str, rel: str, max_bytes: int) -> bytes:
    """The regular file ``root/rel`` (``FileNotFoundError`` if missing; UnsafePath if it is a
    link, a directory or a special file, or larger than ``max_bytes``)."""
    with parent(root, rel) as (dfd, leaf):
        try:
            fd = os.open(leaf, LEAF_FLAGS, dir_fd=dfd)
        except OSError as e:
            if e.errno in NOT_A_DIR:
                raise UnsafePath(f"{rel!r} is a symlink") from e
            if e.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket: open(2) refuses it
                raise UnsafePath(f"{rel!r} is not a regular file") from e
            raise
        with closing_fd(fd):
            return read_regular(fd, rel, max_bytes)


def read_regular(fd: int, rel: str, max_bytes: int) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{rel!r} is not a regular file")
    if st.st_size > max_bytes:
        raise UnsafePath(f"{rel!r} is {st.st_size} bytes, over the {max_bytes}-byte cap")
    chunks, total = [], 0
    while chunk := os.read(fd, 1 << 20):
        total += len(chunk)
        if total > max_bytes:  # it grew while we read
            raise UnsafePath(f"{rel!r} is over the {max_bytes}-byte cap")
        chunks.append(chunk)
    return b"".join(chunks)


def force_write(
    root: os.PathLike[str] | str, rel: str, data: bytes, *, uid: int, gid: int, mode: int = 0o644
) -> None:
    """Write ``data`` at ``root/rel``, replacing whatever is there (file, directory, link) and
    any parent that is not a real directory. New parents are owned by ``uid:gid`` (uid 0: the
    root's owner); the file by ``uid:gid`` with ``mode`` (uid 0 for held-out files)."""
    if not uid:
        st = os.stat(root)
        owner = (st.st_uid, st.st_gid)
    else:
        owner = (uid, gid)
    with parent(root, rel, create=owner) as (dfd, leaf):
        remove_at(dfd, leaf)
        try:
            fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         mode, dir_fd=dfd)  # fmt: skip
        except FileExistsError as e:  # the tree's processes made it again after the removal
            raise UnsafePath(f"{rel!r} changed while it was being written") from e
        try:
            with closing_fd(fd):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchown(fd, uid, gid)
                os.fchmod(fd, mode)
        except BaseException:
            with contextlib.suppress(OSError):  # a failed write leaves nothing behind
                os.unlink(leaf, dir_fd=dfd)
            raise


def is_dir(root: os.PathLike[str] | str, rel: str) -> bool:
    """Is ``root/rel`` a real directory reached without links?"""
    try:
        with parent(root, rel) as (dfd, leaf), closing_fd(open_dir(dfd, leaf, rel)):
            return True
    except (FileNotFoundError, UnsafePath):
        return False


def check_no_links(root: os.PathLike[str] | str, rel: str) -> None:
    """UnsafePath unless every existing component of ``root/rel`` (the leaf included) is a real
    directory or, for the leaf, not a link; missing components are fine (they will be made)."""
    try:
        with parent(root, rel) as (fd, leaf):
            st = lstat_at(fd, leaf)
    except FileNotFoundError:
        return
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"path {rel!r} is a symlink")
