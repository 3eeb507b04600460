"""``ConfigError``: every problem of a config, each with its full dotted path.

Unknown keys get the closest valid key at the same place ("did you mean ...") or, when the key
exists elsewhere in the schema, that full path; wrong types name the expected type.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError

from dockyard.core.config.introspect import (
    discriminator,
    iter_fields,
    resolve,
    tagged_members,
    type_label,
)


class ConfigError(ValueError):
    """A config could not be loaded or validated.

    Attributes:
        problems: one line per problem, each starting with the dotted path of the key.
        source: the file (or ``<dict>``) the config came from.
    """

    def __init__(self, problems: list[str], source: str = "<config>") -> None:
        self.problems = problems
        self.source = source
        n = len(problems)
        head = f"{n} problem{'s' if n != 1 else ''} in {source}:"
        super().__init__("\n".join([head, *(f"  - {p}" for p in problems)]))


def _sibling_members(root: type[BaseModel], section: tuple[str, ...], key: str) -> str:
    """``"; ..."`` naming the tags of a tagged union at ``section`` whose members have ``key``
    (a key of another member: "did you mean" would name the key itself), else ``""``."""
    if not section:
        return ""
    members = tagged_members(resolve(root, section).annotation) or []
    having = [m for m in members if key in m.model_fields]
    if not having:
        return ""
    tag_key = (discriminator(having[0]) or ("type", ()))[0]
    tags = [t for m in having for t in (discriminator(m) or ("", ()))[1]]
    named = " or ".join(f"{tag_key}: {t}" for t in tags) or "a registered plugin"
    return f"; {key!r} is a key of {'.'.join(section)} with {named}, not with this {tag_key}"


def _suggest(
    root: type[BaseModel], parent: type[BaseModel] | None, key: str, where: tuple[str, ...] = ()
) -> str:
    if sibling := _sibling_members(root, where[:-1], key):
        return sibling
    if parent is not None:
        close = difflib.get_close_matches(key, list(parent.model_fields), n=1, cutoff=0.6)
        if close:
            return f"; did you mean {close[0]!r}?"
    elsewhere = sorted({p for p, _, _ in iter_fields(root) if p.rsplit(".", 1)[-1] == key})
    if elsewhere:
        return f"; did you mean {' or '.join(repr(p) for p in elsewhere[:3])}?"
    if parent is not None:
        return f"; valid keys here: {', '.join(parent.model_fields)}"
    return ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def format_validation_error(root: type[BaseModel], err: ValidationError) -> list[str]:
    """One readable line per pydantic error."""
    problems: list[str] = []
    for e in err.errors(include_url=False):
        where = resolve(root, tuple(e["loc"]))
        path = ".".join(where.display) or "<top level>"
        kind = e["type"]
        if kind == "extra_forbidden":
            key = where.display[-1] if where.display else ""
            hint = _suggest(root, where.parent, key, tuple(where.display))
            problems.append(f"{path}: unknown key{hint}")
        elif kind == "missing":
            problems.append(f"{path}: required key is missing")
        elif kind == "union_tag_invalid":
            ctx = e.get("ctx") or {}
            problems.append(
                f"{path}: unknown {str(ctx.get('discriminator', 'type')).strip(chr(39))} {ctx.get('tag')!r}; "
                f"expected one of {ctx.get('expected_tags')}"
            )
        elif kind == "value_error":
            msg = str(e["msg"]).removeprefix("Value error, ")
            problems.extend(
                line if line.split(" ", 1)[0].count(".") else f"{path}: {line}"
                for line in msg.split("\n")
            )
        elif kind.endswith(("_type", "_parsing")) or kind in ("literal_error", "enum"):
            expected = type_label(where.annotation) if where.annotation is not None else "?"
            got = e.get("input")
            problems.append(
                f"{path}: expected {expected}, got {_short(got)} ({type(got).__name__}): {e['msg']}"
            )
        else:
            problems.append(f"{path}: {e['msg']} (got {_short(e.get('input'))})")
    return problems
