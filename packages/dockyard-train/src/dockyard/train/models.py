"""Where a config's model names point: a local folder, or a cached Hugging Face Hub snapshot.

What the pre-flight (:mod:`dockyard.train.preflight`) and the drivers' own checks resolve model
keys with (``policy.model_name``, teachers, judges), without downloading anything.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from huggingface_hub import try_to_load_from_cache


def hub_cache() -> Path:
    """The Hugging Face hub cache as this process's environment names it (read per call)."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def cached_snapshot(repo_id: str, cache: Path) -> Path | None:
    """The cached snapshot folder of Hub model ``repo_id`` (its ``main`` revision) that holds a
    ``config.json``, else None (huggingface_hub's own cache lookup; nothing is downloaded)."""
    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache)
    return Path(found).parent if isinstance(found, str) else None


def offline_reason() -> str | None:
    """Why this machine cannot download from the Hub (None: it can)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var} is set"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    return None if _reachable(host, port) else f"{host}:{port} does not answer"


@functools.cache
def _reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def _looks_local(name: str) -> bool:
    """A path rather than a Hub id (``org/name``, or a legacy ``name``)."""
    return name.startswith(("/", ".", "~")) or name.endswith("/") or name.count("/") > 1


def resolve_model(key: str, name: str) -> tuple[Path | None, list[str]]:
    """The local folder that ``name`` (at config key ``key``) is, or its cached Hub snapshot;
    (None, problems) where there is none. A Hub name that is neither cached nor downloadable
    here is a problem; one this machine can download is (None, [])."""
    folder = Path(name).expanduser()
    if folder.is_dir():
        return folder, []
    if folder.exists():
        return None, [f"{key}: {name!r} is a file, not a model folder"]
    if _looks_local(name):
        where = "" if folder.is_absolute() else f" (relative to {Path.cwd()})"
        return None, [f"{key}: no folder {os.path.normpath(name)!r}{where}"]
    cache = hub_cache()
    snapshot = cached_snapshot(name, cache)
    if snapshot is not None:
        return snapshot, []
    why = offline_reason()
    if why is None:
        return None, []
    return None, [
        f"{key}: cannot download {name!r} here; give a local path or a populated HF cache "
        f"({why}; {cache} has no {name})"
    ]
