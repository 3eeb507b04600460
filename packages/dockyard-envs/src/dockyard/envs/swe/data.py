"""SWE task data: the shipped manifests and SWE-bench-format JSONL.

* :func:`load_shipped_tasks` — the prebuilt set in ``dockyard/envs/swe/tasks/*.jsonl``
  (manifests: regenerated from PyPI sdists, see :mod:`dockyard.envs.swe.instance`).
* :func:`load_swebench_jsonl` — records with the official SWE-bench fields (``instance_id``,
  ``repo``, ``base_commit``, ``problem_statement``, ``patch``, ``test_patch``, ``FAIL_TO_PASS``,
  ``PASS_TO_PASS`` — the last two as lists or JSON-encoded strings, as on the Hub), plus where
  the sandbox finds the repository: ``repo_path`` (a directory on the sandbox server),
  ``repo_git`` (URL or server path, checked out at ``base_commit``) or ``repo_tarball``
  (base64 ``.tar.gz``).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from dockyard.envs.swe.instance import SWE_FIELDS, validate_manifest


def shipped_task_files() -> list[Path]:
    root = resources.files("dockyard.envs.swe") / "tasks"
    return sorted(Path(str(p)) for p in root.iterdir() if str(p).endswith(".jsonl"))


def load_shipped_tasks() -> list[dict[str, Any]]:
    """Every shipped task manifest (at least 30, from at least 2 libraries)."""
    out = []
    for f in shipped_task_files():
        for lineno, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                rec = json.loads(line)
                validate_manifest(rec, f"{f.name}:{lineno}")
                out.append(rec)
    return out


def swe_dataset(split: str) -> list[dict[str, Any]]:
    """The ``swe`` dataset: the shipped tasks (the same for every split)."""
    return load_shipped_tasks()


def load_swebench_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read SWE-bench-format records (see the module docstring).

    Raises:
        ValueError: naming the file, line and the missing field.
    """
    path = Path(path)
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            where = f"{path}:{lineno}"
            if "source" in rec:  # a dockyard manifest
                validate_manifest(rec, where)
                out.append(rec)
                continue
            for key in SWE_FIELDS:
                if key not in rec:
                    raise ValueError(f"{where}: missing SWE-bench field {key!r}")
            for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
                if isinstance(rec[key], str):
                    rec[key] = json.loads(rec[key])
            if not any(k in rec for k in ("repo_path", "repo_git", "repo_tarball")):
                raise ValueError(
                    f"{where}: say where the sandbox finds {rec['repo']!r}: add 'repo_path' (a directory "
                    "on the sandbox server), 'repo_git' (URL/path, checked out at base_commit) or "
                    "'repo_tarball' (base64 tar.gz)"
                )
            out.append(rec)
    return out
