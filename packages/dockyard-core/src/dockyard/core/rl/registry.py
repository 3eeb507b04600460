"""A name -> function registry, one per family (advantage estimators, policy losses, preference
losses). Each family's module documents how to add a member; the registry itself only maps
names and gives a helpful error for an unknown one.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    """Maps a name (the config's ``name`` / ``type`` value) to an implementation."""

    def __init__(self, family: str) -> None:
        self.family = family
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
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._items), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise KeyError(
                f"unknown {self.family} {name!r}{hint}; known: {', '.join(sorted(self._items))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
