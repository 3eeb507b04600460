"""Isolation backends: ``bwrap`` (default), ``unshare`` (fallback), ``none`` (refused unless asked).

``--isolation auto`` picks bubblewrap when it is installed and works, otherwise util-linux
``unshare`` with a loud warning (at start-up, in the log and in ``/healthz``). ``none`` runs
tasks with no namespaces at all and is refused unless the operator also passes
``--i-understand-this-is-unsafe``; it is flagged just as loudly. What each mode guarantees is
in ``docs/sandbox.md`` ("Isolation modes").

The backends only differ in the innermost part of the launch chain (see ``jail.py``): the
cgroups, rlimits, unprivileged uid (``setpriv``), wall-clock kill and output capture are shared.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from dockyard.sandbox.jailspec import JailSpec
from dockyard.sandbox.toolchain import (
    INSIDE_DIR,
    RUNNER_MOUNT,
    WORKSPACE,
    python_prefixes,
    system_dirs,
)

UNSAFE_FLAG = "--i-understand-this-is-unsafe"
SETUP_SCRIPT = Path(__file__).resolve().parent / "unshare_setup.py"


class Mode(StrEnum):
    auto = "auto"
    bwrap = "bwrap"
    unshare = "unshare"
    none = "none"


class IsolationError(Exception):
    """The requested isolation cannot be provided (message names the fix)."""


@dataclass(frozen=True)
class Isolation:
    mode: Mode  # never ``auto``
    warning: str | None = None

    def describe(self) -> dict[str, object]:
        return {"mode": str(self.mode), "warning": self.warning}


UNSHARE_WARNING = (
    "!!! ISOLATION FALLBACK: bubblewrap cannot build a jail here ({why}); tasks run under "
    "util-linux `unshare` (own pid/mount/ipc/uts/net namespaces, read-only toolchain, "
    "unprivileged uid, cgroups). This path is less battle-tested than bubblewrap: install it "
    "(apt-get install -y bubblewrap), or in a container let it mount /proc and set the hostname "
    "(docs/deployment.md, Sandbox pod hardening)."
)
NONE_WARNING = (
    "!!! NO ISOLATION (--isolation none --i-understand-this-is-unsafe): tasks run on the host "
    "file system and network with no namespaces. Only the unprivileged uid (when the service is "
    "root), rlimits, cgroups and the wall-clock kill remain. Never use this for untrusted code."
)


def _bwrap_binary() -> str:
    return os.environ.get("DOCKYARD_SANDBOX_BWRAP", "bwrap")


@functools.cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot build the service's jails here, in its own words (None: it can).

    The probe makes what every jail makes — pid, net, ipc and uts namespaces, the hostname, a
    fresh ``/proc`` and ``/dev`` —: in a container whose ``/proc`` is masked, or whose seccomp
    profile denies ``sethostname`` without a capability (podman's default), bwrap can create
    namespaces and still fail every task."""
    exe = shutil.which(_bwrap_binary())
    if exe is None:
        return f"{_bwrap_binary()} is not installed"
    args = [exe, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--hostname", "sandbox", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
            "--", "/bin/true"]  # fmt: skip
    if os.geteuid() != 0:
        args.insert(1, "--unshare-user")
    try:
        r = subprocess.run(args, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{exe}: {e}"
    if r.returncode == 0:
        return None
    return r.stderr.decode(errors="replace").strip()[:300] or f"{exe}: exit status {r.returncode}"


def bwrap_works() -> bool:
    return bwrap_problem() is None


@functools.cache
def unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    args = ["unshare", "--pid", "--fork", "--mount", "--net", "--ipc", "--uts", "/bin/true"]
    if os.geteuid() != 0:
        args.insert(1, "--map-root-user")
    try:
        return subprocess.run(args, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def resolve(requested: str, i_understand_unsafe: bool = False) -> Isolation:
    """The backend for ``requested`` (auto | bwrap | unshare | none), or IsolationError."""
    try:
        mode = Mode(requested)
    except ValueError:
        raise IsolationError(
            f"--isolation {requested!r}: choose one of auto, bwrap, unshare, none"
        ) from None
    if mode == Mode.none:
        if not i_understand_unsafe:
            raise IsolationError(
                f"--isolation none runs untrusted code with NO namespaces; refusing unless you "
                f"also pass {UNSAFE_FLAG}"
            )
        return Isolation(Mode.none, NONE_WARNING)
    if mode in (Mode.auto, Mode.bwrap) and bwrap_works():
        return Isolation(Mode.bwrap)
    if mode == Mode.bwrap:
        raise IsolationError(
            f"--isolation bwrap: bubblewrap cannot build a jail here ({bwrap_problem()}): "
            "apt-get install -y bubblewrap, let it mount /proc and set the hostname in a "
            "container (docs/deployment.md), or pass --isolation unshare"
        )
    if unshare_works():
        return Isolation(Mode.unshare, UNSHARE_WARNING.format(why=bwrap_problem()))
    raise IsolationError(
        "no isolation backend works here: bubblewrap is missing (apt-get install -y bubblewrap) "
        "and util-linux `unshare` cannot create pid/mount/net namespaces (needs root or "
        "unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1)"
    )


def unshare_root() -> str:
    """An empty directory each task's private mount namespace mounts its new root on
    (re-created if a /tmp cleaner removed it)."""
    d = os.path.join(tempfile.gettempdir(), f"dockyard-sandbox-root-{os.geteuid()}")
    os.makedirs(d, mode=0o755, exist_ok=True)
    return d


def fill_memfd(fd: int, data: bytes) -> None:
    """Write ``data`` into the (empty) memfd ``fd`` and rewind it for its reader."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)


def memfd_holding(name: str, data: bytes) -> int:
    """A new memfd (close-on-exec: pass it with ``pass_fds``) holding ``data``, read from 0."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        fill_memfd(fd, data)
    except BaseException:
        os.close(fd)
        raise
    return fd


def unshare_argv(
    spec: JailSpec, env: dict[str, str], inner: list[str], plan_fd: int = -1
) -> list[str]:
    """``unshare ... python -I -S unshare_setup.py --plan-fd N``; ``inner`` is setpriv + the
    command. The plan is written to ``plan_fd`` (an empty memfd the caller passes to the
    chain), not the command line: its first process, pid 1 of the jail, keeps that command line,
    which the task can read (the workspace's host path is in the plan). ``plan_fd`` < 0: the
    plan inline (``unshare_setup.py '<json>'``)."""
    ro: list[list[str]] = []
    symlinks: list[list[str]] = []
    for d in system_dirs():
        if os.path.islink(d):
            symlinks.append([os.readlink(d), d])
        elif os.path.isdir(d):
            ro.append([d, d])
    ro += [[d, d] for d in python_prefixes()]
    ro.append([str(INSIDE_DIR), RUNNER_MOUNT])
    plan = {
        "root": unshare_root(),
        "disk_bytes": spec.limits.disk_mb << 20,
        "ro": ro,
        "symlinks": symlinks,
        "dirs": ["/opt"],
        "rw": [[str(spec.workspace), WORKSPACE]],
        "ro_after": [list(b) for b in spec.ro_binds],
        "hostname": "sandbox",
        "lo_up": not spec.network,
        "cwd": spec.cwd,
        "env": env,
        "argv": inner,
    }
    text = json.dumps(plan, separators=(",", ":"))
    if plan_fd >= 0:
        fill_memfd(plan_fd, text.encode())
    ns = ["--pid", "--fork", "--kill-child", "--mount", "--ipc", "--uts", "--cgroup"]
    if not spec.network:
        ns.append("--net")
    if os.geteuid() != 0:
        ns.insert(0, "--map-root-user")
    return [
        "setpriv",
        "--pdeathsig=KILL",  # like bwrap --die-with-parent
        "--",
        "unshare",
        *ns,
        "--",
        sys.executable,
        "-I",
        "-S",
        str(SETUP_SCRIPT),
        *(["--plan-fd", str(plan_fd)] if plan_fd >= 0 else [text]),
    ]


def check_reachable(work: Path) -> None:
    """``none`` mode: tasks see host paths as their own uid, so the work dir and the in-sandbox
    runner must be reachable by every uid (else every task's runner fails to open and its tests
    read as missing: a misconfigured service would score every answer 0)."""
    if os.geteuid() != 0:
        return
    for what, path, fix in (
        (
            "--work-dir",
            work.resolve(),
            "pass --work-dir under a directory whose parents all have o+x (e.g. chmod o+x, or a "
            "dir under /var/lib)",
        ),
        (
            "the in-sandbox runner",
            INSIDE_DIR.resolve(),
            "install dockyard-sandbox where every uid can read it (its parents need o+x; a "
            "checkout under `mktemp -d`, mode 0700, is not)",
        ),
    ):
        for d in [path, *path.parents]:
            if not os.stat(d).st_mode & 0o001:
                raise IsolationError(
                    f"--isolation none: {d} is not traversable by the task uids (mode "
                    f"{oct(os.stat(d).st_mode & 0o777)}), so {what} ({path}) is out of their "
                    f"reach: {fix}"
                )


def _host_path(arg: str, table: list[tuple[str, str]]) -> str:
    for host, inside in table:
        if arg == inside or arg.startswith(inside + "/"):
            return host + arg[len(inside) :]
    return arg


def none_argv(spec: JailSpec, env: dict[str, str], inner: list[str]) -> list[str]:
    """No namespaces: sandbox paths in argv/cwd/env rewritten to host paths, env cleared."""
    table = sorted(
        [
            *((h, i) for h, i in spec.ro_binds if not i.startswith(WORKSPACE + "/")),
            (str(spec.workspace), WORKSPACE),
            (str(INSIDE_DIR), RUNNER_MOUNT),
        ],
        key=lambda hi: -len(hi[1]),
    )
    ws = str(spec.workspace)
    env = {
        **{k: _host_path(v, table) for k, v in env.items()},
        "HOME": ws,
        "TMPDIR": ws,
        "DOCKYARD_WORKSPACE": ws,
    }
    argv = [_host_path(a, table) for a in inner]
    cwd = _host_path(spec.cwd, table)
    return [
        "setpriv",
        "--pdeathsig=KILL",
        "--",
        "env",
        "-i",
        *(f"{k}={v}" for k, v in env.items()),
        "/bin/sh",
        "-c",
        'cd "$0" && exec "$@"',  # already a new session (the launcher's)
        cwd,
        *argv,
    ]
