"""Repository materialisation: once per (source, commit) into a cache, then cheap private copies.

A cache entry is a tree owned by root with one fresh git commit (``base``) and no other
history (threat 13: ``git log --all`` finds nothing the task should not see). Sources:

* ``path``    a directory on the server (its ``.git`` is dropped);
* ``tarball`` base64 ``.tar.gz``; members with absolute paths, ``..``, links leaving the tree,
  devices or fifos are rejected (threat 16: zip-slip);
* ``git``     URL or server path, cloned and exported at ``commit`` with ``git archive``.

The service runs as root and its clients are not trusted (threats 18, 19): a :class:`SourcePolicy`
says which host sources a client may name — server paths only under the operator's
``--repo-root`` directories, and of those only what any user of the host could read; git URLs
only of the schemes the operator allows (``--allow-git-scheme``; none by default). Client
strings reach git only as operands after ``--`` / ``--end-of-options``, and git itself is held
to the allowed transports (``GIT_ALLOW_PROTOCOL``).

Entries are evicted least-recently-used once the cache exceeds ``max_bytes``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from dockyard.sandbox.models import RepoSpec
from dockyard.sandbox.paths import UnsafePath, check_rel
from dockyard.sandbox.trees import TreeTooLarge, copy_tree

# Trees up to this many entries / bytes are copied from an in-memory snapshot (see copy_to).
SNAPSHOT_MAX_ENTRIES = 2000
SNAPSHOT_MAX_BYTES = 16 << 20
SNAPSHOT_MAX_PATH = 3072  # a snapshot is written by name: longer paths are copied by fds
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


class SourceRefused(RepoError):
    """The request names a host source the operator does not allow: HTTP 422."""


# Transports git must never use for a client's URL, whatever the operator allows.
_NEVER = {"ext", "fd"}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def git_transport(url: str) -> tuple[str, str | None]:
    """(scheme, server path or None) of a ``repo.git`` value, as git reads it: an absolute
    path or ``file://`` URL is a server path, ``scheme://…`` that scheme, ``host:path`` ssh."""
    if url.startswith("/"):
        return "file", url
    if m := _SCHEME.match(url):
        scheme = m.group(1).lower()
        return (scheme, unquote(urlsplit(url).path)) if scheme == "file" else (scheme, None)
    if "::" in url:  # <transport>::<address>: a remote helper (ext:: runs any command)
        return url.split("::", 1)[0].lower(), None
    if ":" in url.split("/", 1)[0]:
        return "ssh", None  # scp-like [user@]host:path
    raise SourceRefused(f"repo.git {url[:200]!r}: give a URL or an absolute path on the server")


@dataclass(frozen=True)
class SourcePolicy:
    """Which host sources a client may name. ``roots``: directories (the operator's
    ``--repo-root``) under which ``repo.path`` and server-path ``repo.git`` may lie;
    ``schemes``: URL schemes ``repo.git`` may use (``--allow-git-scheme``). Both empty by
    default: only ``repo.tarball`` (and an empty repository) then works."""

    roots: tuple[str, ...] = ()
    schemes: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        object.__setattr__(self, "roots", tuple(os.path.realpath(r) for r in self.roots))
        object.__setattr__(self, "schemes", frozenset(s.lower() for s in self.schemes))
        if bad := self.schemes & (_NEVER | {"file"}):
            raise ValueError(
                f"--allow-git-scheme {sorted(bad)}: remote helpers run commands and file:// "
                "reads the host: allow server paths with --repo-root instead"
            )

    def check(self, spec: RepoSpec) -> None:
        """Raise :class:`SourceRefused` (naming the field and how to allow it) unless ``spec``
        names only what this policy allows."""
        if spec.path:
            self.server_path(spec.path, "repo.path")
        elif spec.git:
            scheme, local = git_transport(spec.git)
            if local is not None:
                self.server_path(local, "repo.git")
            elif scheme in _NEVER or scheme not in self.schemes:
                allowed = ", ".join(sorted(self.schemes)) or "none"
                raise SourceRefused(
                    f"repo.git: the {scheme!r} transport is not allowed by this service (allowed: "
                    f"{allowed}); the operator allows one with --allow-git-scheme {scheme}, or send "
                    "the repository as repo.tarball"
                )

    def server_path(self, path: str, what: str) -> str:
        """The real path of ``path`` if it lies under an allowed root and every directory from
        the root down to it can be traversed (and it read) by any user: the service copies as
        root, so a private directory would otherwise become readable in a task."""
        if not self.roots:
            raise SourceRefused(
                f"{what} {path[:200]!r}: this service takes no server paths; the operator allows "
                "the repositories under a directory with --repo-root DIR (or send repo.tarball)"
            )
        real = os.path.realpath(path)
        root = next(
            (r for r in self.roots if real == r or real.startswith(r.rstrip("/") + "/")), None
        )
        if root is None:
            raise SourceRefused(
                f"{what} {path[:200]!r} is not under a directory this service allows "
                f"(--repo-root: {', '.join(self.roots)})"
            )
        if not os.path.isdir(real):
            raise SourceRefused(f"{what} {path[:200]!r} is not a directory on the server")
        below = real[len(root) :].strip("/")
        cur = root
        for part in below.split("/") if below else []:
            cur = os.path.join(cur, part)
            mode = os.stat(cur).st_mode
            need = stat.S_IXOTH | (stat.S_IROTH if cur == real else 0)
            if mode & need != need:
                raise SourceRefused(
                    f"{what} {path[:200]!r}: {cur} (mode {stat.S_IMODE(mode):04o}) is not open "
                    "to every user, and the sandbox copies only what any user could read"
                )
        return real


def copy_readable(src: str, dest: Path) -> None:
    """Copy the tree at ``src`` into ``dest`` without following links, keeping only what any
    user could read: directories others cannot list and enter, and files others cannot read,
    are left out (with everything under them), as are ``.git`` folders, devices, fifos and
    sockets. Symlinks are copied as links (a task resolves them inside its own jail)."""
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = os.path.relpath(dirpath, src)
        out = dest if rel == "." else dest / rel
        keep = []
        for name in dirnames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(p), out / name)
            elif name != ".git" and st.st_mode & 0o005 == 0o005:
                os.mkdir(out / name, 0o755)
                keep.append(name)
        dirnames[:] = keep
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(p), out / name)
            elif stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IROTH:
                shutil.copyfile(p, out / name, follow_symlinks=False)
                os.chmod(out / name, stat.S_IMODE(st.st_mode))


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


def _git(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    r = subprocess.run(
        ["git", *args], cwd=cwd, env=env or _GIT_ENV, capture_output=True, text=True, timeout=600
    )
    if r.returncode != 0:
        raise RepoError(f"git {' '.join(args[:2])} failed: {r.stderr.strip()[:500]}")
    return r.stdout


class RepoCache:
    """Cache of materialised base trees keyed by source and commit."""

    def __init__(
        self, root: Path, max_bytes: int = 20 << 30, policy: SourcePolicy | None = None
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.policy = policy or SourcePolicy()
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
            h.update(f"git\0{spec.git}\0{spec.commit}".encode())
        elif spec.path:
            h.update(f"path\0{os.path.realpath(spec.path)}".encode())
        else:
            h.update(b"empty")
        return h.hexdigest()[:32]

    def get(self, spec: RepoSpec) -> Path:
        """The cached base tree for ``spec`` (materialised on first use). Root-owned: copy it.
        Raises :class:`SourceRefused` for a source the policy does not allow (checked on every
        call: a cached entry is no way around it)."""
        self.policy.check(spec)
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
            self._export_git(spec.git, spec.commit or "HEAD", dest)
        elif spec.path:
            copy_readable(self.policy.server_path(spec.path, "repo.path"), dest)
        for dirpath, dirnames, filenames in os.walk(dest):
            for n in dirnames:
                if not os.path.islink(os.path.join(dirpath, n)):
                    os.chmod(os.path.join(dirpath, n), 0o755)
            for n in filenames:
                p = os.path.join(dirpath, n)
                if not os.path.islink(p):
                    mode = os.lstat(p).st_mode
                    os.chmod(p, 0o755 if mode & 0o111 else 0o644)

    def _export_git(self, url: str, commit: str, dest: Path) -> None:
        """Clone ``url`` (never run git inside a server-side repository: its config could run
        commands as root), resolve ``commit`` there and unpack its tree into ``dest``."""
        scheme, local = git_transport(url)
        src = self.policy.server_path(local, "repo.git") if local is not None else url
        env = {
            **_GIT_ENV,
            "GIT_ALLOW_PROTOCOL": scheme,  # git itself refuses any other transport (redirects too)
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_GLOBAL": "/dev/null",
        }
        clone = dest.parent / "clone"
        try:
            _git(
                ["clone", "-q", "--no-checkout", "--no-hardlinks", "--", src, str(clone)],
                dest.parent,
                env,
            )
            try:
                sha = _git(
                    [
                        "rev-parse",
                        "--verify",
                        "--quiet",
                        "--end-of-options",
                        f"{commit}^{{commit}}",
                    ],
                    clone,
                    env,
                ).strip()
            except RepoError as e:
                raise RepoError(f"repo.git: no commit {commit!r} in {url[:200]!r}") from e
            archive = subprocess.run(
                ["git", "archive", "--format=tar", sha],
                cwd=clone,
                env=env,
                capture_output=True,
                timeout=600,
            )
            if archive.returncode != 0:
                raise RepoError(
                    f"repo.git: cannot export {commit!r}: {archive.stderr.decode()[:300]}"
                )
            safe_extract(archive.stdout, dest)
        finally:
            shutil.rmtree(clone, ignore_errors=True)

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
        task); large ones, and trees with paths too long to write by name, are copied by fds
        (:func:`~dockyard.sandbox.trees.copy_tree`, ``copy_file_range``: a reflink where the file
        system has one). Hard links are not used: they would let a task edit the cache."""
        snap = self._snapshot(tree)
        if snap is None:  # by fds (trees.py): any depth or path length, links as links
            try:
                copy_tree(tree, dest, uid=uid, gid=uid)
            except (TreeTooLarge, UnsafePath) as e:
                raise RepoError(f"copying the repository failed: {e}") from e
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
                if len(src) > SNAPSHOT_MAX_PATH:  # written by name later: copy by fds instead
                    out = None
                    break
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
