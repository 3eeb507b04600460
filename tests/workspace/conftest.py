"""Fixtures for the workspace-level tests (layout, dependency boundaries, builds, habits)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def uv() -> str:
    exe = shutil.which("uv")
    if exe is None:
        pytest.fail("uv is not on PATH: run the suite with `./dev test` (it installs uv)")
    return exe


@pytest.fixture(scope="session")
def uv_env() -> dict[str, str]:
    """The environment uv needs here: pip's local wheel folder (torch 2.13.0+cpu) passed on."""
    env = dict(os.environ)
    if env.get("PIP_FIND_LINKS") and not env.get("UV_FIND_LINKS"):
        env["UV_FIND_LINKS"] = env["PIP_FIND_LINKS"]
    env["UV_PYTHON_DOWNLOADS"] = "never"
    return env
