"""Repository materialisation: once per (source, commit) into a cache, then cheap private copies.

A cache entry is a tree owned by root with one fresh git commit (``base``) and no other
history (threat 13: ``git log --all`` finds nothing the task should not see). Sources:

* ``path``    a directory on the server (its ``.git`` is dropped);
* ``tarball`` base64 ``.tar.gz``; members with absolute paths, ``..``, links leaving the tree,
  devices or fifos are rejected (threat 16: zip-slip);
* ``git``     URL or server path, exported at ``commit`` with ``git archive``.

Entries are evicted least-recently-used once the cache exceeds ``max_bytes``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
import threading
from pathlib import Path

from dockyard.sandbox.models import RepoSpec
from dockyard.sandbox.paths import UnsafePath, check_rel

# Trees up to this many entries / bytes are copied from an in-memory snapshot (see copy_to).
SNAPSHOT_MAX_ENTRIES = 2000
SNAPSHOT_MAX_BYTES = 16 << 20
SNAPSHOT_CACHE = 32  # cache entries whose snapshot is kept

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "dockyard",
    "GIT_AUTHOR_EMAIL": "sandbox@dockyard.invalid",
    "GIT_COMMITTER_NAME": "dockyard",
    "GIT_COMMITTER_EMAIL": "sandbox@dockyard.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
}


class RepoError(ValueError):
    """The repository could not be materialised (bad source, unsafe archive)."""


def safe_extract(
    data: bytes, dest: Path, *, max_bytes: int = 2 << 30, max_members: int = 200_000
) -> None:
    """Extract a (gzip'd) tar into ``dest``, refusing anything that could land outside it."""
    try:
        tf = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")  # noqa: SIM115 - closed below
    except (tarfile.TarError, EOFError, OSError) as e:
        raise RepoError(f"repo.tarball: not a tar archive ({e})") from e
    total = 0
    with tf:
        members = tf.getmembers()
        if len(members) > max_members:
            raise RepoError(f"repo.tarball: {len(members)} members, over the cap of {max_members}")
        for m in members:
            name = m.name.removeprefix("./")
            if name in ("", "."):
                continue
            try:
                check_rel(name)
            except UnsafePath as e:
                raise RepoError(f"repo.tarball: member {m.name!r} rejected: {e}") from e
            if m.issym() or m.islnk():
                target = m.linkname
                base = os.path.dirname(name) if m.issym() else ""
                joined = os.path.normpath(os.path.join(base, target))
                if (
                    target.startswith("/")
                    or joined.startswith("..")
                    or joined.split("/")[0] == ".git"
                ):
                    raise RepoError(f"repo.tarball: link {m.name!r} -> {target!r} leaves the tree")
            elif not (m.isfile() or m.isdir()):
                raise RepoError(f"repo.tarball: member {m.name!r} is a device/fifo (refused)")
            total += max(m.size, 0)
            if total > max_bytes:
                raise RepoError(f"repo.tarball: unpacks to over {max_bytes} bytes")
        # filter="data" (PEP 706) re-checks every member and strips ownership and modes.
        tf.extractall(dest, filter="data")


def _git(args: list[str], cwd: Path) -> str:
    r = subprocess.run(
        ["git", *args], cwd=cwd, env=_GIT_ENV, capture_output=True, text=True, timeout=600
    )
    if r.returncode != 0:
        raise RepoError(f"git {' '.join(args[:2])} failed: {r.stderr.strip()[:500]}")
    return r.stdout


class RepoCache:
    """Cache of materialised base trees keyed by source and commit."""

    def __init__(self, root: Path, max_bytes: int = 20 << 30):
        self.root = root
        self.max_bytes = max_bytes
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self._snaps: dict[tuple[str, int, int], list | None] = {}  # see _snapshot

    @staticmethod
    def key(spec: RepoSpec) -> str:
        h = hashlib.sha256()
        if spec.tarball:
            h.update(b"tar\0")
            h.update(spec.tarball.encode())
        elif spec.git:
            if not spec.commit:
                raise RepoError("repo.git needs repo.commit (a full or abbreviated commit id)")
            h.update(f"git\0{spec.git}\0{spec.commit}".encode())
        elif spec.path:
            h.update(f"path\0{os.path.realpath(spec.path)}".encode())
        else:
            h.update(b"empty")
        return h.hexdigest()[:32]

    def get(self, spec: RepoSpec) -> Path:
        """The cached base tree for ``spec`` (materialised on first use). Root-owned: copy it."""
        key = self.key(spec)
        entry = self.root / key
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if (entry / "tree").is_dir():
                self.hits += 1
                os.utime(entry, None)
                return entry / "tree"
            self.misses += 1
            tmp = self.root / f".tmp-{key}-{os.getpid()}-{threading.get_ident()}"
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "tree").mkdir(parents=True)
            try:
                self._materialise(spec, tmp / "tree")
                _git(["init", "-q", "-b", "main"], tmp / "tree")
                _git(["add", "-A", "-f"], tmp / "tree")
                _git(["commit", "-q", "--allow-empty", "--no-verify", "-m", "base"], tmp / "tree")
                shutil.rmtree(tmp / "tree" / ".git" / "hooks", ignore_errors=True)
                os.rename(tmp, entry)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        self._evict(keep=key)
        return entry / "tree"

    def _materialise(self, spec: RepoSpec, dest: Path) -> None:
        if spec.tarball:
            try:
                data = base64.b64decode(spec.tarball, validate=True)
            except (binascii.Error, ValueError) as e:
                raise RepoError(f"repo.tarball: not valid base64 ({e})") from e
            safe_extract(data, dest)
        elif spec.git:
            src = spec.git
            clone = dest.parent / "clone"
            if not os.path.isdir(src):
                _git(["clone", "-q", "--no-checkout", src, str(clone)], dest.parent)
                src = str(clone)
            archive = subprocess.run(
                ["git", "-C", src, "archive", "--format=tar", spec.commit or "HEAD"],
                env=_GIT_ENV,
                capture_output=True,
                timeout=600,
            )
            if archive.returncode != 0:
                raise RepoError(
                    f"repo.git: cannot export {spec.commit!r}: {archive.stderr.decode()[:300]}"
                )
            safe_extract(archive.stdout, dest)
            shutil.rmtree(clone, ignore_errors=True)
        elif spec.path:
            if not os.path.isdir(spec.path):
                raise RepoError(f"repo.path: {spec.path!r} is not a directory on the server")
            shutil.copytree(
                spec.path,
                dest,
                symlinks=True,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns(".git"),
            )
        for dirpath, dirnames, filenames in os.walk(dest):
            for n in dirnames:
                if not os.path.islink(os.path.join(dirpath, n)):
                    os.chmod(os.path.join(dirpath, n), 0o755)
            for n in filenames:
                p = os.path.join(dirpath, n)
                if not os.path.islink(p):
                    mode = os.lstat(p).st_mode
                    os.chmod(p, 0o755 if mode & 0o111 else 0o644)

    def _evict(self, keep: str) -> None:
        entries = []
        total = 0
        for e in self.root.iterdir():
            if e.name.startswith(".tmp-"):
                continue
            size = sum(f.stat().st_size for f in e.rglob("*") if f.is_file() and not f.is_symlink())
            entries.append((e.stat().st_mtime, size, e))
            total += size
        for _, size, e in sorted(entries):
            if total <= self.max_bytes:
                break
            if e.name != keep:
                with self._lock:
                    self._snaps.clear()
                shutil.rmtree(e, ignore_errors=True)
                total -= size

    def copy_to(self, tree: Path, dest: Path, uid: int) -> None:
        """A private, writable copy of ``tree`` in ``dest`` owned by ``uid``. Small trees are
        written from an in-memory snapshot taken once per cache entry (no walk, no stat per
        task); large ones are copied with ``cp --reflink=auto`` (a reflink where the file
        system has it). Hard links are not used: they would let a task edit the cache."""
        snap = self._snapshot(tree)
        if snap is None:
            r = subprocess.run(
                ["cp", "-a", "--reflink=auto", f"{tree}/.", str(dest)],
                capture_output=True,
                timeout=600,
            )
            if r.returncode != 0:
                raise RepoError(f"copying the repository failed: {r.stderr.decode()[:300]}")
            r = subprocess.run(
                ["chown", "-R", "-h", f"{uid}:{uid}", str(dest)], capture_output=True, timeout=600
            )
            if r.returncode != 0:
                raise RepoError(f"chown of the workspace failed: {r.stderr.decode()[:300]}")
            return
        base = str(dest) + "/"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for rel, kind, mode, payload, mtime_ns in snap:
            dst = base + rel
            if kind == "d":
                os.mkdir(dst, 0o755)
                os.chown(dst, uid, uid)
            elif kind == "l":
                os.symlink(payload, dst)  # type: ignore[arg-type]
                os.chown(dst, uid, uid, follow_symlinks=False)
            else:
                fd = os.open(dst, flags, mode)
                try:
                    if payload:
                        os.write(fd, payload)  # type: ignore[arg-type]
                    os.fchown(fd, uid, uid)
                    os.utime(fd, ns=(mtime_ns, mtime_ns))
                finally:
                    os.close(fd)

    def _snapshot(self, tree: Path) -> list[tuple[str, str, int, bytes | str, int]] | None:
        """(rel, kind d|f|l, mode, content or link target, mtime_ns) for every entry of a
        small tree (parents first), cached per cache entry; None for a large tree."""
        st = os.stat(tree)
        key = (str(tree), st.st_ino, st.st_ctime_ns)
        with self._lock:
            hit = self._snaps.get(key, False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        out: list[tuple[str, str, int, bytes | str, int]] | None = []
        size = 0
        for dirpath, dirnames, filenames in os.walk(tree):
            rel_dir = os.path.relpath(dirpath, tree)
            for name in [*dirnames, *filenames]:
                src = os.path.join(dirpath, name)
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                lst = os.lstat(src)
                if stat.S_ISLNK(lst.st_mode):
                    out.append((rel, "l", 0, os.readlink(src), 0))
                elif stat.S_ISDIR(lst.st_mode):
                    out.append((rel, "d", 0o755, b"", 0))
                elif stat.S_ISREG(lst.st_mode):
                    size += lst.st_size
                    with open(src, "rb") as f:
                        data = f.read() if size <= SNAPSHOT_MAX_BYTES else b""
                    out.append((rel, "f", stat.S_IMODE(lst.st_mode), data, lst.st_mtime_ns))
                if len(out) > SNAPSHOT_MAX_ENTRIES or size > SNAPSHOT_MAX_BYTES:
                    out = None
                    break
            if out is None:
                break
        with self._lock:
            while len(self._snaps) >= SNAPSHOT_CACHE:
                self._snaps.pop(next(iter(self._snaps)))
            self._snaps[key] = out
        return out

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}
