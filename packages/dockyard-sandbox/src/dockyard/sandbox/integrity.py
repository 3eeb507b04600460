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
import shutil
import tomllib
from pathlib import Path

from dockyard.sandbox.paths import UnsafePath, check_no_links, force_write, read_file, remove

NEUTRALISED = {"conftest.py", "sitecustomize.py", "usercustomize.py"}
CONFIG_FILES = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


def is_neutralised(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name in NEUTRALISED or name.endswith(".pth")


MAX_CONFIG_BYTES = 1 << 20


def file_bytes(root: Path, rel: str) -> bytes | None:
    """The regular file ``root/rel`` read by fds (paths.py), None if it is missing, not a
    regular file, reached through a link, or too large to be a config (then compared raw)."""
    try:
        return read_file(root, rel, MAX_CONFIG_BYTES)
    except (FileNotFoundError, NotADirectoryError, UnsafePath):
        return None


def pytest_section(root: Path, rel: str) -> str | None:
    """The pytest-relevant part of the config file ``root/rel`` (``None`` when absent)."""
    raw = file_bytes(root, rel)
    if raw is None:
        return None
    text = raw.decode(errors="replace")
    name = rel.rsplit("/", 1)[-1]
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
    original = file_bytes(base, rel)
    if original is not None:
        force_write(ws, rel, original, uid=uid, gid=uid, mode=0o644)
        return
    try:
        check_no_links(ws, rel)
    except UnsafePath:
        return  # under a link: nothing of the tree is there to remove
    remove(ws, rel)


def trusted_pytest_config(base: Path, dest_dir: Path) -> str:
    """Copy the base tree's pytest config into ``dest_dir``; return its file name."""
    for name in CONFIG_FILES:
        if pytest_section(base, name) is not None:
            shutil.copyfile(base / name, dest_dir / name)
            return name
    (dest_dir / "pytest.ini").write_text("[pytest]\n")
    return "pytest.ini"


def check_touched(ws: Path, base: Path, touched: list[str], uid: int) -> list[str]:
    """Neutralise protected files among ``touched``; return the flagged paths."""
    flagged: list[str] = []
    for rel in touched:
        if is_neutralised(rel):
            if file_bytes(base, rel) != file_bytes(ws, rel):
                revert(ws, base, rel, uid)
                flagged.append(rel)
        elif rel.rsplit("/", 1)[-1] in CONFIG_FILES and pytest_section(base, rel) != pytest_section(
            ws, rel
        ):
            flagged.append(rel)
    return flagged
