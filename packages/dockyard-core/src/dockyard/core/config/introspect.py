"""Walking the config schema: the model at a dotted path, every valid path, union tags, and a
readable label for a field's type. Used by error messages, the loader and the docs generator."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel


def strip(tp: Any) -> Any:
    """Remove ``Annotated`` wrappers."""
    while get_origin(tp) is typing.Annotated:
        tp = get_args(tp)[0]
    return tp


def union_members(tp: Any) -> list[Any]:
    """The non-None members of a union (``[tp]`` for a non-union)."""
    tp = strip(tp)
    if get_origin(tp) in (Union, types.UnionType):
        return [strip(a) for a in get_args(tp) if a is not type(None)]
    return [tp]


def is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


PLUGIN_TAG = "plugin"
"""The tag of a union's member that takes any other registered name (``type: str``)."""


def discriminator(model: type[BaseModel]) -> tuple[str, tuple[Any, ...]] | None:
    """``(field, tags)`` when ``model`` is a member of a tagged union: its ``type``/``name`` is a
    Literal of its tags, or ``str`` — the member for a name another package registers (no tags
    of its own; pydantic's tag for it is :data:`PLUGIN_TAG`) or a member whose built-in names
    (its ``BUILTIN_TAGS``) other packages' registered ones join."""
    for key in ("type", "name"):
        f = model.model_fields.get(key)
        if f is not None and get_origin(f.annotation) is Literal:
            return key, get_args(f.annotation)
        if f is not None and f.annotation is str:
            return key, tuple(getattr(model, "BUILTIN_TAGS", ()))
    return None


def tagged_members(tp: Any) -> list[type[BaseModel]] | None:
    """The models of a discriminated union of models (None when ``tp`` is not one)."""
    members = union_members(tp)
    models = [m for m in members if is_model(m)]
    if len(models) >= 2 and all(discriminator(m) for m in models):
        return models
    return None


def type_label(tp: Any) -> str:
    """A short human label: ``int``, ``list[str]``, ``one of 'a', 'b'``, ``float or null``."""
    tp = strip(tp)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        parts = [type_label(a) for a in args if a is not type(None)]
        label = " | ".join(parts)
        return f"{label} or null" if type(None) in args else label
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (list, tuple, dict):
        inner = ", ".join(type_label(a) for a in get_args(tp) if a is not Ellipsis)
        return f"{origin.__name__}[{inner}]"
    if is_model(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


@dataclass
class Resolved:
    """Where a pydantic error location points in the schema."""

    display: list[str]  # dotted path as the user writes it (union tags removed)
    parent: type[BaseModel] | None  # the model holding the last key (None: not a model)
    annotation: Any  # the field's annotation, when the path reached a field
    complete: bool  # every loc element was consumed as a known key


def resolve(root: type[BaseModel], loc: tuple[Any, ...]) -> Resolved:
    """Follow a pydantic error ``loc`` through the schema."""
    display: list[str] = []
    tp: Any = root
    parent: type[BaseModel] | None = None
    annotation: Any = None
    for i, el in enumerate(loc):
        members = tagged_members(tp)
        if members is not None:
            tags = {m: (discriminator(m) or ("", ()))[1] for m in members}
            hit = [m for m in members if el in tags[m] or (el == PLUGIN_TAG and not tags[m])]
            if hit:
                tp = hit[0]
                continue
            models = [m for m in members if is_model(m)]
            tp = models[0] if models else tp
        cands = union_members(tp)
        model = next((c for c in cands if is_model(c)), None)
        if model is not None:
            display.append(str(el))
            parent = model
            field = model.model_fields.get(str(el))
            if field is None:
                return Resolved(display + [str(x) for x in loc[i + 1 :]], parent, None, False)
            tp = annotation = field.annotation
            continue
        container = next((c for c in cands if get_origin(c) in (dict, list, tuple)), None)
        if container is not None:
            display.append(str(el))
            args = get_args(container)
            tp = args[-1] if args else Any
            parent = None
            continue
        display.append(str(el))
        parent = None
    return Resolved(display, parent, annotation, True)


def iter_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """``(dotted path, annotation, FieldInfo)`` for every field, depth first; union members'
    fields appear once per member; ``dict[str, Model]`` fields as ``path.<name>.field``."""
    for name, f in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path, f.annotation, f
        members = tagged_members(f.annotation)
        if members:
            for m in members:
                yield from iter_fields(m, path + ".")
            continue
        for c in union_members(f.annotation):
            if is_model(c):
                yield from iter_fields(c, path + ".")
            elif get_origin(c) is dict and is_model(strip(get_args(c)[-1])):
                yield from iter_fields(strip(get_args(c)[-1]), path + ".<name>.")


def tagged_union_paths(
    model: type[BaseModel], prefix: tuple[str, ...] = ()
) -> dict[tuple[str, ...], str]:
    """Paths of discriminated-union fields -> their tag key (``("loss_fn",): "type"``)."""
    out: dict[tuple[str, ...], str] = {}
    for name, f in model.model_fields.items():
        path = (*prefix, name)
        members = tagged_members(f.annotation)
        if members:
            out[path] = (discriminator(members[0]) or ("type", ()))[0]
            continue
        for c in union_members(f.annotation):
            if is_model(c):
                out.update(tagged_union_paths(c, path))
    return out
