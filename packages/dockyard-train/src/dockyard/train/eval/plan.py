"""What an evaluation runs: its tasks and the environment scoring them (both modes), and the
models (Hugging Face folders, Hub names, dockyard checkpoints) as folders an engine serves."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockyard.core.config import MasterConfig
from dockyard.core.config.sections import EnvConfig
from dockyard.envs.benchmarks import get_benchmark, load_benchmark
from dockyard.train.algorithms.grpo import load_tasks
from dockyard.train.export import ExportError, export_hf, resolve_checkpoint

BENCH_ENV = "benchmark"  # the env entry a benchmark's environment gets when the config has none


@dataclass
class Plan:
    """The tasks, the config that scores them (its ``env`` / ``data.env_name`` set), the task
    keys of the breakdowns, and what is evaluated (for the report)."""

    tasks: list[dict[str, Any]]
    cfg: MasterConfig
    group_by: list[str]
    name: str


def plan(cfg: MasterConfig) -> Plan:
    """Mode (a), ``eval.benchmark``: the registry's tasks, scored by the benchmark's environment
    kind (the config's ``env`` entry of that kind if it has one: its timeout, options and
    sandbox; else a new ``env.benchmark``). Mode (b): the tasks GRPO validates on (``data.val_path``
    or ``data.dataset_name``'s ``val`` split), scored by the config's ``env``."""
    e = cfg.eval
    cfg = cfg.model_copy(deep=True)
    if e.benchmark is None:
        tasks = load_tasks(cfg, "val")
        if not tasks:
            raise ValueError(
                "eval.benchmark is null and there are no held-out tasks: set eval.benchmark, "
                "data.val_path, or a data.dataset_name with a val split"
            )
        name = Path(cfg.data.val_path).stem if cfg.data.val_path else str(cfg.data.dataset_name)
        group_by = list(e.group_by or [])
    else:
        spec = get_benchmark(e.benchmark)
        tasks = load_benchmark(e.benchmark, e.path, split=e.split, seed=e.seed)
        mine = [k for k, v in cfg.env.items() if (v.type or k) == spec.env]
        if mine:
            key = mine[0]
            env = cfg.env[key]
            env.options = {**spec.env_options, **env.options}
        else:
            key, env = BENCH_ENV, EnvConfig(type=spec.env, options=dict(spec.env_options))
        cfg.data.env_name = key  # first: assigning env checks data.env_name against it
        cfg.env = {key: env}
        name = e.benchmark
        group_by = list(e.group_by if e.group_by is not None else spec.group_by)
    if e.max_tasks is not None:
        tasks = tasks[: e.max_tasks]
    missing = [k for k in group_by if not any(k in t for t in tasks)]
    if missing:
        raise ValueError(
            f"eval.group_by: no task has the key(s) {', '.join(missing)} (task keys: "
            f"{', '.join(sorted(tasks[0]))})"
        )
    return Plan(tasks, cfg, group_by, name)


def model_label(model: str) -> str:
    """A short name for a model in tables and file names (its last two path parts)."""
    parts = [p for p in Path(model).parts if p not in ("/", ".")]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "_".join(parts[-2:])) or "model"


def is_checkpoint(model: str) -> bool:
    """A dockyard checkpoint (``checkpoint_dir``, ``step_<n>/``, ``policy/``), not an HF folder."""
    p = Path(model)
    return p.is_dir() and not (p / "config.json").is_file()


def serveable(model: str, out_dir: Path, label: str | None = None) -> str:
    """``model`` as something an engine loads: a Hugging Face folder or Hub name as it is; a
    dockyard checkpoint exported (``dockyard export``) to ``out_dir/models/<label>`` first
    (``label``: default :func:`model_label`)."""
    if not is_checkpoint(model):
        return model
    policy, _ = resolve_checkpoint(model)
    out = out_dir / "models" / (label or model_label(model))
    print(f"dockyard eval: exporting the checkpoint {policy} to {out}", flush=True)
    return str(export_hf(policy, out, force=True))


def model_problems(models: list[str]) -> list[str]:
    """One line per entry of ``eval.models`` that looks like a checkpoint (a folder without
    ``config.json``) but is not one; Hugging Face folders and Hub names are the pre-flight's
    (``check_models``)."""
    problems = []
    for m in models:
        if is_checkpoint(m):
            try:
                resolve_checkpoint(m)
            except (ExportError, FileNotFoundError) as e:
                problems.append(
                    f"eval.models: {m!r} is neither a Hugging Face folder (no config.json) nor a "
                    f"dockyard checkpoint ({e})"
                )
    return problems
