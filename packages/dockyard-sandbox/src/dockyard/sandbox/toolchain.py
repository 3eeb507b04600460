"""The read-only toolchain a sandbox sees: system dirs and the service's own interpreter.

The task runs ``python`` from the service's installation (venv and base prefix), bind-mounted
read-only, so neither the interpreter nor pytest nor the in-sandbox runner can be replaced by
the task (threat 15). The runner files (``dockyard/sandbox/inside``) are mounted at
``/opt/dockyard`` and never imported from the writable workspace.
"""

from __future__ import annotations

import functools
import os
import site
import sys
from pathlib import Path

INSIDE_DIR = Path(__file__).resolve().parent / "inside"
RUNNER_MOUNT = "/opt/dockyard"
WORKSPACE = "/workspace"
TASK_MOUNT = "/opt/dockyard-task"  # trusted per-task inputs (config, held-out tests, calls)

_SYSTEM_DIRS = ("/usr", "/etc", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt/conda")


@functools.cache
def python_prefixes() -> tuple[str, ...]:
    """Directories that make up this interpreter (venv, base prefix, real executable's prefix)."""
    dirs: set[str] = set()
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        if p:
            dirs.add(os.path.realpath(p))
    exe = Path(os.path.realpath(sys.executable))
    dirs.add(str(exe.parent.parent))
    # Drop nested duplicates and anything under the system dirs (already mounted).
    out = sorted(dirs)
    keep = [d for d in out if not any(d != o and d.startswith(o + "/") for o in out)]
    return tuple(d for d in keep if not any(d == s or d.startswith(s + "/") for s in _SYSTEM_DIRS))


def system_dirs() -> tuple[str, ...]:
    """Host system directories every sandbox sees read-only (when they exist)."""
    return _SYSTEM_DIRS


def python_executable() -> str:
    """Path of the interpreter inside the sandbox (the same path as outside)."""
    return sys.executable


def bwrap_toolchain_args() -> list[str]:
    """bwrap arguments mounting the system dirs and the interpreter read-only."""
    return list(_bwrap_toolchain_args())


@functools.cache
def _bwrap_toolchain_args() -> tuple[str, ...]:
    args: list[str] = []
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    made: set[str] = set()
    for d in python_prefixes():
        # parents (e.g. a 0700 /root) are created traversable; only the prefix itself is mounted.
        parts = d.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            parent = "/" + "/".join(parts[:i])
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", parent]
        args += ["--ro-bind", d, d]
    args += ["--perms", "0755", "--dir", "/opt", "--ro-bind", str(INSIDE_DIR), RUNNER_MOUNT]
    return tuple(args)


@functools.cache
def site_dirs() -> str:
    """The interpreter's site-packages, for the runner (which starts with ``-S``)."""
    return ":".join(p for p in site.getsitepackages() if os.path.isdir(p))


def sandbox_path_env() -> str:
    bindir = os.path.dirname(sys.executable)
    return f"{bindir}:/usr/local/bin:/usr/bin:/bin"


def runner_argv(python: str | None = None) -> list[str]:
    """The in-sandbox runner's command line, before its mode and arguments: on the service's
    interpreter (``-S``: its site dirs are appended by the runner from ``DOCKYARD_SITE``), or on
    ``python``, an image's, with that interpreter's own site dirs (``TestsSpec.python``)."""
    if python is not None:
        return [python, "-I", "-B", f"{RUNNER_MOUNT}/runner.py"]
    return [python_executable(), "-I", "-S", "-B", f"{RUNNER_MOUNT}/runner.py"]
