"""SWE task data: the shipped manifests and SWE-bench-format JSONL.

* :func:`load_shipped_tasks` — the prebuilt set in ``dockyard/envs/swe/tasks/*.jsonl``
  (manifests: regenerated from PyPI sdists, see :mod:`dockyard.envs.swe.instance`).
* :func:`load_swebench_jsonl` — SWE-bench or SWE-bench Pro records in JSONL or Parquet, read
  by :mod:`dockyard.envs.swe.records` (every field checked; ``FAIL_TO_PASS`` / ``PASS_TO_PASS``
  as lists or JSON-encoded strings, as on the Hub), plus where
  the sandbox finds the repository: ``repo_path`` (a directory on the sandbox server),
  ``repo_git`` (URL or server path, checked out at ``base_commit``) or ``repo_tarball``
  (base64 ``.tar.gz``).
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from pathlib import Path
from typing import Any

from dockyard.envs.swe.commands import StepRefused
from dockyard.envs.swe.instance import validate_manifest
from dockyard.envs.swe.pro import check_pro
from dockyard.envs.swe.records import SweInstance, from_record, jsonl_rows, load_instances

log = logging.getLogger(__name__)


def shipped_task_files() -> list[Path]:
    root = resources.files("dockyard.envs.swe") / "tasks"
    return sorted(Path(str(p)) for p in root.iterdir() if str(p).endswith(".jsonl"))


def load_shipped_tasks() -> list[dict[str, Any]]:
    """Every shipped task manifest (255 from 11 libraries: ``swe/tasks/pypi_mutations.jsonl``)."""
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


def load_swebench_jsonl(path: str | Path, skip_refused: bool = False) -> list[dict[str, Any]]:
    """Read SWE-bench / SWE-bench Pro records (``.jsonl``, ``.json`` or ``.parquet``; see
    :mod:`dockyard.envs.swe.records`) or dockyard manifests, as task dicts.

    A SWE-bench Pro instance whose Dockerfiles, ``before_repo_set_cmd`` or selected test files
    cannot run here (:func:`dockyard.envs.swe.pro.check_pro`) is refused now, naming the line:
    an error, or with ``skip_refused`` left out with a warning.

    Raises:
        ValueError: naming the file, line and the missing or ill-typed field, a record that
        does not say where the sandbox finds its repository, or a refused Pro instance.
    """
    path = Path(path)
    out: list[dict[str, Any]] = []
    found: list[tuple[str, SweInstance]] = []
    if path.suffix == ".jsonl":  # dockyard manifests may be listed too
        for where, rec in jsonl_rows(path):
            if isinstance(rec, dict) and "source" in rec:
                validate_manifest(rec, where)
                out.append(rec)
            else:
                found.append((where, from_record(rec, where)))
    else:
        found = [(str(path), inst) for inst in load_instances(path)]
    for where, inst in found:
        if inst.flavor == "swebench_pro":
            try:
                check_pro(inst)
            except StepRefused as e:
                if not skip_refused:
                    raise ValueError(f"{where}: refused: {e}") from e
                log.warning("%s: refused: %s", where, e)
                continue
        if not any(k in inst.extra for k in ("repo_path", "repo_git", "repo_tarball")):
            raise ValueError(
                f"{where}: {inst.instance_id}: say where the sandbox finds {inst.repo!r}: add "
                "'repo_path' (a directory on the sandbox server), 'repo_git' (URL/path, checked "
                "out at base_commit) or 'repo_tarball' (base64 tar.gz)"
            )
        out.append(inst.to_task())
    return out
