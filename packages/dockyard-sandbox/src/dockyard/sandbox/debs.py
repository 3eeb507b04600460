"""Debian packages an environment needs that the sandbox host lacks, provisioned rootless.

``EnvSpec.host_packages`` names Debian packages (``RUN apt-get install -y P…`` of a Harbor
Dockerfile). Those already installed on the host (dpkg's status file) need nothing. The others
are put into the environment's prefix at build time, without root and without touching the host:

1. One jail (:func:`apt_jail`): the build's unprivileged uid, its own network namespace whose
   only way out is the build's registry proxy (``egress.py``: the host's apt mirrors, PyPI and
   the operator's ``--registry`` hosts, ports 80/443; only when the operator runs the service
   with ``--allow-network``), the host's dpkg status file read-only
   at /opt/dpkg-status, and a fixed command and environment (nothing of the task's spec
   reaches it but the validated package names, after ``--``; root-only files such as
   /etc/apt/auth.conf.d stay unreadable). There apt works on private state in the jail's
   /tmp (``Dir::State``/``Dir::Cache``/``Dir::Log`` there, ``Debug::NoLocking``):
   ``apt-get update`` from the host's own sources (``/etc/apt/sources.list*``: the operator's
   mirrors and keys; ``Acquire::http(s)::Proxy`` is the build's proxy, whatever the host sets), ``apt-get -s install --no-install-recommends`` computes
   the closure against what the host has installed, and only packages *new* to the host are
   fetched (``apt-get download``; never an upgrade of a host package, so no host library is ever
   shadowed) and unpacked with ``dpkg-deb -x`` into ``<prefix>/root`` (/opt/env/root). No
   maintainer script runs, ever: that is what makes it rootless, and its limit.
2. On the host, before anything else runs in the prefix, :func:`sanitize` walks that tree
   without following links: set-uid/set-gid bits are cleared; device nodes, FIFOs and sockets
   are refused; absolute symlinks whose target the packages themselves shipped
   (``/usr/lib/x/a -> /usr/lib/x/b``) are rewritten to point into the prefix
   (``/opt/env/root/usr/lib/x/b``); the rest are kept, and resolve inside the jail only, to the
   read-only system the jail already sees (e.g. ``/etc/alternatives/*``, which no postinst
   created: such links dangle). The provisioner never follows a link of a build on the host.

Jails of the environment then get (:func:`deb_env`) the packages' ``bin``/``sbin`` dirs
*after* the system's on ``PATH`` (the host's tools and the service's toolchain always win) and
their library dirs on ``LD_LIBRARY_PATH``::

    PATH            ...:/opt/env/root/usr/local/bin:/opt/env/root/usr/bin:/opt/env/root/bin:
                        /opt/env/root/usr/sbin:/opt/env/root/sbin:/opt/env/root/usr/games
    LD_LIBRARY_PATH /opt/env/root/usr/lib/<triplet>:/opt/env/root/lib/<triplet>:
                    /opt/env/root/usr/lib:/opt/env/root/lib

Limits: packages whose postinst matters (alternatives, generated config, users, services) or
that read data from fixed absolute paths outside what their links cover may not work.
"""

from __future__ import annotations

import os
import platform
import re
import stat
import sys
import sysconfig
from pathlib import Path

from dockyard.sandbox import egress
from dockyard.sandbox.envspec import ENV_MOUNT
from dockyard.sandbox.jailspec import JailSpec
from dockyard.sandbox.models import Limits

DEB_ROOT = "root"  # <prefix>/root: the packages' files; /opt/env/root inside jails
DEB_MOUNT = f"{ENV_MOUNT}/{DEB_ROOT}"
DPKG_STATUS = "/var/lib/dpkg/status"
STATUS_MOUNT = "/opt/dpkg-status"  # under /opt: bwrap makes new parents 0700
TRIPLET = sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu"

# exit codes of the script, one per phase (anything else: apt itself, or the jail)
E_UPDATE, E_PLAN, E_DOWNLOAD, E_UNPACK = 10, 11, 12, 13
_SCRIPT = r"""
A=/tmp/apt
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/log" "$A/debs" || exit 13
apt() {
  apt-get -q -o Dir::State="$A" -o Dir::State::Lists="$A/lists" \
    -o Dir::State::status=/opt/dpkg-status -o Dir::Cache="$A/cache" -o Dir::Log="$A/log" \
    -o Debug::NoLocking=1 -o Acquire::Languages=none -o APT::Install-Recommends=false \
    -o Acquire::http::Proxy="$http_proxy" -o Acquire::https::Proxy="$https_proxy" \
    -o Acquire::http::Pipeline-Depth=0 "$@"
}
echo "## apt-get update"
apt update || exit 10
echo "## apt-get -s install $*"
apt -y -s install -- "$@" > "$A/plan" 2>&1; rc=$?
grep -v '^Conf ' "$A/plan"
[ "$rc" = 0 ] || exit 11
new=$(awk '$1 == "Inst" && $3 !~ /^\[/ {print $2}' "$A/plan")
[ -n "$new" ] || { echo "## nothing new to fetch"; exit 0; }
echo "## apt-get download" $new
cd "$A/debs" && apt download -- $new || exit 12
for d in "$A"/debs/*.deb; do
  echo "## dpkg-deb -x ${d##*/}"
  dpkg-deb -x "$d" /opt/env/root || exit 13
done
"""
_WHY = {
    E_UPDATE: "apt-get update failed: the host's apt mirrors could not be reached",
    E_PLAN: "apt cannot resolve them against the host's mirrors",
    E_DOWNLOAD: "downloading them failed",
    E_UNPACK: "unpacking them failed (out of room?)",
}


class DebError(Exception):
    """A package's files cannot be used as they are (a device node, a FIFO, a socket)."""


def missing_packages(wanted: list[str], installed: set[str]) -> list[str]:
    """``wanted`` minus what the host has, in order (``pkg:arch`` counts as ``pkg``)."""
    return [p for p in wanted if p.split(":", 1)[0] not in installed]


def apt_jail(
    packages: list[str],
    workspace: Path,
    prefix: Path,
    uid: int,
    limits: Limits,
    timeout_s: float,
    proxy: tuple[str, str] | None = None,
    python: str = sys.executable,
) -> JailSpec:
    """The jail that fetches and unpacks ``packages`` into ``prefix/root`` (module doc, step 1).
    The names are validated Debian package names (``EnvSpec``): they follow ``--``. ``proxy``:
    the bind of the build's registry proxy (``egress.Proxy.bind``; without it, no network);
    ``python`` runs its forwarder in the jail."""
    for p in packages:
        if not re.fullmatch(r"[a-z0-9][a-z0-9+.\-]*(?::[a-z0-9]+)?", p):
            raise ValueError(f"{p!r} is not a Debian package name")
    argv = ["/bin/sh", "-c", _SCRIPT, "apt-provision", *packages]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}
    return JailSpec(
        argv=egress.wrap_argv(python, argv) if proxy else argv,
        workspace=workspace,
        uid=uid,
        limits=limits,
        timeout_s=timeout_s,
        network=False,
        cwd="/tmp",
        ro_binds=[(DPKG_STATUS, STATUS_MOUNT), *([proxy] if proxy else [])],
        binds=[(str(prefix), ENV_MOUNT)],
        env=env | egress.jail_env() if proxy else env,
        name="prov-apt",
    )


def failure(exit_code: int | None, packages: list[str], output: str, limit: str = "") -> str:
    """The message of a failed apt jail (``limit``: it timed out...): what failed, apt's own
    errors, the next step."""
    why = limit or _WHY.get(exit_code or 0, f"the apt jail exited {exit_code}")
    errors = [ln.strip() for ln in output.splitlines() if ln.startswith(("E:", "Err:"))]
    detail = f" ({'; '.join(errors[-3:])[:400]})" if errors else ""
    return (
        f"apt packages {packages}: {why}{detail}. The task is not runnable on this sandbox "
        f"host as it is: install them on the host (apt-get install -y {' '.join(packages)}), "
        "fix the host's apt sources or network, or drop them from the task"
    )


def sanitize(root: Path) -> tuple[int, int]:
    """Make an unpacked tree safe to freeze and mount (module doc, step 2); links are never
    followed. Returns (set-id bits cleared, links rewritten); raises :class:`DebError`."""
    entries: dict[str, os.stat_result] = {}
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            entries[os.path.relpath(p, root)] = os.lstat(p)
    cleared = rewritten = 0
    for rel, st in entries.items():
        p = root / rel
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(p)
            inside = os.path.normpath(target).lstrip("/")
            if target.startswith("/") and inside in entries:
                p.unlink()
                os.symlink(f"{DEB_MOUNT}/{inside}", p)
                rewritten += 1
        elif stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
                cleared += 1
        else:
            raise DebError(f"{rel}: a device node, FIFO or socket in a package (refused)")
    return cleared, rewritten


def deb_env(path: str) -> dict[str, str]:
    """``PATH`` (``path`` first) and ``LD_LIBRARY_PATH`` of a jail whose environment has
    unpacked packages (module doc)."""
    bins = ("usr/local/bin", "usr/bin", "bin", "usr/sbin", "sbin", "usr/games")
    libs = (f"usr/lib/{TRIPLET}", f"lib/{TRIPLET}", "usr/lib", "lib")
    return {
        "PATH": ":".join([path, *(f"{DEB_MOUNT}/{d}" for d in bins)]),
        "LD_LIBRARY_PATH": ":".join(f"{DEB_MOUNT}/{d}" for d in libs),
    }
