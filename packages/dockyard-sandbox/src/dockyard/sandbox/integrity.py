"""Integrity rules applied between the untrusted patch and the trusted tests (threats 9-12).

* Files whose mere presence changes how Python or pytest behave — ``conftest.py``,
  ``sitecustomize.py``, ``usercustomize.py``, ``*.pth`` — are reverted to the base tree (or
  deleted if new) when the patch touches them, and flagged.
* pytest configuration (``pytest.ini``, ``[pytest]`` in ``tox.ini``, ``[tool:pytest]`` in
  ``setup.cfg``, ``[tool.pytest.ini_options]`` in ``pyproject.toml``) is never read from the
  patched tree: pytest runs with ``-c`` on a copy of the *base* tree's config kept outside the
  workspace. A patch that changes such a section is flagged.
* Held-out tests are force-restored after the patch, owned by root and bind-mounted read-only.
"""

from __future__ import annotations

import configparser
import os
import shutil
import stat
import tomllib
from pathlib import Path

from dockyard.sandbox.paths import UnsafePath, force_write, remove_any, resolve_in

NEUTRALISED = {"conftest.py", "sitecustomize.py", "usercustomize.py"}
CONFIG_FILES = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


def is_neutralised(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name in NEUTRALISED or name.endswith(".pth")


def pytest_section(path: Path) -> str | None:
    """The pytest-relevant part of a config file (``None`` when absent)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
        text = path.read_text(errors="replace")
    except OSError:
        return None
    name = path.name
    try:
        if name == "pytest.ini":
            return text
        if name == "pyproject.toml":
            sect = tomllib.loads(text).get("tool", {}).get("pytest")
            return None if sect is None else repr(sect)
        cp = configparser.ConfigParser(interpolation=None)
        cp.read_string(text)
        key = "pytest" if name == "tox.ini" else "tool:pytest"
        return repr(dict(cp[key])) if cp.has_section(key) else None
    except (tomllib.TOMLDecodeError, configparser.Error, UnicodeError):
        return text  # unparseable: compare raw


def revert(ws: Path, base: Path, rel: str, uid: int) -> None:
    """Put ``rel`` back as it is in ``base`` (delete it if the base has none)."""
    try:
        target = resolve_in(ws, rel)
    except UnsafePath:
        target = None
    src = base / rel
    if os.path.isfile(src) and not os.path.islink(src):
        force_write(ws, rel, src.read_bytes(), uid=uid, gid=uid, mode=0o644)
    elif target is not None:
        remove_any(target)


def trusted_pytest_config(base: Path, dest_dir: Path) -> str:
    """Copy the base tree's pytest config into ``dest_dir``; return its file name."""
    for name in CONFIG_FILES:
        p = base / name
        if pytest_section(p) is not None:
            shutil.copyfile(p, dest_dir / name)
            return name
    (dest_dir / "pytest.ini").write_text("[pytest]\n")
    return "pytest.ini"


def check_touched(ws: Path, base: Path, touched: list[str], uid: int) -> list[str]:
    """Neutralise protected files among ``touched``; return the flagged paths."""
    flagged: list[str] = []
    for rel in touched:
        if is_neutralised(rel):
            before = (base / rel).read_bytes() if (base / rel).is_file() else None
            now_p = ws / rel
            now = now_p.read_bytes() if now_p.is_file() and not now_p.is_symlink() else None
            if before != now:
                revert(ws, base, rel, uid)
                flagged.append(rel)
        elif rel.rsplit("/", 1)[-1] in CONFIG_FILES and pytest_section(
            base / rel
        ) != pytest_section(ws / rel):
            flagged.append(rel)
    return flagged
