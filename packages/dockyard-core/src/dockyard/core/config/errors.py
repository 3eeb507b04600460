"""``ConfigError``: every problem of a config, each with its full dotted path.

Unknown keys get the closest valid key at the same place ("did you mean ...") or, when the key
exists elsewhere in the schema, that full path; wrong types name the expected type.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError

from dockyard.core.config.introspect import iter_fields, resolve, type_label


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


def _suggest(root: type[BaseModel], parent: type[BaseModel] | None, key: str) -> str:
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
            problems.append(f"{path}: unknown key{_suggest(root, where.parent, key)}")
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
