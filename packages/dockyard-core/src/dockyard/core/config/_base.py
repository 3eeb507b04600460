"""The base of every config model: unknown keys are errors, and each field's docstring is its
description (shown by ``dockyard config check`` errors and in docs/configuration.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ConfigModel(BaseModel):
    """A config section: ``extra="forbid"``, attribute docstrings as field descriptions."""

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        validate_assignment=True,
        validate_default=True,
    )

    def explicitly_set(self, *names: str) -> list[str]:
        """The given field names that the user set explicitly (not left to their default)."""
        return [n for n in names if n in self.model_fields_set]


def tagged(default_tag: str, key: str = "type") -> Any:
    """A before-validator for a discriminated union field: a mapping without ``key`` gets
    ``default_tag`` (so ``loss_fn: {ratio_clip_max: 0.28}`` needs no ``type:`` line)."""

    def fill(v: Any) -> Any:
        if isinstance(v, dict) and key not in v:
            return {key: default_tag, **v}
        return v

    return fill
