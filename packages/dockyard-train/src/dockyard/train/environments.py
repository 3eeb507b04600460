"""The config's environments and datasets, built through the one registry in dockyard-envs.

``env.<name>.type`` (null: ``<name>``) and ``data.dataset_name`` are names in
:mod:`dockyard.envs.registry`, which also says how a package adds its own (an entry point; no
edit here). This module only turns ``env.<name>`` into constructor keywords (``sandbox_urls``,
``timeout_s``, ``options``), bounds the environment's concurrent scoring by ``max_concurrency``
(:class:`dockyard.envs.concurrency.ConcurrencyLimited`) and checks a config's names before
anything starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from dockyard.core.config.errors import ConfigError
from dockyard.core.config.sections import EnvConfig
from dockyard.envs import registry
from dockyard.envs.concurrency import ConcurrencyLimited


def env_type(name: str, env_cfg: EnvConfig) -> str:
    """The registered kind of ``env.<name>`` (``type``, else the entry's name); unknown: ValueError."""
    kind = env_cfg.type or name
    if kind not in registry.env_names():
        raise ValueError(
            f"env.{name}.type {kind!r} is not a known environment; choose one of "
            f"{', '.join(registry.env_names())}"
        )
    return kind


def needs_sandbox(name: str, env_cfg: EnvConfig) -> bool:
    """Whether ``env.<name>`` scores through the sandbox service (its registry flag)."""
    return registry.needs_sandbox(env_type(name, env_cfg))


def tool_less(name: str, env_cfg: EnvConfig) -> str | None:
    """The class name of ``env.<name>`` where it says it calls no tools (``calls_tools =
    False``); None where it calls them, or does not say (a third party's factory)."""
    try:
        cls = registry.env_factory(env_type(name, env_cfg))
    except (ValueError, LookupError):
        return None  # the names check reports it
    return cls.__name__ if getattr(cls, "calls_tools", None) is False else None


def needs_judge(name: str, env_cfg: EnvConfig) -> bool:
    """Whether ``env.<name>`` grades with the LLM judge (its registry flag)."""
    return registry.needs_judge(env_type(name, env_cfg))


def unknown_names(env: Mapping[str, EnvConfig], dataset_name: str | None) -> list[str]:
    """One line per ``env.<name>.type`` (``env``: the config's entries) / ``data.dataset_name``
    the registry does not know, each listing the known names (empty: all known).
    ``data.train_path`` needs no dataset."""
    problems = []
    envs = registry.env_names()
    for name, env_cfg in env.items():
        kind = env_cfg.type or name
        if kind not in envs:
            null = "" if env_cfg.type else " (type is null: the entry's name is the type)"
            problems.append(
                f"env.{name}.type: unknown environment {kind!r}{null}; known: {', '.join(envs)}"
            )
    dataset = dataset_name
    datasets = registry.dataset_names()
    if dataset is not None and dataset not in datasets:
        problems.append(
            f"data.dataset_name: unknown dataset {dataset!r}; known: {', '.join(datasets)} "
            "(or leave it null and set data.train_path to a JSONL file)"
        )
    return problems


def check_names(
    env: Mapping[str, EnvConfig], dataset_name: str | None = None, source: str = "<config>"
) -> None:
    """Raise :class:`~dockyard.core.config.errors.ConfigError` for :func:`unknown_names`."""
    problems = unknown_names(env, dataset_name)
    if problems:
        raise ConfigError(problems, source)


def build_environment(
    name: str, env_cfg: EnvConfig, sandbox_urls: list[str] | None = None, judge: Any = None
) -> Any:
    """An environment instance from ``env.<name>`` (sandbox URLs from the runtime if unset;
    ``judge``: the runtime's :data:`dockyard.envs.judging.JudgeFn` for an environment that
    ``needs_judge``, passed when its constructor takes ``judge``), scoring at most
    ``env.<name>.max_concurrency`` responses at once."""
    cls = registry.env_factory(env_type(name, env_cfg))
    params = inspect.signature(cls).parameters
    kwargs: dict[str, Any] = {}
    urls = list(env_cfg.sandbox_urls) or list(sandbox_urls or [])
    if "sandbox_urls" in params:
        if not urls:
            raise ValueError(f"env.{name} needs a sandbox: set env.{name}.sandbox_urls")
        kwargs["sandbox_urls"] = urls
    if "timeout_s" in params:
        kwargs["timeout_s"] = env_cfg.timeout_s
    if "judge" in params and judge is not None:
        kwargs["judge"] = judge
    unknown = _unknown_options(name, env_cfg, cls)
    if unknown:
        raise ValueError(unknown[0])
    kwargs.update(env_cfg.options)
    return ConcurrencyLimited(cls(**kwargs), env_cfg.max_concurrency)


# what the runtime passes itself, never an option
_FROM_THE_RUNTIME = ("self", "sandbox_urls", "timeout_s", "judge")


def _unknown_options(name: str, env_cfg: EnvConfig, cls: Any) -> list[str]:
    """Options the constructor does not take, and an ``env.<name>.timeout_s`` set for a class
    that takes none (it would be ignored)."""
    params = inspect.signature(cls).parameters
    takes = ", ".join(p for p in params if p not in _FROM_THE_RUNTIME) or "none"
    cls_name = getattr(cls, "__name__", cls)
    problems = [
        f"env.{name}.options.{k} is not an option of {cls_name} (options: {takes})"
        for k in env_cfg.options
        if k not in params or k in _FROM_THE_RUNTIME
    ]
    if "timeout_s" in getattr(env_cfg, "model_fields_set", ()) and "timeout_s" not in params:
        problems.append(
            f"env.{name}.timeout_s: {cls_name} takes no timeout_s (its limits are its own: the "
            f"tasks' or its options {takes}); remove it"
        )
    return problems


def option_problems(name: str, env_cfg: EnvConfig) -> list[str]:
    """What is wrong with ``env.<name>.options``, found without building the environment: keys
    its constructor does not take, required ones missing, and what the class's own
    ``check_options(options) -> list[str]`` finds (files it reads, values it refuses: see
    :meth:`dockyard.envs.base.BaseEnvironment.check_options`). An unknown name: nothing here
    (the names check reports it)."""
    try:
        cls = registry.env_factory(env_type(name, env_cfg))
    except (ValueError, LookupError):
        return []
    problems = _unknown_options(name, env_cfg, cls)
    for p in inspect.signature(cls).parameters.values():
        required = p.default is inspect.Parameter.empty and p.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if required and p.name not in _FROM_THE_RUNTIME and p.name not in env_cfg.options:
            problems.append(f"env.{name}.options.{p.name}: required by {cls.__name__}, not set")
    check: Any = getattr(cls, "check_options", None)
    if not problems and callable(check):
        found: Any = check(dict(env_cfg.options))
        problems += [f"env.{name}.options: {line}" for line in found]
    return problems


def load_dataset(
    name: str, split: str, options: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The tasks of ``data.dataset_name`` for ``split`` (``train`` / ``val``)."""
    if name not in registry.dataset_names():
        raise ValueError(
            f"data.dataset_name {name!r} is not a known dataset; choose one of "
            f"{', '.join(registry.dataset_names())} or set data.train_path to a JSONL file"
        )
    return registry.load_dataset(name, split, **(options or {}))
