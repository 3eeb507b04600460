"""A PyPI project's binaries for one platform, out of its wheel, for the installer table.

:class:`Binaries` resolves a project on PyPI's simple index (PEP 691 JSON), picks the wheel of a
platform (``manylinux_*_<arch>`` for glibc, ``musllinux_*_<arch>`` for musl; not yanked),
downloads it by HTTPS with the host's public roots through checked connections (``via.resolve``:
the proxy's own allowlist and address checks, so the service reaches nothing a jail could not),
verifies the index's sha256, and copies out the ``<name>-<version>.data/scripts/<binary>``
members named by the table (0755). Results are cached per process under a 0700 directory,
built in a temporary directory and renamed into place (one build per key at a time).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import http.client
import json
import re
import shutil
import socket
import ssl
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any, ClassVar, Protocol
from urllib.parse import urljoin, urlsplit

from packaging.version import InvalidVersion, Version

from dockyard.sandbox.egress.http1 import Refused

INDEX = "https://pypi.org/simple/"
TIMEOUT_S = 60.0
MAX_INDEX = 64 << 20
MAX_WHEEL = 512 << 20
INDEX_TTL_S = 300.0  # an install script and its binaries ask for the same page within seconds
_SCRIPT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


class Resolver(Protocol):
    def resolve(self, host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]: ...


class _Checked(http.client.HTTPSConnection):
    """An HTTPS connection opened only to an address ``via`` checked."""

    def __init__(self, host: str, via: Resolver) -> None:
        super().__init__(host, 443, timeout=TIMEOUT_S)
        self._via = via
        self._ctx = ssl.create_default_context()

    def connect(self) -> None:
        err: OSError | None = None
        for _fam, sa in self._via.resolve(self.host, 443):
            try:
                raw = socket.create_connection((sa[0], sa[1]), timeout=self.timeout)
            except OSError as e:
                err = e
                continue
            self.sock = self._ctx.wrap_socket(raw, server_hostname=self.host)
            return
        raise OSError(f"{self.host}: cannot connect ({err})")


def https_get(via: Resolver, url: str, dest: Path | None, cap: int, accept: str = "*/*") -> bytes:
    """GET ``url`` (≤ 3 redirects, each host checked); the body, or written to ``dest``."""
    for _ in range(4):
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise Refused(502, f"{url[:200]}: only https URLs are fetched")
        conn = _Checked(parts.hostname, via)
        try:
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.request("GET", path or "/", headers={"Accept": accept, "User-Agent": "dockyard"})
            r = conn.getresponse()
            if r.status in (301, 302, 303, 307, 308) and r.getheader("Location"):
                url = urljoin(url, r.getheader("Location", ""))
                continue
            if r.status != 200:
                raise Refused(502, f"{url[:200]}: HTTP {r.status}")
            return _body(r, dest, cap, url)
        finally:
            conn.close()
    raise Refused(502, f"{url[:200]}: too many redirects")


def _body(r: http.client.HTTPResponse, dest: Path | None, cap: int, url: str) -> bytes:
    size = 0
    out = bytearray()
    with contextlib.ExitStack() as stack:
        f = stack.enter_context(dest.open("wb")) if dest else None
        while chunk := r.read(1 << 16):
            size += len(chunk)
            if size > cap:
                raise Refused(502, f"{url[:200]}: over {cap >> 20} MiB")
            if f is not None:
                f.write(chunk)
            else:
                out += chunk
    return bytes(out)


def platform_ok(filename: str, arch: str, libc: str) -> bool:
    """Whether wheel ``filename`` runs on ``arch`` with ``libc`` (``gnu``/``musl``)."""
    tags = filename[: -len(".whl")].split("-")[-1].split(".")
    prefix = "manylinux" if libc == "gnu" else "musllinux"
    return any(t.startswith(prefix) and t.endswith(f"_{arch}") for t in tags)


class Binaries:
    """The per-process cache of projects' binaries (module doc)."""

    _shared: ClassVar[Binaries | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[tuple[str, ...], threading.Lock] = {}
        self._index: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    @classmethod
    def shared(cls) -> Binaries:
        with cls._shared_lock:
            if cls._shared is None:
                root = Path(tempfile.mkdtemp(prefix="dockyard-egress-bin-"))  # 0700
                atexit.register(shutil.rmtree, root, True)
                cls._shared = cls(root)
            return cls._shared

    def index(self, via: Resolver, project: str) -> dict[str, Any]:
        """The project's simple-index page (JSON), reused for :data:`INDEX_TTL_S`."""
        with self._lock:
            hit = self._index.get(project)
        if hit and time.monotonic() - hit[0] < INDEX_TTL_S:
            return hit[1]
        body = https_get(
            via, f"{INDEX}{project}/", None, MAX_INDEX, "application/vnd.pypi.simple.v1+json"
        )
        page = json.loads(body)
        with self._lock:
            self._index[project] = (time.monotonic(), page)
        return page

    def latest(self, via: Resolver, project: str) -> str:
        """The newest final release of ``project`` on the index."""
        versions = []
        for v in self.index(via, project).get("versions", []):
            try:
                parsed = Version(v)
            except InvalidVersion:
                continue
            if not parsed.is_prerelease:
                versions.append((parsed, v))
        if not versions:
            raise Refused(502, f"PyPI lists no release of {project}")
        return max(versions)[1]

    def get(self, via: Resolver, project: str, version: str, arch: str, libc: str) -> Path:
        """The directory holding ``project``'s scripts at ``version`` for the platform."""
        key = (project, version, f"{arch}-{libc}")
        done = self.root.joinpath(*key)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if not done.is_dir():
                self._build(via, key, arch, libc, done)
        return done

    def _build(self, via: Resolver, key: tuple[str, ...], arch: str, libc: str, done: Path) -> None:
        project, version, plat = key
        files = [
            f for f in self.index(via, project).get("files", [])
            if f.get("filename", "").endswith(".whl") and not f.get("yanked")
            and f["filename"].split("-")[1:2] == [version] and platform_ok(f["filename"], arch, libc)
        ]  # fmt: skip
        if not files:
            raise Refused(404, f"PyPI has no {project} {version} wheel for {plat}")
        wheel = files[0]
        tmp = Path(tempfile.mkdtemp(dir=self.root))
        try:
            path = tmp / "wheel"
            https_get(via, urljoin(INDEX, wheel["url"]), path, MAX_WHEEL)
            with path.open("rb") as f:
                digest = hashlib.file_digest(f, "sha256").hexdigest()
            if digest != wheel.get("hashes", {}).get("sha256"):
                raise Refused(502, f"{wheel['filename']}: sha256 does not match PyPI's index")
            name, ver = wheel["filename"].split("-")[:2]
            out = tmp / "bin"
            out.mkdir()
            with zipfile.ZipFile(path) as z:
                prefix = f"{name}-{ver}.data/scripts/"
                for m in z.infolist():
                    script = m.filename[len(prefix) :]
                    if m.filename.startswith(prefix) and _SCRIPT.fullmatch(script):
                        with z.open(m) as src, (out / script).open("wb") as dst:
                            shutil.copyfileobj(src, dst)
                        (out / script).chmod(0o755)
            done.parent.mkdir(parents=True, exist_ok=True)
            out.rename(done)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
