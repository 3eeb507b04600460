"""Files of an instance's repository at its environment_setup_commit, for the environment build.

SWE-bench reads a repository's requirements file / ``environment.yml`` at the instance's
``environment_setup_commit`` (from GitHub); here they come from where the task says the sandbox
finds the repository, when this process can read it too: ``repo_git`` naming a local clone
(``git show`` / ``git archive`` at the commit), ``repo_path`` naming a local directory, or
``repo_tarball`` (base64 ``.tar.gz``; the tree as given). :func:`repo_files` returns None when
none of them is readable here (a remote URL, a directory only the sandbox host has).
"""

from __future__ import annotations

import base64
import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

_GIT_TIMEOUT_S = 120.0
MAX_ARCHIVE_BYTES = 64 << 20


class RepoFiles(Protocol):
    """Read access to one tree of a repository."""

    where: str  # for messages

    def read(self, path: str) -> bytes | None:
        """The file's bytes, None when the tree has no such file."""

    def archive(self) -> bytes:
        """The whole tree as a ``.tar.gz`` (at most :data:`MAX_ARCHIVE_BYTES`)."""


@dataclass
class GitFiles:
    """A local clone at ``commit``."""

    git_dir: Path
    commit: str

    @property
    def where(self) -> str:
        return f"{self.git_dir} at {self.commit[:12]}"

    def _git(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["git", "-C", str(self.git_dir), *args], capture_output=True, timeout=_GIT_TIMEOUT_S
        )

    def read(self, path: str) -> bytes | None:
        r = self._git("show", f"{self.commit}:{path}")
        return r.stdout if r.returncode == 0 else None

    def archive(self) -> bytes:
        r = self._git("archive", "--format=tar.gz", self.commit)
        if r.returncode != 0:
            raise OSError(f"git archive {self.commit} in {self.git_dir}: {r.stderr[-500:]!r}")
        return _capped(r.stdout, self.where)


@dataclass
class TarFiles:
    """A base64 ``.tar.gz`` of the tree (a task's ``repo_tarball``)."""

    data: bytes
    where: str = "repo_tarball"

    def read(self, path: str) -> bytes | None:
        with tarfile.open(fileobj=io.BytesIO(self.data), mode="r:gz") as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.lstrip("./") == path:
                    f = tar.extractfile(m)
                    return f.read() if f is not None else None
        return None

    def archive(self) -> bytes:
        return _capped(self.data, self.where)


@dataclass
class DirFiles:
    """A local directory holding the tree (a task's ``repo_path``, when local)."""

    root: Path

    @property
    def where(self) -> str:
        return str(self.root)

    def read(self, path: str) -> bytes | None:
        p = (self.root / path).resolve()
        if not p.is_relative_to(self.root.resolve()) or not p.is_file():
            return None
        return p.read_bytes()

    def archive(self) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(self.root, arcname=".", filter=lambda t: None if "/.git" in t.name else t)
        return _capped(buf.getvalue(), self.where)


def _capped(data: bytes, where: str) -> bytes:
    if len(data) > MAX_ARCHIVE_BYTES:
        raise OSError(f"{where}: the repository's archive is {len(data)} bytes, over 64 MiB")
    return data


def repo_files(task: dict[str, Any]) -> RepoFiles | None:
    """The repository of ``task`` at its environment_setup_commit (else base_commit), where
    this process can read it (module docstring); None otherwise."""
    commit = str(task.get("environment_setup_commit") or task.get("base_commit") or "HEAD")
    git = task.get("repo_git")
    if isinstance(git, str) and Path(git).is_dir():
        return GitFiles(Path(git), commit)
    tb = task.get("repo_tarball")
    if isinstance(tb, str) and tb:
        return TarFiles(base64.b64decode(tb))
    path = task.get("repo_path")
    if isinstance(path, str) and Path(path).is_dir():
        return DirFiles(Path(path))
    return None
