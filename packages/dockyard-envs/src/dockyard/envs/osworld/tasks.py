"""OSWorld tasks from a local folder, checked at load: what cannot run here is refused, with why.

OSWorld's layout (``evaluation_examples/``): ``examples/<domain>/<id>.json``, optionally indexed
by ``test_all.json`` (``{domain: [id, ...]}``). A task::

    {"id": "...", "instruction": "...", "snapshot": "...", "related_apps": [...],
     "config": [{"type": "launch", "parameters": {"command": ["xterm"]}}, ...],
     "evaluator": {"func": "exact_match" | [...], "conj": "and" | "or",
                   "result": {"type": "vm_file", "path": "..."} | [...],
                   "expected": {"type": "rule", "rules": {...}} | [...],
                   "options": {...} | [...]}}

Config steps run here: ``launch`` / ``open`` (a program on the session's desktop), ``execute``
/ ``command`` (a command in the session, without the display), ``sleep``, ``activate_window``,
and ``download`` of a file shipped *under the task root* (``files/...``, relative to the folder
that holds ``examples/``: nothing is fetched from the network). Getters and metrics are those of evaluators.py. A task using anything else
is refused at load (:class:`Refused`: the task, the step and the reason), never half-run.

Paths: OSWorld's guest is a VM whose user home is ``/home/user``; here it is the session's
workspace. A task path is relative to the workspace, or absolute under ``/workspace`` or
``/home/user`` (mapped onto it); anything else is refused.

``oracle`` (a dockyard addition, ignored by OSWorld): the scripted solution, a list of steps of
pyautogui code (oracle.py resolves ``{Title.x+N}``-style window coordinates).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockyard.envs.osworld.evaluators import GETTERS, METRICS
from dockyard.envs.osworld.guestpath import workspace_path

CONFIG_TYPES = frozenset(
    {"launch", "open", "execute", "command", "sleep", "activate_window", "download"}
)


class Refused(ValueError):
    """A task this loader cannot run here: ``task_id`` and the reason."""

    def __init__(self, task_id: str, reason: str):
        super().__init__(f"{task_id}: {reason}")
        self.task_id, self.reason = task_id, reason


@dataclass
class OSWorldTask:
    """One task, validated. ``folder``: the task root, where ``download`` urls and
    ``local_file`` paths are resolved (relative, never outside it)."""

    id: str
    instruction: str
    config: list[dict[str, Any]]
    evaluator: dict[str, Any]
    folder: Path
    domain: str = ""
    related_apps: list[str] = field(default_factory=list)
    oracle: list[str] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The dataset row the environment receives (JSON-like)."""
        return {
            "id": self.id, "instruction": self.instruction, "config": self.config,
            "evaluator": self.evaluator, "folder": str(self.folder), "domain": self.domain,
            "related_apps": self.related_apps, "oracle": self.oracle,
        }  # fmt: skip


def _check_config(step: Any, folder: Path) -> None:
    if not isinstance(step, dict) or step.get("type") not in CONFIG_TYPES:
        t = step.get("type") if isinstance(step, dict) else step
        raise ValueError(
            f"config step {t!r} is not supported here (supported: {sorted(CONFIG_TYPES)}; "
            "browsers, cloud drives, logins and VM snapshots need a full OSWorld VM)"
        )
    p = step.get("parameters") or {}
    t = step["type"]
    if t in ("launch", "execute", "command") and not isinstance(p.get("command"), str | list):
        raise ValueError(f"config {t}: parameters.command must be a string or a list")
    if t == "open":
        workspace_path(p.get("path"))
    if t == "download":
        for f in p.get("files") or []:
            url = str(f.get("url", ""))
            if "://" in url and not url.startswith("file://"):
                raise ValueError(f"download of {url!r}: nothing is fetched from the network here")
            src = (folder / url.removeprefix("file://")).resolve()
            if not src.is_file() or folder.resolve() not in src.parents:
                raise ValueError(f"download: {url!r} is not a file in the task's folder")
            workspace_path(f.get("path"))


def _getters(spec: Any) -> list[dict[str, Any]]:
    specs = spec if isinstance(spec, list) else [spec]
    for s in specs:
        if not isinstance(s, dict) or s.get("type") not in GETTERS:
            t = s.get("type") if isinstance(s, dict) else s
            raise ValueError(
                f"getter {t!r} is not implemented here (implemented: {sorted(GETTERS)})"
            )
        if s["type"] == "vm_file":
            workspace_path(s.get("path"))
    return specs


def check_evaluator(ev: Any) -> None:
    """ValueError naming the first unsupported part of an OSWorld ``evaluator``."""
    if not isinstance(ev, dict) or "func" not in ev:
        raise ValueError("evaluator must be an object with 'func'")
    funcs = ev["func"] if isinstance(ev["func"], list) else [ev["func"]]
    for f in funcs:
        if f not in METRICS:
            raise ValueError(
                f"metric {f!r} is not implemented here (implemented: {sorted(METRICS)})"
            )
    if ev.get("conj", "and") not in ("and", "or"):
        raise ValueError("evaluator.conj must be 'and' or 'or'")
    if funcs == ["infeasible"]:
        return
    results = _getters(ev.get("result"))
    if len(results) != len(funcs):
        raise ValueError(f"{len(funcs)} metric(s) but {len(results)} result getter(s)")
    if "expected" in ev:
        _getters(ev["expected"])
    for step in ev.get("postconfig") or []:
        raise ValueError(f"evaluator.postconfig ({step.get('type')!r}) is not supported here")


def parse_task(raw: dict[str, Any], folder: Path, domain: str = "") -> OSWorldTask:
    """A task dict -> :class:`OSWorldTask`, or :class:`Refused` with the reason."""
    tid = str(raw.get("id") or "?")
    try:
        if not isinstance(raw.get("instruction"), str) or not raw["instruction"].strip():
            raise ValueError("no instruction")
        config = raw.get("config") or []
        if not isinstance(config, list):
            raise ValueError("config must be a list of steps")
        for step in config:
            _check_config(step, folder)
        check_evaluator(raw.get("evaluator"))
    except ValueError as e:
        raise Refused(tid, str(e)) from None
    return OSWorldTask(
        id=tid, instruction=raw["instruction"], config=config, evaluator=raw["evaluator"],
        folder=folder, domain=domain, related_apps=list(raw.get("related_apps") or []),
        oracle=raw.get("oracle"),
    )  # fmt: skip


def load_tasks(root: str | Path) -> tuple[list[OSWorldTask], list[Refused]]:
    """Every task under ``root`` (OSWorld's ``evaluation_examples`` folder, or its
    ``examples`` folder): those that run here, and those refused (each with its reason)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"no OSWorld task folder at {root}")
    if root.name == "examples" and not (root / "examples").is_dir():
        root = root.parent
    examples = root / "examples"
    index = root / "test_all.json"
    if index.is_file():
        wanted = json.loads(index.read_text())
        files = [examples / d / f"{i}.json" for d, ids in wanted.items() for i in ids]
    else:
        files = sorted(examples.glob("*/*.json"))
    tasks, refused = [], []
    for f in files:
        try:
            raw = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            refused.append(Refused(f.stem, f"unreadable task file {f}: {e}"))
            continue
        try:
            tasks.append(parse_task(raw, root, f.parent.name))
        except Refused as e:
            refused.append(e)
    return tasks, refused
