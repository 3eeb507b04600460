"""What ``dockyard view`` reads: runs found under the folders it was given, their metrics and
their rollout logs — read-only, and re-read when a file changes (a live run's new steps show).

A *run* is a folder holding ``metrics.jsonl`` or a ``rollouts/`` folder (a run's
``logger.log_dir``); a folder given on the command line is searched down to three levels for
them, so ``dockyard view results/quickstart`` finds ``results/quickstart/logs``. A *step key*
names one file of a run's log: ``step_000012`` (training step 12) or ``eval_<label>``. Nothing
a request carries becomes a path: runs and keys are looked up among the files found.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from dockyard.train.rollouts import FOLDER

# the columns of an episode list (everything but the turns and the per-token arrays)
SUMMARY_COLUMNS = [
    "step", "kind", "run_label", "group", "sample", "uid", "task_id", "env", "logged_because",
    "policy_version_min", "staleness", "reward", "rewards", "advantage", "finish_reason",
    "truncated", "infra_error", "flags", "verdict", "num_turns", "response_tokens", "env_s",
]  # fmt: skip
# the columns a text search looks in
SEARCH_COLUMNS = ["turns", "verifier_stdout", "verifier_stderr", "verifier_detail", "diff"]
LIVE_S = 120.0  # a run whose files changed this recently is shown as live


@dataclass
class Run:
    """One run folder and what it holds now."""

    id: int
    path: Path
    name: str

    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def keys(self) -> list[str]:
        """The step keys of its rollout log, training steps in order, then evals."""
        folder = self.path / FOLDER
        if not folder.is_dir():
            return []
        names = sorted(p.name.removesuffix(".parquet") for p in folder.glob("*.parquet"))
        return [n for n in names if n.startswith("step_")] + [
            n for n in names if n.startswith("eval_")
        ]

    def file(self, key: str) -> Path:
        """The Parquet file of step key ``key``; KeyError if the run has none such."""
        if key not in self.keys():
            raise KeyError(key)
        return self.path / FOLDER / f"{key}.parquet"

    def info(self) -> dict[str, Any]:
        files = [self.metrics_path(), *(self.path / FOLDER).glob("*.parquet")]
        times = [p.stat().st_mtime for p in files if p.exists()]
        last = max(times, default=0.0)
        return {
            "id": self.id,
            "name": self.name,
            "path": str(self.path),
            "keys": self.keys(),
            "updated": last,
            "live": time.time() - last < LIVE_S,
        }


def find_runs(folders: list[str | Path]) -> list[Run]:
    """The runs under ``folders`` (see the module docstring); ValueError naming a folder that
    does not exist or holds no run."""
    found: list[tuple[Path, Path]] = []  # (run, the given folder's parent: names are from there)
    for f in folders:
        root = Path(f).resolve()
        if not root.is_dir():
            raise ValueError(f"{f}: no such folder (give a run's log folder, logger.log_dir)")
        hits = [root] if _is_run(root) else []
        for depth in ("*", "*/*", "*/*/*"):
            if hits:
                break
            hits = sorted(p for p in root.glob(depth) if p.is_dir() and _is_run(p))
        if not hits:
            raise ValueError(
                f"{f}: no run found (a folder with metrics.jsonl or {FOLDER}/, e.g. the "
                "quickstart's results/quickstart/logs); start a run, or give its logger.log_dir"
            )
        found += [(h, root.parent) for h in hits if h not in [x for x, _ in found]]
    return [Run(i, p, str(p.relative_to(top))) for i, (p, top) in enumerate(found)]


def _is_run(p: Path) -> bool:
    return (p / "metrics.jsonl").is_file() or (p / FOLDER).is_dir()


def read_metrics(run: Run) -> list[dict[str, Any]]:
    """The rows of the run's ``metrics.jsonl`` (a half-written last line is skipped)."""
    out = []
    if run.metrics_path().is_file():
        for line in run.metrics_path().read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


class TableCache:
    """Parquet files read once per change of their modification time."""

    def __init__(self) -> None:
        self._cache: dict[tuple[Path, str], tuple[float, list[dict[str, Any]]]] = {}

    def rows(self, path: Path, part: str) -> list[dict[str, Any]]:
        """``part``: ``summary`` (:data:`SUMMARY_COLUMNS` + ``row``), ``search`` (the searched
        texts), ``full`` (every column)."""
        mtime = path.stat().st_mtime
        hit = self._cache.get((path, part))
        if hit is not None and hit[0] == mtime:
            return hit[1]
        cols = {"summary": SUMMARY_COLUMNS, "search": SEARCH_COLUMNS, "full": None}[part]
        names = set(pq.read_schema(path).names)
        table = pq.read_table(path, columns=[c for c in cols if c in names] if cols else None)
        rows = table.to_pylist()
        for i, r in enumerate(rows):
            r["row"] = i
            if "rewards" in r and isinstance(r["rewards"], list):
                r["rewards"] = dict(r["rewards"])
            if isinstance(r.get("files"), list):
                r["files"] = dict(r["files"])
        self._cache[(path, part)] = (mtime, rows)
        return rows


def matches(row: dict[str, Any], text: dict[str, Any] | None, f: dict[str, Any]) -> bool:
    """Whether episode ``row`` (a summary) passes the filters ``f``: ``verdict``, ``env``,
    ``flag`` (an integrity flag, or ``any``), ``infra`` (``only`` / ``none``), ``min_reward``,
    ``max_reward``, ``task_id``, ``q`` (case-insensitive text in its turns, verifier output or
    diff: ``text`` is its search row)."""
    if f.get("verdict") and row["verdict"] != f["verdict"]:
        return False
    if f.get("env") and row["env"] != f["env"]:
        return False
    if f.get("task_id") and row["task_id"] != f["task_id"]:
        return False
    flag = f.get("flag")
    if flag and not (row["flags"] if flag == "any" else flag in row["flags"]):
        return False
    if f.get("infra") == "only" and not row["infra_error"]:
        return False
    if f.get("infra") == "none" and row["infra_error"]:
        return False
    if f.get("min_reward") is not None and row["reward"] < f["min_reward"]:
        return False
    if f.get("max_reward") is not None and row["reward"] > f["max_reward"]:
        return False
    q = (f.get("q") or "").lower()
    if q and text is not None:
        blob = [t["text"] for t in text.get("turns") or []]
        blob += [text.get(k) or "" for k in SEARCH_COLUMNS[1:]]
        return any(q in b.lower() for b in blob)
    return True
