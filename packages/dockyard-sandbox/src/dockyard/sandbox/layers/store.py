"""The layer cache: content-addressed layer directories, image mounts, size and LRU eviction.

Layout under the store's directory (root-owned; 0711 so the build namespace's root, an
unprivileged host uid, can reach the layers it stacks; names are hex keys)::

    bases/<key>/root        Debian roots (bases.py)
    layers/<key>/diff       one step's overlay upper dir, owned by uid_base + id
    layers/<key>/meta.json  {"parent", "chain": [ancestor keys], "step", "bytes", "seconds"}
    mnt/id/<key>            layer <key> (or b<key>: a base) id-mapped: uid_base + n shown as n
    mnt/<key>               the image whose top layer is <key>, mounted read-only

A layer's key is the sha256 of its parent's key and what the step does (``build.py``): the same
prefix of steps over the same base gives the same keys, so a rebuild reuses every layer up to
the first changed step, as Docker's build cache does. ``meta.json``'s mtime is the layer's last
use (touched whenever an image using it is built or mounted).

Whiteouts and opaque directories: a step that deletes a file of a lower layer leaves a 0/0
character device in its upper dir, one that replaces a directory marks it opaque with the
``user.overlay.opaque`` xattr (the build jail mounts with ``userxattr``: it runs in a user
namespace). Layers are never flattened or copied: they are used *as* overlay lower dirs, in
the build jail and in the image mount (both with ``userxattr``), so the kernel applies those
markers when layers stack, exactly as Docker's overlay2 driver does.

An image is mounted once (``mount -t overlay -o ro,userxattr,lowerdir=top:...:base``, by the
service) over id-mapped read-only views of its layers (``idmap_main.py``: the owner that a build
namespace's root wrote as host uid ``uid_base + n`` reads as ``n``, so ``root``, ``_apt`` and the
users a maintainer script created own their files, as in Docker), and bound read-only as ``/``
of every jail of the environment (bubblewrap binds are nosuid; tasks run with no_new_privs). Eviction (:meth:`Store.evict`) keeps the store under ``max_bytes``: least recently
used layers first, never a layer of an image used in the last ``keep_s`` seconds, and with a
layer go its descendants and the mounts that stack it (lazily detached).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dockyard.sandbox.layers.bases import UID_BASE, UID_COUNT, Bases, _du, _flock
from dockyard.sandbox.workspace import mounts_under, unmount_all

log = logging.getLogger("dockyard.sandbox")

KEEP_S = 3600.0
IDMAP_MAIN = Path(__file__).resolve().parent / "idmap_main.py"
MAX_LOWER_OPTS = 4000  # mount(2) takes one page of options


@dataclass
class Layer:
    key: str
    parent: str
    chain: list[str]
    step: str
    bytes: int = 0
    seconds: float = 0.0


@dataclass
class Store:
    root: Path
    max_bytes: int = 20 << 30
    keep_s: float = KEEP_S
    bases: Bases = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _used: dict[str, float] = field(default_factory=dict, init=False)  # image key -> last use
    _users_fd: int = field(default=-1, init=False)  # a shared flock: this store is in use
    evicted: int = 0

    def __post_init__(self) -> None:
        for d in ("layers", "mnt"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
            os.chmod(self.root / d, 0o711)
        os.chmod(self.root, 0o711)
        self.bases = Bases(self.root / "bases")
        # every service on this cache holds a shared lock on it: the images stay mounted until
        # the last of them stops (unmount_all)
        self._users_fd = os.open(
            self.root / "mnt" / ".users.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
        )
        fcntl.flock(self._users_fd, fcntl.LOCK_SH)

    @property
    def layers_dir(self) -> Path:
        return self.root / "layers"

    def layer(self, key: str) -> Layer | None:
        meta = self.layers_dir / key / "meta.json"
        try:
            d = json.loads(meta.read_text())
        except (OSError, ValueError):
            return None
        with contextlib.suppress(OSError):
            os.utime(meta)
        return Layer(key=key, **d)

    def add(self, layer: Layer, upper: Path) -> None:
        """Move a finished step's upper dir (its jail is dead) into the cache as ``layer``."""
        entry = self.layers_dir / layer.key
        tmp = self.layers_dir / f".{layer.key}.{os.getpid()}.{threading.get_ident()}"
        tmp.mkdir(mode=0o711)
        os.rename(upper, tmp / "diff")
        layer.bytes = _du(tmp / "diff")
        (tmp / "meta.json").write_text(
            json.dumps({k: v for k, v in layer.__dict__.items() if k != "key"})
        )
        try:
            os.rename(tmp, entry)
        except OSError:  # built concurrently by another build of the same prefix: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)

    def lower(self, base_root: Path, keys: list[str]) -> list[str]:
        """Overlay lower dirs (top first) relative to ``layers/`` (shorter mount options)."""
        rel_base = os.path.relpath(base_root, self.layers_dir)
        out = [f"{k}/diff" for k in reversed(keys)] + [rel_base]
        if len(",".join(out)) > MAX_LOWER_OPTS:
            raise ValueError(f"{len(keys)} layers are more than one overlay mount can stack")
        return out

    def mount(self, key: str, base_root: Path, layers: list[str]) -> Path:
        """The image whose top layer is ``key``, mounted read-only (once): an overlay of the
        id-mapped views (``idmap_main.py``) of its layers and base."""
        target = self.root / "mnt" / key
        with self._lock, _flock(self.root / "mnt" / f".{key}.lock"):
            self._used[key] = time.time()
            if os.path.ismount(target):
                return target
            views = [self._view(k, self.layers_dir / k / "diff") for k in reversed(layers)]
            views.append(self._view("b" + base_root.parent.name, base_root))
            target.mkdir(exist_ok=True)
            opts = f"ro,userxattr,lowerdir={':'.join(views)}"
            if len(opts) > MAX_LOWER_OPTS:
                raise ValueError(f"{len(layers)} layers are more than one overlay mount can stack")
            r = subprocess.run(
                ["mount", "-t", "overlay", "overlay", "-o", opts, str(target)],
                cwd=self.root / "mnt" / "id", capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            if r.returncode != 0:
                raise OSError(f"mounting image {key[:12]}: {r.stderr.strip()}")
            return target

    def _view(self, name: str, src: Path) -> str:
        """``mnt/id/<name>``: ``src`` read-only with ids ``uid_base + n`` shown as ``n``."""
        view = self.root / "mnt" / "id" / name
        # (os.path.ismount cannot see a bind of a directory of the same file system)
        if not mounts_under(view):
            view.mkdir(parents=True, exist_ok=True)
            argv = [sys.executable, "-I", "-S", str(IDMAP_MAIN), str(src), str(view),
                    str(UID_BASE), str(UID_COUNT)]  # fmt: skip
            r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise OSError(f"id-mapping {name[:12]}: {r.stderr.strip()}")
        return name

    def alive(self, image: object) -> bool:
        """Still mounted and none of its layers evicted (cheap: no walk, no lock)."""
        layers = getattr(image, "layers", ())
        return os.path.ismount(getattr(image, "rootfs", "")) and all(
            (self.layers_dir / k).is_dir() for k in layers
        )

    def touch(self, key: str) -> None:
        with self._lock:
            self._used[key] = time.time()

    def unmount_all(self) -> list[Path]:
        """At this store's end: the images, then the id-mapped views under them (deepest
        first), if no other service still uses the cache (one that does holds ``.users.lock``
        shared, and unmounts them at its own end); what is left mounted."""
        if self._users_fd < 0:
            return []
        fd, self._users_fd = self._users_fd, -1
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info(
                    "layer cache %s: another service uses it, its images stay mounted", self.root
                )
                return []
            # held while unmounting: a service starting meanwhile waits, then mounts anew
            return unmount_all(self.root / "mnt", include_self=False)
        finally:
            os.close(fd)

    # -- size and eviction ------------------------------------------------------------------
    def _all_layers(self) -> list[Layer]:
        out = []
        for p in self.layers_dir.iterdir():
            if p.name.startswith("."):
                continue
            try:
                d = json.loads((p / "meta.json").read_text())
                out.append(Layer(key=p.name, **d))
            except (OSError, ValueError):
                continue
        return out

    def stats(self) -> dict[str, int]:
        layers = self._all_layers()
        bases = self.bases.sizes()
        return {
            "layers": len(layers),
            "layer_bytes": sum(la.bytes for la in layers),
            "bases": len(bases),
            "base_bytes": sum(bases.values()),
            "max_bytes": self.max_bytes,
            "evicted": self.evicted,
        }

    def evict(self, protect: set[str] = frozenset()) -> list[str]:
        """Least recently used layers out until layers + bases fit ``max_bytes``."""
        now = time.time()
        layers = {la.key: la for la in self._all_layers()}
        with self._lock:
            recent = {k for k, t in self._used.items() if now - t < self.keep_s} | set(protect)
        keep: set[str] = set()
        for k in recent:
            if k in layers:
                keep |= {k, *layers[k].chain}
        total = sum(la.bytes for la in layers.values()) + sum(self.bases.sizes().values())
        gone: list[str] = []
        order = sorted(
            layers.values(), key=lambda la: _mtime(self.layers_dir / la.key / "meta.json")
        )
        for la in order:
            if total <= self.max_bytes:
                break
            if la.key in keep or la.key in gone:
                continue
            doomed = [la.key] + [o.key for o in layers.values() if la.key in o.chain]
            if any(d in keep for d in doomed):
                continue
            for d in doomed:
                if d in gone:
                    continue
                self._remove(d)
                total -= layers[d].bytes
                gone.append(d)
        self.evicted += len(gone)
        return gone

    def _remove(self, key: str) -> None:
        """The layer, the image whose top it is and its id-mapped view (images stacking it
        have a descendant on top: the caller removes those too)."""
        for m in (self.root / "mnt" / key, self.root / "mnt" / "id" / key):
            unmount_all(m)
            with contextlib.suppress(OSError):
                m.rmdir()
        shutil.rmtree(self.layers_dir / key, ignore_errors=True)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
