"""SWE-bench and SWE-bench Pro instances, read from local JSONL or Parquet into one type.

Two public layouts, one :class:`SweInstance`:

* **SWE-bench** (``princeton-nlp/SWE-bench``, ``_Lite``, ``_Verified``; :data:`SWEBENCH_FIELDS`):
  ``instance_id, repo, base_commit, patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS, version,
  environment_setup_commit, problem_statement, hints_text, created_at``. On the Hub
  ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` are JSON-encoded strings; lists are accepted too.
* **SWE-bench Pro** (``ScaleAI/SWE-bench_Pro``; :data:`PRO_FIELDS`): ``instance_id, repo,
  base_commit, patch, test_patch, problem_statement, fail_to_pass, pass_to_pass`` (lower case,
  also string-encoded lists, sometimes in Python's ``['a', 'b']`` form) plus ``requirements,
  interface, repo_language, issue_specificity, issue_categories, before_repo_set_cmd,
  selected_test_files_to_run, base_dockerfile, instance_dockerfile``, kept in ``pro``. Pro has
  no ``version``: its environment is per instance (its Dockerfiles), so ``version`` is ''.

A record is Pro when it has ``fail_to_pass`` and no ``FAIL_TO_PASS``. Any other keys (where the
sandbox finds the repository: ``repo_path`` / ``repo_git`` / ``repo_tarball``; a dockyard manifest's
``source``) are kept in ``extra``. Every error names the file, the line (JSONL) or row (Parquet),
the field and what was expected.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SWEBENCH_FIELDS = (
    "instance_id", "repo", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS",
    "version", "environment_setup_commit", "problem_statement", "hints_text", "created_at",
)  # fmt: skip
"""The fields of a SWE-bench instance (all required, ``hints_text`` / ``created_at`` may be '')."""

SWEBENCH_OPTIONAL = ("hints_text", "created_at", "environment_setup_commit")
"""SWE-bench fields that default to '' when absent (derived sets often drop them)."""

PRO_FIELDS = (
    "instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
    "fail_to_pass", "pass_to_pass",
)  # fmt: skip
"""The required fields of a SWE-bench Pro instance."""

PRO_OPTIONAL = (
    "requirements", "interface", "repo_language", "issue_specificity", "issue_categories",
    "before_repo_set_cmd", "selected_test_files_to_run", "base_dockerfile", "instance_dockerfile",
    "dockerhub_tag",
)  # fmt: skip
"""SWE-bench Pro's other public fields, kept in :attr:`SweInstance.pro` when present."""

_LIST_FIELDS = ("issue_categories", "selected_test_files_to_run")


class InstanceError(ValueError):
    """A record that is not a valid SWE-bench / SWE-bench Pro instance."""


@dataclass
class SweInstance:
    """One task instance, whatever layout it came in.

    ``fail_to_pass`` / ``pass_to_pass`` are test ids in the form the instance's test command
    reports them (pytest node ids for Python repositories).
    """

    instance_id: str
    repo: str
    base_commit: str
    patch: str
    test_patch: str
    problem_statement: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    version: str = ""
    environment_setup_commit: str = ""
    hints_text: str = ""
    created_at: str = ""
    flavor: str = "swebench"  # "swebench" | "swebench_pro"
    pro: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_task(self) -> dict[str, Any]:
        """The task dict the environments take: SWE-bench's field names (``FAIL_TO_PASS`` ...),
        Pro's own fields and the extras at top level."""
        d = asdict(self)
        task: dict[str, Any] = {**d.pop("extra"), **d.pop("pro")}
        task.update(d)
        task["FAIL_TO_PASS"] = task.pop("fail_to_pass")
        task["PASS_TO_PASS"] = task.pop("pass_to_pass")
        return task


def _str(rec: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    if key not in rec or rec[key] is None:
        if default is not None:
            return default
        raise InstanceError(f"{where}: missing field {key!r}")
    v = rec[key]
    if not isinstance(v, str):
        raise InstanceError(f"{where}: field {key!r} must be a string, got {type(v).__name__}")
    return v


def _version(rec: dict[str, Any], where: str) -> str:
    v = rec.get("version")
    if v is None:
        return ""
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise InstanceError(f"{where}: field 'version' must be a string like '4.0'")
    return str(v)


def _test_list(rec: dict[str, Any], key: str, where: str) -> list[str]:
    """A list of test ids, from a list or a JSON (or Python-literal) string of one."""
    if key not in rec:
        raise InstanceError(f"{where}: missing field {key!r}")
    v = rec[key]
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip() else []
        except json.JSONDecodeError:
            try:
                v = ast.literal_eval(v)
            except (ValueError, SyntaxError) as e:
                raise InstanceError(
                    f"{where}: field {key!r} is a string that is neither a JSON nor a Python "
                    f"list of test ids: {v[:80]!r}"
                ) from e
    tolist = getattr(v, "tolist", None)  # a numpy array (Parquet through pandas)
    if callable(tolist):
        v = tolist()
    if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
        raise InstanceError(f"{where}: field {key!r} must be a list of test-id strings")
    return v


def from_record(rec: dict[str, Any], where: str = "record") -> SweInstance:
    """One record (SWE-bench or SWE-bench Pro layout, see the module docstring).

    Raises:
        InstanceError: naming ``where``, the field and what was expected.
    """
    if not isinstance(rec, dict):
        raise InstanceError(f"{where}: an instance must be an object, got {type(rec).__name__}")
    pro = "fail_to_pass" in rec and "FAIL_TO_PASS" not in rec
    if rec.get("flavor") == "swebench_pro" and "FAIL_TO_PASS" in rec:  # a Pro task dict (to_task)
        rec = {**rec, "fail_to_pass": rec["FAIL_TO_PASS"], "pass_to_pass": rec.get("PASS_TO_PASS", [])}  # fmt: skip
        pro = True
    names = PRO_FIELDS if pro else SWEBENCH_FIELDS
    optional = () if pro else SWEBENCH_OPTIONAL
    missing = [k for k in names if k not in rec and k not in optional]
    if missing:
        layout = "SWE-bench Pro" if pro else "SWE-bench"
        raise InstanceError(f"{where}: missing {layout} field(s) {missing}")
    f2p, p2p = ("fail_to_pass", "pass_to_pass") if pro else ("FAIL_TO_PASS", "PASS_TO_PASS")
    inst = SweInstance(
        instance_id=_str(rec, "instance_id", where),
        repo=_str(rec, "repo", where),
        base_commit=_str(rec, "base_commit", where),
        patch=_str(rec, "patch", where),
        test_patch=_str(rec, "test_patch", where),
        problem_statement=_str(rec, "problem_statement", where),
        fail_to_pass=_test_list(rec, f2p, where),
        pass_to_pass=_test_list(rec, p2p, where),
        version="" if pro else _version(rec, where),
        environment_setup_commit=_str(rec, "environment_setup_commit", where, ""),
        hints_text=_str(rec, "hints_text", where, ""),
        created_at=str(rec.get("created_at") or ""),
        flavor="swebench_pro" if pro else "swebench",
    )
    if not inst.fail_to_pass:
        raise InstanceError(f"{where}: {f2p!r} is empty: an instance needs a failing test")
    if pro:
        for key in PRO_OPTIONAL:
            if key in rec and rec[key] is not None:
                inst.pro[key] = _test_list(rec, key, where) if key in _LIST_FIELDS else rec[key]
    known = {*names, *SWEBENCH_FIELDS, *PRO_OPTIONAL, "flavor", "pro", "extra"}
    inst.extra = {k: v for k, v in rec.items() if k not in known}
    return inst


def jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """``(file:line, parsed JSON)`` of each non-blank line (InstanceError for a line that is
    not JSON)."""
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as e:
                raise InstanceError(f"{where}: not JSON ({e})") from e


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        # lazy: pyarrow is not a dependency of dockyard-envs; only Parquet files need it
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ImportError(
            f"reading {path} needs pyarrow: pip install pyarrow (or 'dockyard-train[parquet]')"
        ) from e
    for i, row in enumerate(pq.read_table(path).to_pylist()):
        yield f"{path}[row {i}]", row


def load_instances(path: str | Path) -> list[SweInstance]:
    """Every instance of a ``.jsonl`` / ``.json`` (a list) / ``.parquet`` file.

    Raises:
        FileNotFoundError: no such file. InstanceError: a bad record or a duplicate
        ``instance_id`` (the message names where).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such SWE-bench instances file (.jsonl or .parquet)")
    if path.suffix == ".parquet":
        rows: Iterator[tuple[str, Any]] = _parquet_rows(path)
    elif path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise InstanceError(f"{path}: a .json instances file must hold a list of objects")
        rows = ((f"{path}[{i}]", r) for i, r in enumerate(data))
    else:
        rows = jsonl_rows(path)
    out: list[SweInstance] = []
    seen: dict[str, str] = {}
    for where, rec in rows:
        inst = from_record(rec, where)
        if inst.instance_id in seen:
            raise InstanceError(
                f"{where}: instance_id {inst.instance_id!r} again (first at {seen[inst.instance_id]})"
            )
        seen[inst.instance_id] = where
        out.append(inst)
    return out
