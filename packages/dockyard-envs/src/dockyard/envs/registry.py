"""Environments by name: ``make_env("code", sandbox_urls=[...])``.

To add one, register a factory: ``register_env("mine", "my_pkg.envs:MyEnvironment")`` (a
``module:attr`` string is imported on first use, so registering costs nothing).
"""

from __future__ import annotations

import importlib
from typing import Any

from dockyard.core.interfaces.environment import Environment

_REGISTRY: dict[str, str] = {
    "math": "dockyard.envs.math.env:MathEnvironment",
    "mcq": "dockyard.envs.math.env:MultipleChoiceEnvironment",
    "code": "dockyard.envs.code.env:CodeEnvironment",
    "swe": "dockyard.envs.swe.env:SweEnvironment",
    "terminal": "dockyard.envs.terminal.env:TerminalEnvironment",
    "expression": "dockyard.envs.expression:ExpressionEnvironment",
}


def register_env(name: str, target: str) -> None:
    """Register ``name`` → ``"module:Class"`` (overwrites are errors)."""
    if name in _REGISTRY and _REGISTRY[name] != target:
        raise ValueError(f"environment {name!r} is already registered as {_REGISTRY[name]}")
    if ":" not in target:
        raise ValueError(f"target must be 'module:attr', got {target!r}")
    _REGISTRY[name] = target


def env_names() -> list[str]:
    return sorted(_REGISTRY)


def make_env(name: str, **kwargs: Any) -> Environment:
    """Build the environment registered as ``name`` with ``kwargs``.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    if name not in _REGISTRY:
        raise KeyError(f"unknown environment {name!r}; known: {', '.join(env_names())}")
    module, attr = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), attr)(**kwargs)
