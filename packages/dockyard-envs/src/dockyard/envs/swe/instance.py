"""SWE-bench-shaped task instances: manifests in, repository state and gold patch out.

A *manifest* (what this repository ships) holds no third-party source. It names a PyPI sdist
(``source``: package, version, sha256), the file to mutate (with its sha256) and the mutation
``(kind, line, col, variant)``, plus the SWE-bench fields ``instance_id``, ``repo``,
``base_commit``, ``problem_statement``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``version``,
``created_at`` and ``hints_text``. :func:`materialize` regenerates the buggy repository from
the (cached) sdist, the ``patch`` (gold: the reverse of the mutation) and the held-out
``test_files``.

A plain SWE-bench record (with ``patch`` / ``test_patch`` and a ``repo_tarball`` or server
``repo_path``) is accepted by the environment as well: see :mod:`dockyard.envs.swe.data`.
"""

from __future__ import annotations

import base64
import difflib
import functools
from dataclasses import dataclass, field
from typing import Any

from dockyard.envs.swe.builder.mutate import apply_mutation, sha256_text
from dockyard.envs.swe.sdist import fetch_sdist, read_sdist, tarball

SWE_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)


def unified_diff(path: str, before: str, after: str) -> str:
    """A git-style unified diff of one file (``a/path`` → ``b/path``), '' if unchanged."""
    if before == after:
        return ""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    lines = list(difflib.unified_diff(a, b, f"a/{path}", f"b/{path}", n=3))
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in lines:
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return "".join(out)


@dataclass
class Instance:
    """A materialised task: everything the sandbox needs to score a candidate patch."""

    record: dict[str, Any]
    files: dict[str, bytes]  # the buggy repository, path -> content
    patch: str  # gold patch (fixes the bug)
    test_files: dict[str, str]  # held-out tests, force-restored after the candidate patch
    source_file: str = ""  # the file the gold patch touches
    _tarball_b64: str | None = field(default=None, repr=False)

    @property
    def instance_id(self) -> str:
        return str(self.record["instance_id"])

    @property
    def fail_to_pass(self) -> list[str]:
        return list(self.record["FAIL_TO_PASS"])

    @property
    def pass_to_pass(self) -> list[str]:
        return list(self.record["PASS_TO_PASS"])

    def tarball_b64(self) -> str:
        if self._tarball_b64 is None:
            self._tarball_b64 = base64.b64encode(tarball(self.files)).decode("ascii")
        return self._tarball_b64


def test_file_of(node_id: str) -> str:
    return node_id.split("::", 1)[0]


def validate_manifest(rec: dict[str, Any], where: str = "manifest") -> None:
    """Raise ValueError naming the first missing or ill-typed field."""
    for key in (*SWE_FIELDS, "source", "file", "file_sha256", "mutation"):
        if key not in rec:
            raise ValueError(f"{where}: missing field {key!r}")
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if not isinstance(rec[key], list) or not all(isinstance(t, str) for t in rec[key]):
            raise ValueError(f"{where}: {key!r} must be a list of pytest node ids")
    if not rec["FAIL_TO_PASS"]:
        raise ValueError(
            f"{where}: 'FAIL_TO_PASS' is empty: a task needs at least one failing test"
        )
    for key in ("package", "version", "sha256"):
        if key not in rec["source"]:
            raise ValueError(f"{where}: source.{key} missing (need package, version, sha256)")


@functools.lru_cache(maxsize=8)
def _sdist_files(package: str, version: str, sha256: str) -> dict[str, bytes]:
    return read_sdist(fetch_sdist(package, version, sha256))


def materialize(rec: dict[str, Any]) -> Instance:
    """Regenerate a manifest's buggy repository, gold patch and held-out tests.

    Raises:
        ValueError / KeyError: the manifest is malformed or no longer matches its sdist.
        RuntimeError: the sdist could not be fetched (see :func:`fetch_sdist`).
    """
    validate_manifest(rec, f"task {rec.get('instance_id', '?')}")
    src = rec["source"]
    pristine = _sdist_files(src["package"], src["version"], src["sha256"])
    path = rec["file"]
    if path not in pristine:
        raise KeyError(
            f"task {rec['instance_id']}: {path!r} is not in {src['package']}=={src['version']}"
        )
    original = pristine[path].decode("utf-8")
    if sha256_text(original) != rec["file_sha256"]:
        raise ValueError(f"task {rec['instance_id']}: {path} does not match file_sha256")
    buggy = apply_mutation(original, rec["mutation"])
    files = dict(pristine)
    files[path] = buggy.encode("utf-8")
    test_paths = sorted({test_file_of(t) for t in rec["FAIL_TO_PASS"] + rec["PASS_TO_PASS"]})
    missing = [p for p in test_paths if p not in pristine]
    if missing:
        raise KeyError(f"task {rec['instance_id']}: test files {missing} are not in the sdist")
    test_files = {p: pristine[p].decode("utf-8") for p in test_paths}
    return Instance(rec, files, unified_diff(path, buggy, original), test_files, source_file=path)
