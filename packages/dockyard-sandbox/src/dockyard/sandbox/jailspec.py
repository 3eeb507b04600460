"""What one jail runs: :class:`JailSpec`.

Its own module because two sides read it: the launcher (``jail.py``: the bwrap chain, the gate,
the wait) and the isolation backends (``isolation.py``: the ``unshare`` and ``none`` chains);
``jail.py`` imports ``isolation.py``, so the spec lives below both. ``jail.JailSpec`` is the
same class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dockyard.sandbox.models import Limits
from dockyard.sandbox.toolchain import WORKSPACE
from dockyard.sandbox.zygote import Zygote


@dataclass
class JailSpec:
    argv: list[str]
    workspace: Path
    uid: int
    limits: Limits
    timeout_s: float
    network: bool = False
    cwd: str = WORKSPACE
    ro_binds: list[tuple[str, str]] = field(default_factory=list)  # (host, inside)
    # (host, inside), writable: operator-made dirs only (a tty socket dir, verifier logs, a
    # provisioning prefix); bwrap backend only (see provision.py / tty.py)
    binds: list[tuple[str, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    report: bool = False  # pass a pipe at fd 3 for the trusted report
    name: str = "task"
    isolation: str = "bwrap"  # bwrap | unshare | none (see isolation.py)
    # A runner command (``python -I -S -B /opt/dockyard/runner.py ...``) under bwrap runs in a
    # fork of this pre-started interpreter that enters the jail (see zygote_main.py).
    zygote: Zygote | None = None
