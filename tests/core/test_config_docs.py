"""docs/configuration.md is generated from the schema and must be current; every field has a
description."""

from __future__ import annotations

from pathlib import Path

from dockyard.core.config.docs import render
from dockyard.core.config.introspect import iter_fields
from dockyard.core.config.schema import MasterConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_configuration_page_is_current():
    assert PAGE.read_text() == render(), (
        "docs/configuration.md is stale: run "
        "`.venv/bin/python -m dockyard.core.config.docs > docs/configuration.md`"
    )


def test_every_field_is_documented():
    missing = [
        path for path, _, f in iter_fields(MasterConfig) if not (f.description or "").strip()
    ]
    assert not missing, f"fields without a docstring: {missing}"
    text = render()
    for path, _, _ in iter_fields(MasterConfig):
        assert f"`{path.rsplit('.', 1)[-1]}`" in text, path
