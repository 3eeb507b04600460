"""The step executor: an :class:`ImageSpec` built into cached layers, stage by stage.

For each stage: the base root (``bases.py``) or an earlier stage's layers; then each step in
order. ``ENV`` / ``ARG`` / ``USER`` change the stage's state (and so the keys of the layers
after them) without a layer of their own; ``RUN``, ``COPY`` and ``WORKDIR`` each make one layer:
the step runs in a build jail (``jail_main.py``) over the stack so far, and the overlay's upper
dir becomes the layer. A layer's key hashes its parent's key, the step (a copy's payload by its
digest) and the state it ran with, so an unchanged prefix of steps is found in the cache and
not run again (``## step N: cached``). ``COPY --from=<stage>`` first exports the paths from that
stage's stack (a read-only jail, ``export``) into a tar, then copies it like local files.

After the last stage, one more layer holds the directories the sandbox mounts over the image
(/workspace, /tests, /logs, /opt/dockyard, ..., the WORKDIR, the service's interpreter prefixes
for the in-sandbox test runner): bubblewrap cannot create mount points in a read-only root. The image (its top key) is then mounted read-only (``store.py``).

``RUN`` reaches the network only through the build's egress proxy (``egress.py``: the package
registries, Debian's archive among them), and only when the operator runs the service with
``--allow-network``; apt, pip and curl inside the image read ``http(s)_proxy``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import shutil
import stat
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from dockyard.sandbox import egress
from dockyard.sandbox.cgroups import Probe
from dockyard.sandbox.layers.bases import UID_BASE, UID_COUNT, BaseError
from dockyard.sandbox.layers.runner import (
    SETUP_FAILED,
    StepOutcome,
    egress_plan,
    overlay_plan,
    run_plan,
)  # fmt: skip
from dockyard.sandbox.layers.spec import ImageSpec, ImageStep
from dockyard.sandbox.layers.store import Layer, Store
from dockyard.sandbox.toolchain import python_prefixes

BUILD_VERSION = "2"  # in every layer key: bumped when a step runs differently (2: HOME, trust vars)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MOUNTPOINTS = (
    "/workspace",
    "/tests",
    "/logs",
    "/opt/dockyard",
    "/opt/dockyard-task",
    "/opt/egress",  # egress.MOUNT: a session's registry proxy (SessionCreate.egress)
    "/opt/env",
    "/tmp",
)
LOG_CAP = 256 << 10


class BuildFailed(Exception):
    """A step failed: ``step`` (1-based within the image), ``exit_code``, ``log`` (the build's
    output, bounded). What the task's Dockerfile did, never a verdict."""

    def __init__(
        self, message: str, log: str = "", step: int | None = None, exit_code: int | None = None
    ):
        super().__init__(message)
        self.log = log[-LOG_CAP:]
        self.step = step
        self.exit_code = exit_code


@dataclass
class StageState:
    base_root: Path
    layers: list[str] = field(default_factory=list)  # bottom .. top
    env: dict[str, str] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = "root"

    @property
    def top(self) -> str:
        return self.layers[-1] if self.layers else "base:" + self.base_root.parent.name

    def copy(self) -> StageState:
        return StageState(
            self.base_root, list(self.layers), dict(self.env), {}, self.workdir, self.user
        )


@dataclass(frozen=True)
class BuiltImage:
    key: str
    rootfs: Path
    env: dict[str, str]
    workdir: str
    user: str
    layers: tuple[str, ...]
    base_root: Path  # the stack's bottom (a verifier's own overlay stacks on the same lowers)


def _key(*parts: object) -> str:
    blob = json.dumps([BUILD_VERSION, *parts], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class Builder:
    def __init__(self, store: Store, probe: Probe, allow_network: bool = False,
                 registries: tuple[str, ...] = (), memory_mb: int = 4096, pids: int = 1024) -> None:  # fmt: skip
        self.store, self.probe = store, probe
        self.allow_network, self.registries = allow_network, registries
        self.memory_mb, self.pids = memory_mb, pids
        self.built_layers = self.cached_layers = 0

    def build(self, spec: ImageSpec, timeout_s: float, log: list[str],
              extra_dirs: tuple[str, ...] = ()) -> BuiltImage:  # fmt: skip
        """Build (or find) every layer of ``spec``; raises BuildFailed / BaseError.
        ``extra_dirs``: more mount points for the top layer (the environment's workdir)."""
        deadline = time.monotonic() + timeout_s
        closed = closed_ancestor(self.store.root)
        if closed is not None:
            raise BaseError(
                f"the layer cache {self.store.root} cannot be reached by the build namespaces' "
                f"root (an unprivileged host uid): {closed} (mode "
                f"{stat.S_IMODE(closed.stat().st_mode):04o}) is closed to other users; give the "
                "service an --env-cache-dir (or --work-dir) whose every parent directory other "
                "users may traverse (o+x)"
            )
        tmp = self.store.root / f".build-{uuid.uuid4().hex[:12]}"
        tmp.mkdir(mode=0o711)
        log.extend(f"## note: {n[:500]}\n" for n in spec.notes)
        proxy: list[egress.Proxy] = []  # started by the first RUN that is not cached
        try:
            stages: dict[str, StageState] = {}
            n = 0
            for i, st in enumerate(spec.stages):
                if st.base.startswith("stage:"):
                    state = stages[st.base[6:]].copy()
                else:
                    if not self.store.bases.ready(st.base) and not self.allow_network:
                        raise BaseError(
                            f"base {st.base} is not built yet and the service runs without "
                            "--allow-network (mmdebstrap needs Debian's archive)"
                        )
                    root = self.store.bases.get(st.base, self._unpacker(tmp), log)
                    state = StageState(root, env={"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"})
                log.append(f"## stage {i} ({st.name or i}): FROM {st.base}\n")
                for step in st.steps:
                    n += 1
                    self._step(step, n, state, stages, tmp, proxy, deadline, log)
                stages[str(i)] = state
                if st.name:
                    stages[st.name] = state
            final = stages[str(len(spec.stages) - 1)]
            self._mountpoints(final, tmp, extra_dirs)
            rootfs = self.store.mount(final.top, final.base_root, final.layers)
            return BuiltImage(final.top, rootfs, dict(final.env), final.workdir, final.user,
                              tuple(final.layers), final.base_root)  # fmt: skip
        finally:
            for p in proxy:
                p.close()
            shutil.rmtree(tmp, ignore_errors=True)

    # -- one step -----------------------------------------------------------------------------
    def _step(self, step: ImageStep, n: int, state: StageState, stages: dict[str, StageState],
              tmp: Path, proxy: list[egress.Proxy], deadline: float, log: list[str]) -> None:  # fmt: skip
        if step.env is not None:
            state.env.update(step.env)
            return
        if step.arg is not None:
            state.args.update(step.arg)
            return
        if step.user is not None:
            state.user = step.user
            return
        if step.workdir is not None:
            state.workdir = step.workdir
        what = step.canonical()
        if step.copy_ is not None and step.copy_.files is not None:
            what["copy"]["files"] = hashlib.sha256(step.copy_.files.encode()).hexdigest()
        if step.copy_ is not None and step.copy_.from_stage is not None:
            what["copy"]["from"] = stages[step.copy_.from_stage].top
        env = state.env | state.args if step.run is not None else state.env
        key = _key(state.top, what, env, state.user, state.workdir)
        desc = _describe(step)
        if self.store.layer(key) is not None:
            self.cached_layers += 1
            log.append(f"## step {n}: {desc} (cached {key[:12]})\n")
            state.layers.append(key)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise BuildFailed(f"step {n} ({desc}): the build's timeout ran out", "".join(log), n)
        (tmp / f"s{n}").mkdir(mode=0o711)
        plan = overlay_plan(self.store, state.base_root, state.layers, tmp / f"s{n}")
        plan |= {"cwd": state.workdir, "user": state.user, "env": env}
        upper = Path(plan["upper"])
        if step.run is not None:
            plan |= {"op": "run", "argv": ["/bin/sh", "-c", step.run]}
            if self.allow_network and not proxy:
                allow = egress.Allowlist.build(self.registries)
                proxy.append(egress.Proxy(tmp / "egress", UID_BASE, allow))
                log.append(f"## network: only the package registries ({allow.describe()})\n")
            if proxy:
                plan = egress_plan(plan, proxy[0])
        elif step.workdir is not None:
            plan |= {"op": "run", "argv": ["/bin/true"], "env": {}}
        else:
            assert step.copy_ is not None
            plan |= {"op": "copy", **self._copy_payload(step, n, stages, tmp, left, log)}
        o = run_plan(plan, self.probe, left, self.memory_mb, self.pids)
        refused = proxy[0].drain() if proxy else ""
        log.append(
            f"## step {n}: {desc}\n{o.output}{refused}## exit {o.exit_code} ({o.seconds:.1f} s)\n"
        )
        self._check(o, n, desc, log)
        # The step's jail is dead (its pid 1 exited, so its pid namespace and every process in
        # it are gone): nothing can change the upper dir while the store moves and measures it.
        self.store.add(
            Layer(key, state.top, [*state.layers], desc[:200], seconds=round(o.seconds, 2)), upper
        )
        self.built_layers += 1
        state.layers.append(key)

    @staticmethod
    def _check(o: StepOutcome, n: int, desc: str, log: list[str]) -> None:
        why = o.why()
        if why:
            if o.exit_code == SETUP_FAILED and "dockyard-build:" in o.output:
                why = f"failed: {o.output.strip().splitlines()[-1][:300]}"
            raise BuildFailed(f"step {n} ({desc[:120]}) {why}", "".join(log), n, o.exit_code)

    def _copy_payload(self, step: ImageStep, n: int, stages: dict[str, StageState],
                      tmp: Path, left: float, log: list[str]) -> dict:  # fmt: skip
        c = step.copy_
        assert c is not None
        tar = tmp / f"copy{n}.tar"
        if c.files is not None:
            try:
                tar.write_bytes(base64.b64decode(c.files, validate=True))
            except (binascii.Error, ValueError) as e:
                raise ValueError(f"step {n}: copy.files is not base64 ({e})") from e
        else:
            src = stages[c.from_stage]  # type: ignore[index]
            plan = {
                "uid_base": UID_BASE, "uid_count": UID_COUNT, "op": "export",
                "chdir": str(self.store.layers_dir), "lower": self.store.lower(src.base_root, src.layers),
                "upper": None, "work": None, "merged": str(_fresh(tmp, f"x{n}")),
                "paths": c.paths, "tar": str(tar), "cwd": "/",
            }  # fmt: skip
            tar.touch(mode=0o600)
            os.chown(tar, UID_BASE, UID_BASE)  # written by the export jail's root
            o = run_plan(plan, self.probe, left, self.memory_mb, self.pids)
            log.append(f"## step {n}: export {c.paths} from stage {c.from_stage}\n{o.output}")
            self._check(o, n, f"COPY --from={c.from_stage}", log)
        os.chown(tar, UID_BASE, UID_BASE)
        return {"tar": str(tar), "sources": [{"entry": f"s{i}", "name": nm} for i, nm in enumerate(c.names)],
                "dest": c.dest, "chown": c.chown, "chmod": c.chmod}  # fmt: skip

    def _unpacker(self, tmp: Path):
        def unpack(tar: Path, root: Path) -> None:
            root.mkdir(mode=0o755)
            os.chown(root, UID_BASE, UID_BASE)
            plan = {"uid_base": UID_BASE, "uid_count": UID_COUNT, "op": "unpack", "lower": [str(root)],
                    "upper": None, "work": None, "merged": str(_fresh(tmp, "base")), "tar": str(tar)}  # fmt: skip
            o = run_plan(plan, self.probe, 1800.0, self.memory_mb, self.pids)
            if o.exit_code != 0:
                raise BaseError(f"unpacking the base root failed ({o.why()})", o.output)

        return unpack

    def _mountpoints(self, state: StageState, tmp: Path, extra: tuple[str, ...]) -> None:
        """The sandbox's mount points (and the WORKDIR) as the image's top layer."""
        dirs = sorted({*MOUNTPOINTS, state.workdir, *extra, *python_prefixes()} - {"/"})
        key = _key(state.top, "mountpoints", dirs)
        if self.store.layer(key) is None:
            upper = tmp / "mountpoints"
            for d in dirs:  # a fresh dir nothing runs in: plain host operations are safe
                p = upper / d.lstrip("/")
                p.mkdir(parents=True, exist_ok=True)
            for dirpath, _, _ in os.walk(upper):
                os.chown(dirpath, UID_BASE, UID_BASE)
                os.chmod(dirpath, 0o1777 if dirpath.endswith("/tmp") else 0o755)
            self.store.add(Layer(key, state.top, [*state.layers], "sandbox mount points"), upper)
            self.built_layers += 1
        state.layers.append(key)


def closed_ancestor(path: Path) -> Path | None:
    """The first directory from / down to ``path`` that other users cannot traverse, or None:
    the build jails mount layers below ``path`` as the root of a user namespace, whose host uid
    is no owner of the service's directories."""
    cur = Path("/")
    for part in path.resolve().parts[1:]:
        cur = cur / part
        try:
            if not cur.stat().st_mode & stat.S_IXOTH:
                return cur
        except FileNotFoundError:  # made later, by the service (with the modes it needs)
            return None
    return None


def _fresh(tmp: Path, name: str) -> Path:
    p = tmp / name
    p.mkdir(mode=0o755)
    return p


def _describe(step: ImageStep) -> str:
    if step.run is not None:
        return f"RUN {step.run[:300]}"
    if step.workdir is not None:
        return f"WORKDIR {step.workdir}"
    c = step.copy_
    assert c is not None
    src = f"--from={c.from_stage} {' '.join(c.paths)}" if c.from_stage else " ".join(c.names)
    return f"COPY {src} {c.dest}"
