"""The shipped GDPval-style tasks: ``tasks/tasks.jsonl`` and a reference program per task.

A task::

    {"id": "payroll_xlsx", "occupation": "Payroll clerk", "sector": "Finance",
     "instruction": "...",                     # what is asked, with the data it needs
     "deliverables": ["payroll.xlsx"],         # files expected in the working directory
     "rubric": [{"id": "c1", "type": "columns", "file": "payroll.xlsx", ...},
                {"id": "j1", "type": "judge", "criterion": "...", "files": ["payroll.xlsx"]}],
     "reference": "reference/payroll_xlsx.py"} # a program that writes a correct deliverable

Criteria types: :mod:`dockyard.envs.gdpval.checks` (deterministic) and ``judge``. The reference
programs are how the rubrics are tested: each, run in the sandbox, scores ≥ 0.9 on its rubric.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from dockyard.envs.gdpval.checks import DETERMINISTIC
from dockyard.envs.gdpval.parse import kind_of


def tasks_dir() -> Path:
    return Path(str(resources.files("dockyard.envs.gdpval") / "tasks"))


def validate_task(t: dict[str, Any], where: str) -> None:
    """ValueError naming ``where`` and the field for a task that cannot be graded."""
    for key in ("id", "instruction", "deliverables", "rubric"):
        if key not in t:
            raise ValueError(f"{where}: no field {key!r}")
    if not t["deliverables"] or not t["rubric"]:
        raise ValueError(f"{where}: a task needs deliverables and a rubric")
    for d in t["deliverables"]:
        kind_of(d)
        if d.startswith("/") or ".." in d.split("/"):
            raise ValueError(f"{where}: deliverable {d!r} must be a relative path in the workspace")
    for c in t["rubric"]:
        if c.get("type") not in (*DETERMINISTIC, "judge"):
            raise ValueError(f"{where}: criterion {c.get('id')!r} has type {c.get('type')!r}")
        named = [c["file"]] if "file" in c else list(c.get("files", []))
        if c["type"] != "judge" and "file" not in c:
            raise ValueError(f"{where}: criterion {c['id']!r} names no file")
        if any(n not in t["deliverables"] for n in named):
            raise ValueError(f"{where}: criterion {c['id']!r} reads a file not in deliverables")
        if c["type"] == "judge" and not c.get("criterion"):
            raise ValueError(f"{where}: judge criterion {c['id']!r} has no 'criterion' text")


def load_tasks(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The tasks of ``path`` (a JSONL of tasks; None: the shipped set), validated."""
    p = Path(path) if path else tasks_dir() / "tasks.jsonl"
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            t = json.loads(line)
            validate_task(t, f"{p}:{n}")
            out.append(t)
    return out


def reference_program(task: dict[str, Any]) -> str:
    """The source of ``task``'s reference program (shipped tasks)."""
    return (tasks_dir() / task["reference"]).read_text(encoding="utf-8")


def gdpval_dataset(split: str, path: str | None = None, val_fraction: float = 0.25) -> list[dict]:
    """``data.dataset_name: gdpval``: the tasks, split by a hash of ``id``."""

    def in_val(tid: str) -> bool:
        return (
            int.from_bytes(hashlib.sha256(tid.encode()).digest()[:4], "big") / 2**32 < val_fraction
        )

    return [t for t in load_tasks(path) if in_val(t["id"]) == (split == "val")]
