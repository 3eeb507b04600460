"""Fetch pure-Python sdists from PyPI into a local cache, and unpack them.

Only the package's *name, version and sha256* are committed to this repository (in task
manifests); the source itself is downloaded on first use into ``cache_dir()``
(``$DOCKYARD_CACHE/sdists``, default ``~/.cache/dockyard/sdists``) and checked against the
recorded sha256 every time it is used.

The download goes through PyPI's JSON API (``https://pypi.org/pypi/NAME/json``) with httpx;
``pip download --no-deps --no-binary :all: NAME==VERSION -d "$(cache dir)"`` fills the same
cache by hand on a machine where only pip reaches the index.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import zipfile
from pathlib import Path
from urllib.parse import urljoin

import httpx

PYPI = os.environ.get("DOCKYARD_PYPI_URL", "https://pypi.org")


def cache_dir() -> Path:
    root = os.environ.get("DOCKYARD_CACHE") or os.path.join(Path.home(), ".cache", "dockyard")
    d = Path(root) / "sdists"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _cached(name: str, version: str) -> Path | None:
    d = cache_dir()
    stems = {
        f"{n}-{version}"
        for n in (name, name.replace("-", "_"), _norm(name), _norm(name).replace("-", "_"))
    }
    for ext in (".tar.gz", ".zip"):
        for stem in stems:
            p = d / f"{stem}{ext}"
            if p.exists():
                return p
    return None


def fetch_sdist(
    name: str, version: str, sha256: str | None = None, timeout_s: float = 60.0
) -> Path:
    """The path of ``name==version``'s sdist in the cache, downloading it if needed.

    Raises:
        RuntimeError: the package/version has no sdist on PyPI, the network is unavailable
            (the message says how to fill the cache by hand), or the sha256 does not match.
    """
    path = _cached(name, version)
    if path is None:
        url = f"{PYPI}/pypi/{_norm(name)}/json"
        try:
            resp = httpx.get(url, timeout=timeout_s, follow_redirects=True)
            resp.raise_for_status()
            files = resp.json()["releases"].get(version) or []
            sdists = [f for f in files if f.get("packagetype") == "sdist"]
            if not sdists:
                raise RuntimeError(
                    f"{name}=={version}: no sdist on PyPI (files: {[f['filename'] for f in files]})"
                )
            info = sdists[0]
            data = httpx.get(urljoin(url, info["url"]), timeout=timeout_s, follow_redirects=True)
            data.raise_for_status()
        except httpx.HTTPError as e:
            raise RuntimeError(
                f"could not download the sdist of {name}=={version} ({e}); fill the cache by hand: "
                f"pip download --no-deps --no-binary :all: {name}=={version} -d {cache_dir()}"
            ) from e
        got = hashlib.sha256(data.content).hexdigest()
        if got != info["digests"]["sha256"]:
            raise RuntimeError(f"{name}=={version}: download corrupted (sha256 {got})")
        path = cache_dir() / info["filename"]
        tmp = path.with_suffix(path.suffix + ".part")
        tmp.write_bytes(data.content)
        tmp.replace(path)
    if sha256 is not None and _sha256(path) != sha256:
        raise RuntimeError(
            f"{path}: sha256 {_sha256(path)} does not match the manifest's {sha256}; delete the file to refetch"
        )
    return path


def read_sdist(path: Path) -> dict[str, bytes]:
    """The regular files of an sdist, keyed by path relative to its top folder.

    Raises:
        ValueError: a member escapes the archive (absolute path or ``..``).
    """
    files: dict[str, bytes] = {}
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            members = [(i.filename, z.read(i)) for i in z.infolist() if not i.is_dir()]
    else:
        with tarfile.open(path, "r:gz") as t:
            members = []
            for m in t.getmembers():
                if m.isfile():
                    f = t.extractfile(m)
                    assert f is not None
                    members.append((m.name, f.read()))
    for name, data in members:
        parts = Path(name).parts
        if name.startswith("/") or ".." in parts or len(parts) < 2:
            raise ValueError(f"{path}: unsafe or top-level member {name!r}")
        files["/".join(parts[1:])] = data
    return files


def write_tree(files: dict[str, bytes], dest: Path) -> None:
    for rel, data in files.items():
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def tarball(files: dict[str, bytes]) -> bytes:
    """A deterministic ``.tar.gz`` of ``files`` (sorted, fixed mtimes) — the sandbox's repo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for rel in sorted(files):
            info = tarfile.TarInfo(rel)
            info.size = len(files[rel])
            info.mtime = 0
            info.mode = 0o644
            t.addfile(info, io.BytesIO(files[rel]))
    return gzip.compress(buf.getvalue(), compresslevel=6, mtime=0)
