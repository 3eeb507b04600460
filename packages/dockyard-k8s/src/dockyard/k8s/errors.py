"""Errors that name the field at fault.

Every problem a user can fix in a recipe, an infra spec or a dockyard config surfaces as a
:class:`SpecError` whose message starts with the dotted path of the field
(``recipe.sandbox.replicas.max``) and says what to change.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ValidationError


class SpecError(ValueError):
    """A recipe / infra / config field is wrong. ``field`` is its dotted path."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class SpecErrors(ValueError):
    """Several :class:`SpecError` at once (all problems of one file are reported together)."""

    def __init__(self, errors: Sequence[SpecError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


def dotted(prefix: str, loc: Iterable[object]) -> str:
    """``("sandbox", "replicas", 0)`` -> ``prefix.sandbox.replicas[0]``."""
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def nearest(key: str, valid: Iterable[str]) -> str | None:
    """The valid key closest to a misspelt one, or None when nothing is close."""
    found = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return found[0] if found else None


def from_pydantic(prefix: str, err: ValidationError, model: type | None = None) -> SpecErrors:
    """Turn a pydantic ValidationError into SpecErrors naming each field (and, for an unknown
    key, the nearest valid one)."""
    out: list[SpecError] = []
    for e in err.errors():
        loc = tuple(e["loc"])
        field = dotted(prefix, loc)
        if e["type"] == "extra_forbidden" and model is not None:
            valid = _fields_at(model, loc[:-1])
            hint = nearest(str(loc[-1]), valid) if valid else None
            msg = "unknown key"
            if hint:
                msg += f"; did you mean '{hint}'?"
            elif valid:
                msg += f"; valid keys here: {', '.join(sorted(valid))}"
            out.append(SpecError(field, msg))
        else:
            out.append(SpecError(field, e["msg"]))
    return SpecErrors(out)


def _fields_at(model: type, loc: tuple[object, ...]) -> list[str]:
    """Field names of the (nested) pydantic model found by following ``loc`` from ``model``."""
    current: object = model
    for part in loc:
        if isinstance(part, int) or not (
            isinstance(current, type) and issubclass(current, BaseModel)
        ):
            # list index or dict key: step into the item type
            args = typing.get_args(current)
            current = args[-1] if args else None
            if isinstance(part, int):
                continue
            if not (isinstance(current, type) and issubclass(current, BaseModel)):
                return []
        field = current.model_fields.get(str(part))
        if field is None:
            return []
        current = _unwrap(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _unwrap(annotation: object) -> object:
    """``Optional[Model]`` / ``Model | None`` -> ``Model``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return annotation
