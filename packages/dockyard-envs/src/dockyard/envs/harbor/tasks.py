"""Load Harbor task directories (Terminal-Bench 2's format) into task dicts.

A task directory::

    task.toml            [task] name; [agent] timeout_sec; [verifier] timeout_sec, [verifier.env];
                         [environment] build_timeout_sec, cpus, memory_mb, storage_mb, docker_image
    instruction.md       the prompt
    environment/         Dockerfile + build context (read by dockerfile.py)
    tests/test.sh        the verifier (+ its files); writes /logs/verifier/reward.txt|json
    solution/solve.sh    optional oracle

:func:`load_tasks` takes one task directory or a folder of them. A task dict::

    {"id", "path", "category", "difficulty" (task.toml's [metadata]), "instruction",
     "environment": EnvSpec fields, "tests": {rel: text},
     "solution": {rel: text} | None, "agent_timeout_s", "verifier_timeout_s",
     "limits": {"memory_mb", "disk_mb"}, "verifier_env": {k: v}, "notes": [...]}

``tests`` and ``solution`` never reach the agent's session: the environment sends ``tests`` only
with ``finish`` (mounted at /tests of the verifier's fresh jail), ``solution`` only the oracle
agent of ``dockyard harbor validate`` uses.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from dockyard.envs.harbor.dockerfile import HarborFormatError, parse_dockerfile

MAX_TEXT_FILE = 4 << 20
SHIPPED = Path(__file__).resolve().parent / "tasks"


def _texts(root: Path, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            raise HarborFormatError(f"{p}: symlinks in {what}/ are not supported")
        if not p.is_file() or "__pycache__" in p.parts:
            continue
        if p.stat().st_size > MAX_TEXT_FILE:
            raise HarborFormatError(f"{p}: over {MAX_TEXT_FILE} bytes (the {what} travel as text)")
        try:
            out[str(p.relative_to(root))] = p.read_text()
        except UnicodeDecodeError as e:
            raise HarborFormatError(
                f"{p}: not UTF-8 text ({e}); {what}/ files travel as text"
            ) from e
    return out


def _number(table: dict[str, Any], key: str, where: str, default: float) -> float:
    v = table.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise HarborFormatError(f"{where}: {key} = {v!r} is not a positive number")
    return float(v)


def load_task(task_dir: str | Path) -> dict[str, Any]:
    """One Harbor task directory (see the module docstring); HarborFormatError names the file."""
    d = Path(task_dir)
    toml_path = d / "task.toml"
    try:
        meta = tomllib.loads(toml_path.read_text())
    except FileNotFoundError as e:
        raise HarborFormatError(f"{toml_path}: missing (every Harbor task has a task.toml)") from e
    except tomllib.TOMLDecodeError as e:
        raise HarborFormatError(f"{toml_path}: {e}") from e
    env_t = meta.get("environment", {})
    if not isinstance(env_t, dict):
        raise HarborFormatError(f"{toml_path}: [environment] must be a table")
    if env_t.get("docker_image") or env_t.get("docker_image_archive"):
        raise HarborFormatError(
            f"{toml_path}: [environment] docker_image: a prebuilt image cannot be provisioned "
            "without Docker; give an environment/Dockerfile instead"
        )
    try:
        instruction = (d / "instruction.md").read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise HarborFormatError(f"{d / 'instruction.md'}: missing or unreadable ({e})") from e
    if not (d / "tests" / "test.sh").is_file():
        raise HarborFormatError(f"{d / 'tests' / 'test.sh'}: missing (the verifier script)")
    dockerfile = d / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        raise HarborFormatError(f"{dockerfile}: missing (the task's environment)")
    parsed = parse_dockerfile(dockerfile)
    build_s = _number(env_t, "build_timeout_sec", f"{toml_path} [environment]", 900.0)
    verifier = meta.get("verifier", {})
    agent = meta.get("agent", {})
    limits = {
        "memory_mb": int(_number(env_t, "memory_mb", f"{toml_path} [environment]", 2048)),
        "disk_mb": int(_number(env_t, "storage_mb", f"{toml_path} [environment]", 1024)),
    }
    limits["disk_mb"] = min(limits["disk_mb"], 4096)
    task_meta = meta.get("task", {}) if isinstance(meta.get("task"), dict) else {}
    about = meta.get("metadata", {}) if isinstance(meta.get("metadata"), dict) else {}
    solution_dir = d / "solution"
    return {
        "id": str(task_meta.get("name") or d.name),
        "path": str(d),
        "category": str(about.get("category") or "uncategorized"),
        "difficulty": str(about.get("difficulty") or "unknown"),
        "instruction": instruction,
        "environment": parsed.spec(timeout_s=min(build_s, 7200.0)),
        "tests": _texts(d / "tests", "tests"),
        "solution": _texts(solution_dir, "solution") if (solution_dir / "solve.sh").is_file() else None,
        "agent_timeout_s": _number(agent, "timeout_sec", f"{toml_path} [agent]", 600.0),
        "verifier_timeout_s": min(_number(verifier, "timeout_sec", f"{toml_path} [verifier]", 120.0), 3600.0),
        "verifier_env": {str(k): str(v) for k, v in (verifier.get("env") or {}).items()},
        "limits": limits,
        "notes": parsed.notes,
    }  # fmt: skip


def load_tasks(path: str | Path) -> list[dict[str, Any]]:
    """A Harbor task directory (it has a task.toml) or a folder of them (sorted by name)."""
    root = Path(path)
    if not root.is_dir():
        raise HarborFormatError(f"{root}: not a directory (give a Harbor task or a folder of them)")
    if (root / "task.toml").is_file():
        return [load_task(root)]
    dirs = sorted(p for p in root.iterdir() if (p / "task.toml").is_file())
    if not dirs:
        raise HarborFormatError(f"{root}: holds no task directory (no */task.toml)")
    return [load_task(p) for p in dirs]


def harbor_dataset(split: str = "train", path: str | None = None) -> list[dict[str, Any]]:
    """The ``harbor`` dataset: the tasks under ``path`` (``data.options.path``), or the shipped
    ones; the same for every split."""
    return load_tasks(path or SHIPPED)
