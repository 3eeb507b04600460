"""Named tables of implementations, open to other packages through entry points.

Every pluggable kind in dockyard is one :class:`Registry`: a family name for messages, the
built-in entries registered in code, and an entry-point group through which any installed
distribution adds more — the way pytest plugins and gymnasium's ``register`` work; nobody edits
dockyard to add one. A third-party package declares, in its ``pyproject.toml``::

    [project.entry-points."dockyard.advantages"]
    my_estimator = "my_package.advantages:my_estimator"

and ``grpo.adv_estimator: {name: my_estimator, ...}`` then finds it. Look-ups check the
built-ins, then the group (``importlib.metadata``: metadata only; the entry is imported when it
is first used); an unknown name is a KeyError naming the closest known one. The groups:

==============================  ==========================================
group                           what
==============================  ==========================================
``dockyard.advantages``         advantage estimators (built-ins: ``dockyard.core.rl``)
``dockyard.losses``             policy-gradient losses (built-ins: ``dockyard.core.rl``)
``dockyard.preference_losses``  preference losses (built-ins: ``dockyard.core.rl``)
``dockyard.engines``            generation engines (the engine package's own are entry points)
``dockyard.environments``       environments
``dockyard.datasets``           datasets
``dockyard.benchmarks``         evaluation benchmarks
``dockyard.transports``         weight transports (dockyard-serve's table)
``dockyard.trainers``           trainer backends (``interfaces.TrainerBackend``)
``dockyard.commands``           ``dockyard`` sub-commands (dockyard-train's CLI)
==============================  ==========================================

The environment package keeps spec-returning registries of its own for the last three, on the
same entry-point mechanism. ``docs/plugins.md`` shows how to add one.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

F = TypeVar("F")


def entry_point_names(group: str) -> list[str]:
    """The names installed distributions register in entry-point ``group`` (nothing imported)."""
    return sorted({ep.name for ep in entry_points(group=group)})


def closest(name: str, known: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to ``name``, else ""."""
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_registered(
    value: str, *, key: str, family: str, builtins: tuple[str, ...], group: str
) -> str:
    """``value`` when it is a built-in or registered under entry-point ``group``; else a
    ValueError for config key ``key`` naming the closest known name (schema validators)."""
    known = sorted({*builtins, *entry_point_names(group)})
    if value not in known:
        raise ValueError(
            f"{key}: no {family} {value!r}{closest(value, known)}; known: {', '.join(known)} "
            f"(a package adds one under the entry-point group {group!r})"
        )
    return value


class Registry(Generic[F]):
    """Maps a name (the config's ``name`` / ``type`` value) to an implementation: the entries
    registered in code, then those of entry-point ``group`` (module docstring)."""

    def __init__(self, family: str, group: str | None = None) -> None:
        self.family = family
        self.group = group
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: ``@REGISTRY.register("my_estimator")``."""

        def deco(fn: F) -> F:
            if name in self._items:
                raise ValueError(f"{self.family} {name!r} is already registered")
            self._items[name] = fn
            return fn

        return deco

    def get(self, name: str) -> F:
        if name in self._items:
            return self._items[name]
        if self.group is not None:
            for ep in entry_points(group=self.group, name=name):
                loaded: Any = ep.load()
                self._items[name] = loaded  # loaded once per process
                return loaded
        raise KeyError(self.unknown(name)) from None

    def unknown(self, name: str) -> str:
        """The message for a name nobody registered."""
        where = (
            f"; a package can add one under the entry-point group {self.group!r}"
            if self.group
            else ""
        )
        return (f"unknown {self.family} {name!r}{closest(name, self.names())}; known: "
                f"{', '.join(self.names())}{where}")  # fmt: skip

    def names(self) -> list[str]:
        extra = entry_point_names(self.group) if self.group else []
        return sorted({*self._items, *extra})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
