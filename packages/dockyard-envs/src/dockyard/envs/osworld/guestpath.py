"""OSWorld guest paths onto the session's workspace.

OSWorld's guest is a VM whose user home is ``/home/user``; here it is the sandbox session's
workspace. A task path is relative to the workspace, or absolute under ``/workspace`` or
``/home/user`` (mapped onto it); anything else is refused (never a host path).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

_HOMES = ("/workspace/", "/home/user/")


def workspace_path(p: Any) -> str:
    """An OSWorld guest path -> a path relative to the session's workspace (ValueError)."""
    if not isinstance(p, str) or not p:
        raise ValueError(f"a path must be a non-empty string, got {p!r}")
    for home in _HOMES:
        if p.startswith(home):
            p = p[len(home) :]
            break
    else:
        if p.startswith("/") or p.startswith("~"):
            raise ValueError(f"path {p!r} is outside the guest's home (/home/user, /workspace)")
    parts = PurePosixPath(p).parts
    if not parts or ".." in parts:
        raise ValueError(f"path {p!r} leaves the workspace")
    return str(PurePosixPath(*parts))
