"""Environments and datasets by name (the config's ``env.<name>.type`` and ``data.dataset_name``).

Entries are ``"module:attribute"`` strings imported on use, so naming an environment never
imports another's dependencies. To add one: put its class (constructor keywords: any of
``sandbox_urls``, ``token``, ``timeout_s`` plus its own ``options``) and a dataset function
``(split: "train" | "val", **options) -> list[dict]`` in a package, and add them below.
"""

from __future__ import annotations

import inspect
from typing import Any

from dockyard.train.runtime.hosts import load_object

ENVIRONMENTS: dict[str, str] = {
    "expression": "dockyard.envs.expression:ExpressionEnvironment",
    "math": "dockyard.envs.math.env:MathEnvironment",
    "mcq": "dockyard.envs.math.env:MultipleChoiceEnvironment",
    "code": "dockyard.envs.code.env:CodeEnvironment",
    "swe": "dockyard.envs.swe.env:SweEnvironment",
    "terminal": "dockyard.envs.terminal.env:TerminalEnvironment",
}

DATASETS: dict[str, str] = {
    "expression": "dockyard.envs.expression:load_tasks",
    "arithmetic": "dockyard.train.environments:_arithmetic",
    "humaneval": "dockyard.train.environments:_humaneval",
    "swe": "dockyard.train.environments:_swe",
    "terminal": "dockyard.train.environments:_terminal",
}

SANDBOXED = frozenset({"expression", "code", "swe", "terminal"})


def _arithmetic(split: str, n: int = 512, seed: int = 0) -> list[dict[str, Any]]:
    from dockyard.envs.math.data import ArithmeticGenerator

    return ArithmeticGenerator(seed=seed if split == "train" else seed + 10_000).tasks(n)


def _humaneval(split: str, seed: int = 0) -> list[dict[str, Any]]:
    from dockyard.envs.code.data import humaneval_split

    return humaneval_split("train" if split == "train" else "validation", seed=seed)


def _swe(split: str) -> list[dict[str, Any]]:
    from dockyard.envs.swe.data import load_shipped_tasks

    return load_shipped_tasks()


def _terminal(split: str) -> list[dict[str, Any]]:
    from dockyard.envs.terminal.tasks import load_terminal_tasks

    return load_terminal_tasks()


def env_type(name: str, env_cfg: Any) -> str:
    kind = env_cfg.type or name
    if kind not in ENVIRONMENTS:
        raise ValueError(
            f"env.{name}.type {kind!r} is not a known environment; choose one of "
            f"{', '.join(sorted(ENVIRONMENTS))}"
        )
    return kind


def build_environment(name: str, env_cfg: Any, sandbox_urls: list[str] | None = None) -> Any:
    """An environment instance from ``env.<name>`` (sandbox URLs from the runtime if unset)."""
    cls = load_object(ENVIRONMENTS[env_type(name, env_cfg)])
    params = inspect.signature(cls).parameters
    kwargs: dict[str, Any] = {}
    urls = list(env_cfg.sandbox_urls) or list(sandbox_urls or [])
    if "sandbox_urls" in params:
        if not urls:
            raise ValueError(f"env.{name} needs a sandbox: set env.{name}.sandbox_urls")
        kwargs["sandbox_urls"] = urls
    if "timeout_s" in params:
        kwargs["timeout_s"] = env_cfg.timeout_s
    for k, v in env_cfg.options.items():
        if k not in params:
            raise ValueError(
                f"env.{name}.options.{k} is not an option of {cls.__name__} "
                f"(options: {', '.join(p for p in params if p != 'self')})"
            )
        kwargs[k] = v
    return cls(**kwargs)


def load_dataset(
    name: str, split: str, options: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    if name not in DATASETS:
        raise ValueError(
            f"data.dataset_name {name!r} is not a known dataset; choose one of "
            f"{', '.join(sorted(DATASETS))} or set data.train_path to a JSONL file"
        )
    return load_object(DATASETS[name])(split, **(options or {}))
