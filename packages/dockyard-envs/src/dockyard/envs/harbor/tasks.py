"""Load Harbor task directories (Terminal-Bench 2's format) into task dicts.

A task directory::

    task.toml            [task] name; [agent] timeout_sec; [verifier] timeout_sec, [verifier.env];
                         [environment] build_timeout_sec, memory_mb | memory ("2G"),
                         storage_mb | storage, gpus (> 0 refused), docker_image (ignored beside
                         a Dockerfile, the base hint without one), allow_internet (a verifier
                         asking for a host outside the registries: ``needs_network``); cpus unused
    instruction.md       the prompt
    environment/         Dockerfile + build context (image.py: built as layers; or dockerfile.py);
                         a docker-compose.yaml (sidecar services) is refused
    tests/test.sh        the verifier (+ its files); writes /logs/verifier/reward.txt|json
    solution/solve.sh    optional oracle

:func:`load_tasks` takes one task directory or a folder of them. A task dict::

    {"id", "path", "category", "difficulty" (task.toml's [metadata]), "instruction",
     "environment": EnvSpec fields, "tests": {rel: text}, "tests_binary": {rel: base64},
     "solution": {rel: text} | None, "agent_timeout_s", "verifier_timeout_s",
     "limits": {"memory_mb", "disk_mb"}, "verifier_env": {k: v}, "allow_internet": bool,
     "notes": [...]}

``tests`` and ``solution`` never reach the agent's session: the environment sends ``tests`` only
with ``finish`` (mounted at /tests of the verifier's fresh jail), ``solution`` only the oracle
agent of ``dockyard harbor validate`` uses.
"""

from __future__ import annotations

import base64
import re
import tomllib
import warnings
from pathlib import Path
from typing import Any

from dockyard.envs.harbor.bases import UnmappableBase, choose
from dockyard.envs.harbor.dockerfile import HarborFormatError, parse_dockerfile
from dockyard.envs.harbor.image import read_image

MAX_TEXT_FILE = 4 << 20
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
SHIPPED = Path(__file__).resolve().parent / "tasks"
SHIPPED_TB2 = Path(__file__).resolve().parent / "tasks-tb2"  # Terminal-Bench 2's published shape


def _texts(root: Path, what: str, binary: dict[str, str] | None = None) -> dict[str, str]:
    """``root``'s files as text; with ``binary``, a file that is not UTF-8 goes there as
    base64 (a task's test images), else it is refused."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            raise HarborFormatError(f"{p}: symlinks in {what}/ are not supported")
        if not p.is_file() or "__pycache__" in p.parts:
            continue
        if p.stat().st_size > MAX_TEXT_FILE:
            raise HarborFormatError(
                f"{p}: over {MAX_TEXT_FILE} bytes (the {what} travel in requests)"
            )
        rel = str(p.relative_to(root))
        data = p.read_bytes()
        try:
            out[rel] = data.decode()
        except UnicodeDecodeError as e:
            if binary is None:
                raise HarborFormatError(
                    f"{p}: not UTF-8 text ({e}); {what}/ files travel as text"
                ) from e
            binary[rel] = base64.b64encode(data).decode()
    return out


def _number(table: dict[str, Any], key: str, where: str, default: float) -> float:
    v = table.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise HarborFormatError(f"{where}: {key} = {v!r} is not a positive number")
    return float(v)


def _refuse_gpus(env_t: dict[str, Any], toml_path: Path) -> None:
    gpus = env_t.get("gpus", 0)
    if isinstance(gpus, int | float) and not isinstance(gpus, bool) and gpus > 0:
        raise HarborFormatError(
            f"{toml_path}: [environment] gpus = {gpus}: the sandbox has no GPUs (refused)"
        )


def _size_mb(env_t: dict[str, Any], key: str, toml_path: Path, default: int) -> int:
    """``memory_mb = 2048`` or Harbor's ``memory = "2G"`` (also K/M/T suffixes)."""
    if f"{key}_mb" in env_t:
        return int(_number(env_t, f"{key}_mb", f"{toml_path} [environment]", default))
    v = env_t.get(key)
    if v is None:
        return default
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(v), re.I)
    if not m:
        raise HarborFormatError(f'{toml_path}: [environment] {key} = {v!r}: give a size like "2G"')
    scale = {"": 1 / (1 << 20), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[m.group(2).upper()]
    return max(1, int(float(m.group(1)) * scale))


def _environment(
    d: Path, env_t: dict[str, Any], toml_path: Path, builder: str, build_s: float, notes: list[str]
) -> dict[str, Any]:
    """The EnvSpec fields: the Dockerfile built as layers (``image.py``) or, with
    ``builder="prefix"``, mapped onto the sandbox's own system (``dockerfile.py``). A
    ``docker_image`` is ignored beside a Dockerfile and is the base hint without one."""
    dockerfile = d / "environment" / "Dockerfile"
    for name in COMPOSE_FILES:
        if (d / "environment" / name).is_file():
            raise HarborFormatError(
                f"{d / 'environment' / name}: a multi-container task (its services run beside the "
                "agent's container) is not supported: the sandbox runs one environment per task"
            )
    hint = env_t.get("docker_image") or env_t.get("docker_image_archive")
    if dockerfile.is_file():
        if hint:
            notes.append(
                f"task.toml: docker_image = {hint!r} ignored: environment/Dockerfile is built instead"
            )
        if builder == "prefix":
            parsed = parse_dockerfile(dockerfile)
            notes.extend(parsed.notes)
            return parsed.spec(timeout_s=build_s)
        image = read_image(dockerfile)
        notes.extend(image.notes)
        return image.spec(timeout_s=build_s)
    if not hint or builder == "prefix":
        raise HarborFormatError(f"{dockerfile}: missing (the task's environment)")
    try:
        got = choose(str(hint))
    except UnmappableBase as e:
        raise HarborFormatError(
            f"{toml_path}: [environment] docker_image: {e} (and the task has no environment/Dockerfile)"
        ) from e
    notes.append(f"task.toml: no environment/Dockerfile; docker_image {hint!r} used as the base hint: {got.base}"
                 + (f" ({got.note})" if got.note else ""))  # fmt: skip
    return {"image": {"stages": [{"base": got.base, "steps": [{"workdir": "/app"}]}]},
            "workdir": "/app", "timeout_s": build_s}  # fmt: skip


def load_task(task_dir: str | Path, builder: str = "layers") -> dict[str, Any]:
    """One Harbor task directory (see the module docstring); HarborFormatError names the file.
    ``builder``: ``"layers"`` (the Dockerfile built as Docker would, ``image.py``) or
    ``"prefix"`` (the older mapping onto the sandbox's own system, ``dockerfile.py``)."""
    if builder not in ("layers", "prefix"):
        raise ValueError(f"builder={builder!r}: expected 'layers' or 'prefix'")
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
    notes: list[str] = []
    _refuse_gpus(env_t, toml_path)
    try:
        instruction = (d / "instruction.md").read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise HarborFormatError(f"{d / 'instruction.md'}: missing or unreadable ({e})") from e
    if not (d / "tests" / "test.sh").is_file():
        raise HarborFormatError(f"{d / 'tests' / 'test.sh'}: missing (the verifier script)")
    build_s = min(_number(env_t, "build_timeout_sec", f"{toml_path} [environment]", 900.0), 7200.0)
    environment = _environment(d, env_t, toml_path, builder, build_s, notes)
    verifier = meta.get("verifier", {})
    agent = meta.get("agent", {})
    limits = {
        "memory_mb": _size_mb(env_t, "memory", toml_path, 2048),
        "disk_mb": _size_mb(env_t, "storage", toml_path, 1024),
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
        "environment": environment,
        "tests": _texts(d / "tests", "tests", tests_binary := {}),
        "tests_binary": tests_binary,
        "solution": _texts(solution_dir, "solution") if (solution_dir / "solve.sh").is_file() else None,
        "agent_timeout_s": _number(agent, "timeout_sec", f"{toml_path} [agent]", 600.0),
        "verifier_timeout_s": min(_number(verifier, "timeout_sec", f"{toml_path} [verifier]", 120.0), 3600.0),
        "verifier_env": {str(k): str(v) for k, v in (verifier.get("env") or {}).items()},
        "limits": limits,
        "allow_internet": env_t.get("allow_internet") is True,
        "notes": notes,
    }  # fmt: skip


def load_tasks(
    path: str | Path, builder: str | None = None, refused: list[dict[str, str]] | None = None
) -> list[dict[str, Any]]:
    """A Harbor task directory (it has a task.toml) or a folder of them (sorted by name).
    ``builder`` (see :func:`load_task`) defaults to ``prefix`` for the shipped ``tasks/`` (they
    predate layered images and need no network to build) and ``layers`` for anything else.
    ``refused``: a list to collect a folder's tasks that cannot run here (``{"id", "path",
    "refused": the reason, naming the file and line}``) while the others load; without it the
    first refusal raises (a published set always has a few: GPUs, sidecar services)."""
    root = Path(path)
    if builder is None:
        builder = "prefix" if SHIPPED in (root.resolve(), root.resolve().parent) else "layers"
    if not root.is_dir():
        raise HarborFormatError(f"{root}: not a directory (give a Harbor task or a folder of them)")
    if (root / "task.toml").is_file():
        return [load_task(root, builder)]
    dirs = sorted(p for p in root.iterdir() if (p / "task.toml").is_file())
    if not dirs:
        raise HarborFormatError(f"{root}: holds no task directory (no */task.toml)")
    if refused is None:
        return [load_task(p, builder) for p in dirs]
    out = []
    for p in dirs:
        try:
            out.append(load_task(p, builder))
        except HarborFormatError as e:
            refused.append({"id": p.name, "path": str(p), "refused": str(e)})
    return out


def harbor_dataset(
    split: str = "train", path: str | None = None, builder: str | None = None,
    skip_refused: bool = False,
) -> list[dict[str, Any]]:  # fmt: skip
    """The ``harbor`` dataset: the tasks under ``path`` (``data.options.path``), or the shipped
    ones; the same for every split (``builder``: see :func:`load_tasks`). A task that cannot
    run here stops the run with its reason, or with ``skip_refused`` is left out with a
    warning naming it and why (a published set as is: `dockyard harbor validate` lists them)."""
    refused: list[dict[str, str]] | None = [] if skip_refused else None
    tasks = load_tasks(Path(path) if path else SHIPPED, builder, refused)
    for r in refused or ():
        warnings.warn(f"harbor: left out {r['id']}: {r['refused']}", stacklevel=2)
    return tasks
