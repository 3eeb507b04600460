"""Base roots: a Debian release built from Debian's archive with ``mmdebstrap``, cached.

``debian:<release>`` is ``mmdebstrap --variant=minbase`` plus ``ca-certificates`` and ``tmux``
(the sandbox's terminal tool runs tmux inside the image); ``python:<release>`` adds
``python3``, ``python3-pip``, ``python3-venv`` and ``python-is-python3``, and removes the
interpreter's ``EXTERNALLY-MANAGED`` marker, so ``pip install`` works as root as it does in
Docker's ``python`` images. apt is configured as in Docker's Debian images (no package caches
kept in layers). The host's extra trust anchors (:func:`extra_cas`) are installed
into every root (part of the key). The release is one of :data:`spec.RELEASES`; which Docker Hub tag
maps to which is the front end's table (e.g. ``dockyard.envs.harbor.bases``).

mmdebstrap runs as the service (host root, ``--mode=root``, the host's network: this is the
operator's action, on Debian's signed packages; a task only picks a name from the fixed set)
and writes a tarball, which the build jail (``jail_main.py``, op ``unpack``) unpacks as root of
its user namespace, so the root's files are owned by ``uid_base + id`` like every layer above
it. Cached under ``<store>/bases/<key>/root`` (key: release, package set, mirror, version),
built once per key under a lock; ``ok`` marks a complete one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from dockyard.sandbox.layers.spec import RELEASES

BASES_VERSION = "3"
MIRROR = os.environ.get("DOCKYARD_DEBIAN_MIRROR", "http://deb.debian.org/debian")
COMMON = ("ca-certificates", "tmux")
PYTHON = ("python3", "python3-pip", "python3-venv", "python-is-python3")
MMDEBSTRAP_TIMEOUT_S = 1800.0
UID_BASE = 1_000_000  # build namespaces map ids 0..UID_COUNT-1 here (outside the task uid pool)
UID_COUNT = 65536
EXTRA_CA_DIR = Path("/usr/local/share/ca-certificates")


class BaseError(Exception):
    """A base root could not be built (the log says why); not a verdict of any task."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


def packages(base: str) -> tuple[str, ...]:
    kind, _, _ = base.partition(":")
    return COMMON + (PYTHON if kind == "python" else ())


def extra_cas() -> list[Path]:
    """The host's own trust anchors (``/usr/local/share/ca-certificates/*.crt``: an operator's
    TLS-intercepting egress, an internal mirror's CA), installed into every base root so that
    pip / apt / curl inside images trust what the host trusts."""
    return (
        sorted(p for p in EXTRA_CA_DIR.glob("*.crt") if p.is_file())
        if EXTRA_CA_DIR.is_dir()
        else []
    )


def base_key(base: str) -> str:
    kind, _, release = base.partition(":")
    if kind not in ("debian", "python") or release not in RELEASES:
        raise ValueError(f"base {base!r}: not a Debian base this service builds")
    cas = [hashlib.sha256(p.read_bytes()).hexdigest() for p in extra_cas()]
    blob = "|".join([BASES_VERSION, release, ",".join(packages(base)), MIRROR, *cas])
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class Bases:
    """``<dir>/<key>/root`` for each base name; ``unpack(tar, root)`` is the store's jail."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o711)
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def path(self, base: str) -> Path:
        return self.dir / base_key(base) / "root"

    def ready(self, base: str) -> bool:
        return (self.dir / base_key(base) / "ok").exists()

    def get(self, base: str, unpack, log: list[str]) -> Path:
        """The base's root, built first if needed. ``unpack(tar, root)`` unpacks a tarball
        into an empty root dir as the build namespace's root (raises BaseError)."""
        key = base_key(base)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        entry = self.dir / key
        with lock, _flock(self.dir / f".{key}.lock"):  # and other services sharing the store
            if (entry / "ok").exists():
                os.utime(entry / "ok")
                return entry / "root"
            if shutil.which("mmdebstrap") is None:
                raise BaseError(
                    f"base {base}: mmdebstrap is not installed on the sandbox host "
                    "(apt-get install -y mmdebstrap)"
                )
            shutil.rmtree(entry, ignore_errors=True)
            entry.mkdir(mode=0o711)
            tar = entry / "root.tar"
            t0 = time.monotonic()
            self._mmdebstrap(base, tar, log)
            root = entry / "root"
            unpack(tar, root)
            tar.unlink()
            _docker_apt_clean(root)
            if base.startswith("python:"):
                _docker_python_layout(root)
            took = time.monotonic() - t0
            meta = {"base": base, "seconds": round(took, 2), "bytes": _du(root)}
            (entry / "meta.json").write_text(json.dumps(meta))
            (entry / "ok").write_text(base)
            log.append(f"## base {base}: built from {MIRROR} in {took:.1f} s\n")
            return root

    def _mmdebstrap(self, base: str, tar: Path, log: list[str]) -> None:
        release = base.partition(":")[2]
        hooks = []
        if extra_cas():
            hooks = [
                f"--customize-hook=copy-in {' '.join(str(p) for p in extra_cas())} /usr/local/share/ca-certificates/",
                "--customize-hook=chroot \"$1\" update-ca-certificates",
            ]  # fmt: skip
        argv = [
            "mmdebstrap", "--mode=root", "--variant=minbase", "--format=tar",
            "--skip=output/dev", f"--include={','.join(packages(base))}", *hooks,
            release, str(tar), MIRROR,
        ]  # fmt: skip
        try:
            r = subprocess.run(
                argv, capture_output=True, text=True, timeout=MMDEBSTRAP_TIMEOUT_S,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            raise BaseError(f"base {base}: mmdebstrap timed out", str(e.stderr or "")) from e
        log.append(f"## base {base}: {' '.join(argv[:-3])} {release} {MIRROR}\n{r.stderr[-4000:]}")
        if r.returncode != 0:
            raise BaseError(f"base {base}: mmdebstrap exited {r.returncode}", r.stderr[-8000:])

    def sizes(self) -> dict[str, int]:
        """Bytes of each built base (measured once, when it was built)."""
        out = {}
        for p in self.dir.iterdir():
            if (p / "ok").exists():
                try:
                    out[p.name] = int(json.loads((p / "meta.json").read_text())["bytes"])
                except (OSError, ValueError, KeyError):
                    out[p.name] = _du(p)
        return out


APT_CLEAN = """\
// As in Docker's Debian images: no .deb or package cache kept in the image's layers.
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""


def _docker_apt_clean(root: Path) -> None:
    """apt as configured in Docker's Debian images (else every ``apt-get update`` layer keeps
    ~90 MB of package caches). A fresh tree nothing runs in: no race."""
    conf = root / "etc/apt/apt.conf.d/docker-clean"
    conf.write_text(APT_CLEAN)
    os.chown(conf, UID_BASE, UID_BASE)


def _docker_python_layout(root: Path) -> None:
    """Docker's ``python`` images keep the interpreter in /usr/local/bin and let root ``pip
    install``: links there to Debian's, the ``EXTERNALLY-MANAGED`` marker removed. Nothing
    runs in this fresh tree yet (no race); the links belong to the image's root."""
    for marker in root.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    versions = sorted(p.name for p in (root / "usr/bin").glob("python3.*") if p.name[7:].isdigit())
    names = ["python3", "python", "pip", "pip3", *versions]
    for name in names:
        link = root / "usr/local/bin" / name
        if (root / "usr/bin" / name).exists() and not os.path.lexists(link):
            os.symlink(f"/usr/bin/{name}", link)
            os.lchown(link, UID_BASE, UID_BASE)


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _du(path: Path) -> int:
    """Bytes on disk under ``path`` (links not followed; only called on still trees)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, n)).st_blocks * 512
    return total
