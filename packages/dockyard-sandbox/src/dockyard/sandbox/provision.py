"""Provisioned environments: a base + a list of steps, built once, cached by hash, mounted
read-only.

Layout of one cached environment (``<root>/<EnvSpec.key()>/``, root-owned, never written
after the build)::

    tree/      the starting tree: what ``files`` steps extracted and ``run`` steps left in
               the workdir. Each session gets a private, writable copy (like a repository).
    prefix/    mounted read-only at /opt/env in every jail of a session that names the
               environment: ``bin/`` (on PATH), ``site/`` (on PYTHONPATH; where ``pip install``
               puts packages).
    env.json   the spec (for humans); ``log.txt`` the build's output; ``ok`` the completion mark.

The build (:meth:`Provisioner.get`): under a per-key lock, each ``run`` step runs in a jail of
its own (a fresh unprivileged uid, pid/mount/ipc/network namespaces, cgroup limits; with
``spec.network`` *and* the operator's ``--allow-network``, a way out to the package registries
only: the build's allowlisting proxy, ``egress.py``) whose only writable places
are the build's tree (at ``/workspace`` and the workdir) and prefix (at /opt/env), both on
size- and inode-capped tmpfs workspaces, and its own /tmp. The system stays read-only (the base
is the sandbox's own root file system), so steps cannot write outside the build. Only when every
step succeeded are the results copied into the cache, made root-owned and read-only, and marked
``ok`` (an atomic rename): an environment is never used half-provisioned. A failure raises
:class:`ProvisionFailed` carrying the build log; nothing is cached for it (a retry rebuilds).

``pip`` inside a step is a wrapper around an interpreter of the service that has pip, with
``PIP_TARGET=/opt/env/site``. ``apt-get`` never runs as root and dpkg never installs anything:
``host_packages`` already on the host (its dpkg status file) need nothing; the others are
fetched by apt in a jail of their own before the steps and unpacked with ``dpkg-deb -x`` into
``prefix/root`` (/opt/env/root, on ``PATH`` after the system and on ``LD_LIBRARY_PATH``), no
maintainer scripts (``debs.py``). That jail reaches the registries (through the same proxy)
only when the operator runs the service with ``--allow-network`` (its command is the service's
own, the task supplies only validated package names); without it a missing package fails
:meth:`Provisioner.get` at once. The proxy lives as long as the build: started before the first
jail that needs it, closed (its socket dir removed) when the build ends, however it ends; what it
refused is in the build log (``## egress: refused (403): ...``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from dockyard.sandbox import egress
from dockyard.sandbox.debs import DEB_ROOT, DebError, apt_jail, deb_env, failure, missing_packages
from dockyard.sandbox.debs import sanitize as sanitize_debs
from dockyard.sandbox.envspec import ENV_MOUNT, EnvSpec
from dockyard.sandbox.jail import JailSpec
from dockyard.sandbox.jail import run as jail_run
from dockyard.sandbox.layers.bases import BaseError
from dockyard.sandbox.layers.build import Builder, BuildFailed, BuiltImage
from dockyard.sandbox.layers.store import Store
from dockyard.sandbox.models import Limits
from dockyard.sandbox.paths import UnsafePath
from dockyard.sandbox.repos import RepoError, safe_extract
from dockyard.sandbox.toolchain import WORKSPACE, sandbox_path_env
from dockyard.sandbox.trees import TreeTooLarge, copy_tree, walk
from dockyard.sandbox.workspace import Workspaces, unmount_all

BUILD_LIMITS = Limits.model_validate(
    {"memory_mb": 4096, "pids": 1024, "disk_mb": 4096, "inodes": 500_000, "cpu_s": 7200}
)
DPKG_STATUS = Path("/var/lib/dpkg/status")
LOG_CAP = 256 << 10
LAYER_CACHE_BYTES = 20 << 30


class ProvisionFailed(Exception):
    """A step failed (or a host package is missing): the task is not runnable here. ``log``
    holds the build's output; never a verdict of the task."""

    def __init__(
        self, message: str, log: str = "", step: int | None = None, exit_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.log = log[-LOG_CAP:]
        self.step = step  # the failing step (1-based) and its exit status, when a step failed
        self.exit_code = exit_code


@dataclass(frozen=True)
class Provisioned:
    """A built environment and how a jail uses it: a prefix environment (``root`` holds
    ``tree/`` and ``prefix/``), or with ``image`` a layered image whose read-only mount is the
    jails' root and whose WORKDIR is the starting tree."""

    key: str
    root: Path
    spec: EnvSpec
    image: BuiltImage | None = None

    @property
    def tree(self) -> Path:
        if self.image is not None:  # a read-only overlay of finished layers: nothing writes it
            return self.image.rootfs / self.spec.workdir.lstrip("/")
        return self.root / "tree"

    @property
    def prefix(self) -> Path:
        return self.root / "prefix"

    def jail_env(self) -> dict[str, str]:
        if self.image is not None:  # the image's ENV (PATH included), as Docker's would be;
            # the sandbox's default that turns off pytest plugins is for its own runner only
            return {
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "",
                "PYTHONDONTWRITEBYTECODE": "",
            } | self.image.env
        return jail_env(self.spec, debs=(self.prefix / DEB_ROOT).is_dir())

    def binds(self, ws: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(read-only, writable) binds of a jail over workspace ``ws``: the prefix at /opt/env
        (or the image at /: ``jail.bwrap_argv``), the workspace also at the workdir."""
        rw = [] if self.spec.workdir == WORKSPACE else [(str(ws), self.spec.workdir)]
        if self.image is not None:
            return [(str(self.image.rootfs), "/")], rw
        return [(str(self.prefix), ENV_MOUNT)], rw


def jail_env(spec: EnvSpec, building: bool = False, debs: bool = False) -> dict[str, str]:
    """The variables of a jail using ``spec``: the prefix on PATH / PYTHONPATH (with ``debs``,
    the unpacked packages' dirs too: ``debs.deb_env``), then ``env``."""
    env = {
        "PATH": f"{ENV_MOUNT}/bin:{ENV_MOUNT}/site/bin:{sandbox_path_env()}",
        "PYTHONPATH": f"{ENV_MOUNT}/site",
        "DEBIAN_FRONTEND": "noninteractive",
    }
    if debs:
        env |= deb_env(env["PATH"])
    if building:
        env |= {
            "PIP_TARGET": f"{ENV_MOUNT}/site",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_WARN_SCRIPT_LOCATION": "1",
            "PIP_ROOT_USER_ACTION": "ignore",
        }
    extra = dict(spec.env)
    if "PATH" in extra:  # ``ENV PATH=/x:$PATH``: ``${PATH}`` is the sandbox's own path
        extra["PATH"] = extra["PATH"].replace("${PATH}", env["PATH"])
    return env | extra


def installed_host_packages(status: Path = DPKG_STATUS) -> set[str]:
    """Names dpkg reports as ``install ok installed`` (read from its status file, no command)."""
    out: set[str] = set()
    try:
        text = status.read_text(errors="replace")
    except OSError:
        return out
    for block in text.split("\n\n"):
        name = ok = None
        for line in block.splitlines():
            if line.startswith("Package: "):
                name = line[9:].strip()
            elif line.startswith("Status: "):
                ok = line[8:].strip() == "install ok installed"
        if name and ok:
            out.add(name)
    return out


def pip_python() -> str | None:
    """An interpreter of this service (visible in every jail) that can run ``-m pip``."""
    cands = [sys.executable, os.path.join(os.path.realpath(sys.base_prefix), "bin", "python3")]
    for py in cands:
        if os.path.exists(py):
            r = subprocess.run([py, "-c", "import pip"], capture_output=True, timeout=60)
            if r.returncode == 0:
                return py
    return None


def _chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            os.chown(os.path.join(dirpath, n), uid, uid, follow_symlinks=False)


def _freeze(root: Path) -> None:
    """Root-owned, readable by all, writable by none but root (mounted read-only anyway); by
    fds (trees.py), so a path past PATH_MAX or a deep tree is no failure."""
    os.chown(root, 0, 0)
    os.chmod(root, 0o755)
    for e in walk(root, allow_bad_names=True):
        os.chown(e.name, 0, 0, dir_fd=e.dir_fd, follow_symlinks=False)
        if e.kind == "d":
            os.chmod(e.name, 0o755, dir_fd=e.dir_fd)
        elif e.kind == "f":
            os.chmod(e.name, 0o755 if e.st.st_mode & 0o111 else 0o644, dir_fd=e.dir_fd)


class Provisioner:
    """Builds and caches :class:`EnvSpec` environments under an operator-chosen ``root``.

    ``ctx`` is the service's executor ``Context`` (uids, workspaces, cgroups, isolation)."""

    def __init__(self, root: Path, ctx: object, layer_cache_bytes: int = LAYER_CACHE_BYTES) -> None:
        self.root = root
        self.ctx = ctx
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o711)  # the build namespaces' root (an unprivileged uid) stacks layers/
        self.layer_store = Store(root / "layers", max_bytes=layer_cache_bytes)
        self.layers = Builder(
            self.layer_store, ctx.probe, getattr(ctx, "allow_network", False),  # type: ignore[attr-defined]
            tuple(getattr(ctx, "registries", ())),
        )  # fmt: skip
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._pip: str | bool | None = False  # False: not looked up yet
        self._images: dict[str, Provisioned] = {}  # EnvSpec.key() -> a mounted image
        self._scratch: Workspaces | None = None
        self.built = self.hits = 0

    @property
    def scratch(self) -> Workspaces:
        """Size-capped tmpfs spaces under this (0711) root, which a build namespace's root can
        reach (the service's work dir may be closed to it): a verifier run as an image's root
        takes its workspace copy, /tests, /logs and throwaway layer here (``scriptverify.py``).
        One folder per service process; those of dead processes are removed."""
        with self._lock:
            if self._scratch is None:
                for old in self.root.glob("scratch-*"):
                    pid = old.name.removeprefix("scratch-")
                    if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                        unmount_all(old)
                        shutil.rmtree(old, ignore_errors=True)
                self._scratch = Workspaces(self.root / f"scratch-{os.getpid()}")
            return self._scratch

    def cached(self, key: str) -> Provisioned | None:
        entry = self.root / key
        if not (entry / "ok").exists():
            return None
        spec = EnvSpec.model_validate_json((entry / "env.json").read_text())
        return Provisioned(key, entry, spec)

    def get(self, spec: EnvSpec) -> Provisioned:
        """The built environment for ``spec`` (building it on first use). Raises
        :class:`ProvisionFailed` (a step failed, a host package is missing) or ``ValueError``
        (the service cannot build it at all: network or isolation not allowed)."""
        ctx = self.ctx
        if spec.network and not getattr(ctx, "allow_network", False):
            raise ValueError(
                "environment.network: the service runs without --allow-network (provisioning "
                "steps that download packages need it)"
            )
        if spec.steps and any(s.run for s in spec.steps) and ctx.isolation != "bwrap":  # type: ignore[attr-defined]
            raise ValueError("provisioning run steps needs the bwrap isolation backend")
        if spec.image is not None:
            return self._image(spec)
        key = spec.key()
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            done = self.cached(key)
            if done is not None:
                self.hits += 1
                return done
            missing = missing_packages(spec.host_packages, installed_host_packages())
            if missing and not getattr(ctx, "allow_network", False):
                raise ProvisionFailed(
                    f"apt packages {missing} are not installed on the sandbox host, and the "
                    "service runs without --allow-network, so provisioning cannot fetch them: "
                    f"install them on the host (apt-get install -y {' '.join(missing)}) or run "
                    "the service with --allow-network"
                )
            if missing and ctx.isolation != "bwrap":  # type: ignore[attr-defined]
                raise ValueError("provisioning apt packages needs the bwrap isolation backend")
            self._build(spec, key, missing)
            self.built += 1
            done = self.cached(key)
            assert done is not None
            return done

    def _image(self, spec: EnvSpec) -> Provisioned:
        """A layered image (``layers/``): every step's layer from the cache or built now."""
        if self.ctx.isolation != "bwrap":  # type: ignore[attr-defined]
            raise ValueError("layered images need the bwrap isolation backend")
        assert spec.image is not None
        key = spec.key()
        known = self._images.get(key)
        if known is not None and known.image is not None and self.layer_store.alive(known.image):
            self.layer_store.touch(known.image.key)  # warm: no lookups, no locks, no jail
            self.hits += 1
            return known
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # one build per spec at a time; the second caller finds it done
            return self._build_image(spec, key)

    def _build_image(self, spec: EnvSpec, key: str) -> Provisioned:
        assert spec.image is not None
        known = self._images.get(key)
        if known is not None and known.image is not None and self.layer_store.alive(known.image):
            return known
        log: list[str] = []
        built = self.layers.built_layers
        try:
            img = self.layers.build(spec.image, spec.timeout_s, log, extra_dirs=(spec.workdir,))
        except BuildFailed as e:
            raise ProvisionFailed(str(e), e.log, step=e.step, exit_code=e.exit_code) from e
        except BaseError as e:
            raise ProvisionFailed(str(e), "".join(log) + e.log) from e
        except OSError as e:
            raise ProvisionFailed(f"building the image failed: {e}", "".join(log)) from e
        finally:
            if self.layers.built_layers != built:  # the store grew: back under its size
                with contextlib.suppress(OSError):
                    self.layer_store.evict()
        self.built += 1
        done = Provisioned(img.key, img.rootfs, spec, img)
        self._images[key] = done
        return done

    def _build(self, spec: EnvSpec, key: str, missing: list[str]) -> None:
        ctx = self.ctx
        uid = ctx.uids.acquire()  # type: ignore[attr-defined]
        tag = uuid.uuid4().hex[:8]
        lim = BUILD_LIMITS
        wss = ctx.workspaces  # type: ignore[attr-defined]
        tree = wss.create(f"p-{key[:12]}-{tag}-t", uid, lim.disk_mb, lim.inodes)
        prefix = wss.create(f"p-{key[:12]}-{tag}-p", uid, lim.disk_mb, lim.inodes)
        tmp = self.root / f".build-{key}-{tag}"
        log: list[str] = []
        proxy: egress.Proxy | None = None
        try:
            if missing or (spec.network and any(s.run for s in spec.steps)):
                allow = egress.Allowlist.build(getattr(ctx, "registries", ()))
                proxy = egress.Proxy(self.root / f".egress-{key[:12]}-{tag}", uid, allow)
                log.append(f"## network: only the package registries ({allow.describe()})\n")
            (prefix / "bin").mkdir()
            (prefix / "site").mkdir()
            self._pip_wrappers(prefix / "bin")
            _chown_tree(prefix, uid)
            deadline = time.monotonic() + spec.timeout_s
            has_debs = bool(missing) and self._apt(
                missing, uid, tree, prefix, spec.timeout_s, log, proxy
            )
            for i, step in enumerate(spec.steps, 1):
                if step.files is not None:
                    self._extract(step.files, tree, i)
                    _chown_tree(tree, uid)
                    log.append(f"## step {i}: files\n")
                    continue
                assert step.run is not None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProvisionFailed(
                        f"step {i}: the environment's timeout_s={spec.timeout_s} ran out",
                        "".join(log),
                    )
                self._run(spec, step.run, i, uid, tree, prefix, left, log, has_debs, proxy)
            (prefix / "bin" / "pip").unlink()  # episodes have no pip (and no network)
            (prefix / "bin" / "pip3").unlink()
            tmp.mkdir()
            for name, src in (("tree", tree), ("prefix", prefix)):  # the build's jail is dead
                (tmp / name).mkdir()
                left_out = copy_tree(src, tmp / name, uid=0, gid=0)  # by fds: links as links
                if left_out:
                    log.append(f"## {name}: special files left out: {', '.join(left_out[:20])}\n")
            _freeze(tmp)
            (tmp / "env.json").write_text(spec.model_dump_json())
            (tmp / "log.txt").write_text("".join(log)[-LOG_CAP:])
            (tmp / "ok").write_text(key)
            os.rename(tmp, self.root / key)
        except (OSError, TreeTooLarge, UnsafePath) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise ProvisionFailed(  # no host path in what the client reads
                f"provisioning ran out of room or failed: {why}", "".join(log)
            ) from e
        finally:
            if proxy is not None:
                proxy.close()
            shutil.rmtree(tmp, ignore_errors=True)
            wss.destroy(tree)
            wss.destroy(prefix)
            ctx.uids.release(uid)  # type: ignore[attr-defined]

    def _pip_wrappers(self, bindir: Path) -> None:
        if self._pip is False:
            self._pip = pip_python()
        body = (
            f'#!/bin/sh\nexec {self._pip} -m pip "$@"\n'
            if self._pip
            else "#!/bin/sh\necho 'pip: no interpreter of the sandbox service has pip' >&2\nexit 127\n"
        )
        for name in ("pip", "pip3"):
            (bindir / name).write_text(body)
            os.chmod(bindir / name, 0o755)

    @staticmethod
    def _extract(b64: str, tree: Path, i: int) -> None:
        try:
            safe_extract(base64.b64decode(b64, validate=True), tree)
        except (binascii.Error, ValueError, RepoError) as e:
            raise ValueError(
                f"environment step {i}: files is not a safe base64 tarball: {e}"
            ) from e

    def _run(
        self,
        spec: EnvSpec,
        command: str,
        i: int,
        uid: int,
        tree: Path,
        prefix: Path,
        timeout_s: float,
        log: list[str],
        with_debs: bool = False,
        proxy: egress.Proxy | None = None,
    ) -> None:
        ctx = self.ctx
        rw = [(str(prefix), ENV_MOUNT)]
        if spec.workdir != WORKSPACE:
            rw.append((str(tree), spec.workdir))
        argv = ["/bin/sh", "-c", command]
        env = jail_env(spec, building=True, debs=with_debs)
        net = spec.network and proxy is not None
        if net:
            assert proxy is not None
            argv = egress.wrap_argv(sys.executable, argv)
            env |= egress.jail_env()  # the only way out; a spec's own proxy could not be reached
        js = JailSpec(
            argv=argv,
            workspace=tree,
            uid=uid,
            limits=BUILD_LIMITS,
            timeout_s=timeout_s,
            network=False,  # own netns; out only through the proxy
            cwd=spec.workdir,
            ro_binds=[proxy.bind()] if net and proxy else [],
            binds=rw,
            env=env,
            name=f"prov-{uuid.uuid4().hex[:12]}",
            isolation=ctx.isolation,  # type: ignore[attr-defined]
        )
        o = jail_run(js, ctx.probe)  # type: ignore[attr-defined]
        refused = proxy.drain() if proxy else ""
        log.append(
            f"## step {i}: RUN {command}\n{o.stdout}{o.stderr}{refused}## exit {o.exit_code}\n"
        )
        why = (
            "timed out" if o.timed_out else "ran out of memory" if o.oom
            else "hit the process limit" if o.pids_limit
            else f"exited {o.exit_code}" if o.exit_code != 0 else ""
        )  # fmt: skip
        if why:
            raise ProvisionFailed(f"step {i} ({command[:120]!r}) {why}", "".join(log))

    def _apt(
        self,
        packages: list[str],
        uid: int,
        tree: Path,
        prefix: Path,
        timeout_s: float,
        log: list[str],
        proxy: egress.Proxy | None = None,
    ) -> bool:
        """Fetch and unpack the packages the host lacks into ``prefix/root`` (``debs.py``)."""
        root = prefix / DEB_ROOT
        root.mkdir()
        os.chown(root, uid, uid)
        js = apt_jail(
            packages, tree, prefix, uid, BUILD_LIMITS, timeout_s,
            proxy=proxy.bind() if proxy else None, python=sys.executable,
        )  # fmt: skip
        js.isolation = self.ctx.isolation  # type: ignore[attr-defined]
        o = jail_run(js, self.ctx.probe)  # type: ignore[attr-defined]
        out = f"{o.stdout}{o.stderr}{proxy.drain() if proxy else ''}"
        log.append(f"## apt packages {' '.join(packages)}\n{out}## exit {o.exit_code}\n")
        limit = "timed out" if o.timed_out else "ran out of memory" if o.oom else (
            "hit the process limit" if o.pids_limit else "")  # fmt: skip
        if limit or o.exit_code != 0:
            raise ProvisionFailed(failure(o.exit_code, packages, out, limit), "".join(log))
        try:
            cleared, rewritten = sanitize_debs(root)
        except DebError as e:
            raise ProvisionFailed(f"apt packages {packages}: {e}", "".join(log)) from e
        log.append(f"## set-id bits cleared: {cleared}; links into the prefix: {rewritten}\n")
        if not any(root.iterdir()):  # all provided by the host (virtual packages)
            root.rmdir()
        return root.is_dir()

    def stats(self) -> dict[str, int]:
        """Counters and the layer cache's size (``layers/store.py``: bytes, count, evictions)."""
        return {"built": self.built, "hits": self.hits, "layers_built": self.layers.built_layers,
                "layers_cached": self.layers.cached_layers, **{f"layer_cache_{k}": v for k, v in self.layer_store.stats().items()}}  # fmt: skip

    def close(self) -> None:
        """Detach the image mounts (the cache directory can then be removed)."""
        self.layer_store.unmount_all()
        if self._scratch is not None:
            unmount_all(self._scratch.root)
            shutil.rmtree(self._scratch.root, ignore_errors=True)


def provision_json(p: Provisioned) -> str:
    return json.dumps({"key": p.key, "workdir": p.spec.workdir})
