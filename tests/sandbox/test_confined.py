"""paths.py / trees.py: file operations on a tree that another process keeps changing.

The race tests run a real process that swaps a directory of the tree with a symlink to a
"host" directory (``renameat2(RENAME_EXCHANGE)`` in a tight loop: what an agent's terminal can
do between the service's calls, threat 23) while these operations run thousands of times; none
may read, write or remove anything in the host directory. Against the previous path-based
operations (check every component with ``lstat``, then open by name) the same swap leaked the
host file at the 5th read (59 of 3,000), and a write at ``d/sub`` removed the host's ``sub``
tree at the 37th.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard.sandbox.paths import (
    MAX_DEPTH,
    UnsafePath,
    check_no_links,
    force_write,
    is_dir,
    read_file,
    remove,
)
from dockyard.sandbox.trees import TreeTooLarge, copy_tree, walk

SECRET = b"HOST SECRET\n"
SWAPPER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
print("go", flush=True)
while True:
    libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
"""


@pytest.fixture
def raced(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``(root, host)``: ``root/d`` (a real directory holding ``f``) and ``root/l`` (a link to
    ``host``, which holds ``f`` = SECRET) trade places continuously while the test runs."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "f").write_bytes(SECRET)
    os.chmod(host / "f", 0o600)
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_bytes(b"inside\n")
    (root / "l").symlink_to(host)
    proc = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(root / "d"), str(root / "l")],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"go\n"
    try:
        yield root, host
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def _tries(fn, n: int = 3000) -> dict[str, int]:
    seen: dict[str, int] = {}
    for _ in range(n):
        try:
            key = repr(fn())
        except (UnsafePath, FileNotFoundError, NotADirectoryError) as e:
            key = type(e).__name__
        seen[key] = seen.get(key, 0) + 1
    return seen


def test_reads_never_reach_through_a_swapped_link(raced: tuple[Path, Path]) -> None:
    root, _ = raced
    seen = _tries(lambda: read_file(root, "d/f", 1 << 10))
    assert repr(SECRET) not in seen, seen
    assert seen.get(repr(b"inside\n"), 0) > 0  # the race ran both ways: some reads got through
    assert set(seen) - {repr(b"inside\n")}, seen  # ...and some hit the link and were refused


def test_writes_and_removes_never_reach_through_a_swapped_link(raced: tuple[Path, Path]) -> None:
    root, host = raced
    for i in range(1500):
        with contextlib.suppress(UnsafePath, FileNotFoundError):
            force_write(root, f"d/new{i % 7}", b"x", uid=0, gid=0)
        for rel in ("d/f", f"d/new{i % 5}"):
            with contextlib.suppress(UnsafePath):
                remove(root, rel)
        is_dir(root, "d")
    assert sorted(p.name for p in host.iterdir()) == ["f"]
    assert (host / "f").read_bytes() == SECRET


def test_walk_and_copy_never_enter_a_swapped_link(raced: tuple[Path, Path], tmp_path: Path) -> None:
    root, host = raced
    host_inodes = {os.lstat(host).st_ino, os.lstat(host / "f").st_ino}
    for i in range(300):
        # the names trade places, so "l/f" may be the real directory's file under its momentary
        # name; what must never appear is the host directory or its file
        walked = {(e.rel, e.st.st_ino) for e in walk(root)}
        assert not {ino for _, ino in walked} & host_inodes, walked
        dest = tmp_path / f"copy{i}"
        dest.mkdir()
        copy_tree(root, dest, uid=os.getuid(), gid=os.getgid())
        for p in dest.rglob("*"):
            if p.is_file() and not p.is_symlink():
                assert p.read_bytes() == b"inside\n", p
    assert (host / "f").read_bytes() == SECRET


PLANTER = r"""
import os, sys
d, host = sys.argv[1], "nowhere"  # dangling links: the planter's own writes never leave the tree
print("go", flush=True)
n = 0
while True:
    n += 1
    for make in (lambda: os.symlink(host, d), lambda: os.mkdir(d),
                 lambda: open(f"{d}/p{n % 64}", "w").close(), lambda: os.symlink(host, f"{d}/x")):
        try:
            make()
        except OSError:
            pass
"""


def test_a_tree_changed_under_a_write_is_refused_never_a_server_error(tmp_path: Path) -> None:
    """A process that writes into the directory being replaced (its ``rmdir``: ENOTEMPTY), makes
    the name again between its removal and its ``mkdir`` (EEXIST), or the leaf between its
    removal and its ``O_EXCL`` open: each is UnsafePath (a 422 and the agent's doing), not an
    OSError (a 500, which the trainer would mask as infra_error). The service once answered a
    session's put_file with a 500 for the first."""
    root = tmp_path / "root"
    root.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", PLANTER, str(root / "d")], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"go\n"
    seen: dict[str, int] = {}
    try:
        for _ in range(3000):
            try:
                force_write(root, "d/x", b"x", uid=0, gid=0)
                key = "written"
            except UnsafePath:
                key = "refused"
            seen[key] = seen.get(key, 0) + 1
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert seen.get("refused", 0) > 0, seen  # the planter got in the way


def test_links_are_refused_or_replaced_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(UnsafePath):
        check_no_links(root, "link/x")
    with pytest.raises(UnsafePath):
        read_file(root, "link/x", 10)
    assert not is_dir(root, "link")
    (outside / "x").write_text("keep")
    with pytest.raises(UnsafePath):
        remove(root, "link/x")
    assert (outside / "x").read_text() == "keep"
    force_write(root, "link/x", b"data", uid=0, gid=0)  # the link parent is replaced by a dir
    assert [p.name for p in outside.iterdir()] == ["x"]
    assert (root / "link").is_dir()
    assert not (root / "link").is_symlink()


def test_content_classes_are_unsafe_or_too_large_never_oserror(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(UnsafePath, match="longer than 255"):
        force_write(root, "a/" + "n" * 300, b"x", uid=0, gid=0)
    with pytest.raises(UnsafePath, match="levels deep"):
        force_write(root, "/".join(["d"] * (MAX_DEPTH + 5)), b"x", uid=0, gid=0)
    long_path = "/".join(["p" * 200] * 30)  # 6,000 characters: past PATH_MAX, within limits
    force_write(root, long_path, b"deep", uid=0, gid=0)
    assert read_file(root, long_path, 10) == b"deep"
    remove(root, long_path)
    # a tree deeper than a walk allows (made by fds: no path could name it)
    fd = os.open(root, os.O_RDONLY)
    for _ in range(MAX_DEPTH + 3):
        os.mkdir("z", dir_fd=fd)
        nxt = os.open("z", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    with pytest.raises(TreeTooLarge):
        list(walk(root))
    with pytest.raises(TreeTooLarge):
        list(walk(tmp_path / "root", max_entries=10))


def test_special_and_badly_named_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.mkfifo(root / "fifo")
    with pytest.raises(UnsafePath, match="not a regular file"):
        read_file(root, "fifo", 10)  # O_NONBLOCK: refused at once, the service never waits
    monkeypatch.chdir(root)  # a socket's path must fit in 108 bytes
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock")
    sock.close()
    with pytest.raises(UnsafePath, match="not a regular file"):
        read_file(root, "sock", 10)  # open(2) says ENXIO: once a server error (500)
    os.mkdir(os.fsencode(root) + b"/bad\xff")
    with pytest.raises(UnsafePath, match="not UTF-8"):
        list(walk(root))
    (root / "x").write_text("x")
    (root / "rel").symlink_to("x")
    (root / "abs").symlink_to("/etc/shadow")
    os.chmod(root / "x", 0o4755)
    dest = tmp_path / "dest"
    dest.mkdir()
    skipped = copy_tree(root, dest, uid=12345, gid=12345)
    assert sorted(skipped) == ["fifo", "sock"]
    assert os.readlink(dest / "abs") == "/etc/shadow"
    assert os.readlink(dest / "rel") == "x"
    st = os.lstat(dest / "x")
    assert (st.st_uid, st.st_mode & 0o7777) == (12345, 0o755)  # owner reset, set-uid dropped
    assert os.path.isdir(os.fsencode(dest) + b"/bad\xff")  # copied as the same bytes
