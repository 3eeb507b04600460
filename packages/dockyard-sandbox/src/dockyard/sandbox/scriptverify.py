"""The script verifier: a Harbor-style ``tests/test.sh`` whose *reward file* is the reward.

Run by a session's ``finish`` with ``FinishRequest.script``. Never inside the sandbox the
agent drove: the session's workspace is copied whole (``.git`` included: a Harbor task may be
about commits) into a fresh workspace — by fds, links copied as links and never followed
(trees.py), with the session's terminal frozen meanwhile, ownership reset to a fresh uid,
nothing of the agent running there — and a fresh jail runs ``script.command`` with

* ``/tests``   the held-out files (``script.files``), root-owned and read-only: the agent's
  jails never mount them (threat 22), and the code under test cannot edit them;
* ``/logs``    a small, empty, writable tmpfs (``/logs/verifier``, ``/logs/agent``): a reward
  file cannot be planted there in advance, because nothing of the session's workspace is in it;
* the environment's prefix at /opt/env and the workspace at its workdir (as in the session).

In a layered image (a task's Dockerfile, ``layers/``) the script runs as Docker runs it: as the
image's **root**, over a throwaway writable layer on the image (``apt-get install``, files under
``/etc``, ``$HOME/.local`` all work), in a build jail (``layers/jail_main.py``: root of a user
namespace, unprivileged on the host; the copy is owned by that root). ``/tests`` is owned by the
host's root, outside the namespace's id map: its root can read it, never change it. The
writable layer lives on a tmpfs of the task's ``disk_mb`` and is gone with the verification.
Over a session's container (``layers/container.py``) the script runs, by default, **in the live
container**, as Harbor's ``docker exec`` runs it (``FinishRequest.live``; jail_main.py's ``op:
verify``): the container's network (a server the agent left running answers on localhost), its
files as the agent left them (the session's layer and workspace), and a mount and pid namespace
of the verifier's own, with a root of its own — /tests and /logs are its directories, not paths
of the shared image, and no process of the agent can see one of the verifier's, so none can
reach its reward file or swap its tests (tested against loops planting one and renaming /tests
away all along). With ``live: false`` the throwaway layer is stacked on the session's own
(``upper``), the container frozen: what the agent wrote anywhere is there, none of its processes.
The session's lock is held for the whole verification either way.

Network: none, or (``script.egress``) the package registries and the installer table only,
through an egress proxy of this verification (egress/: its own network namespace, the proxy's
socket mounted read-only, the forwarder wrapped around the command) — how Terminal-Bench 2's
shared preamble (``apt-get install curl``, uv's install script, ``uvx ... pytest``) runs on a
node without the internet. A host the proxy refused makes the verdict ``needs_network`` (naming
it: what the task needs opened, masked by the trainer) when the task declares
``allow_internet``; otherwise it is only reported in ``detail``: code under test asking for the
network is the task's content, and its reward stands.

Reward: the number in ``/logs/verifier/reward.txt``, else ``reward`` (or the only value) in
``/logs/verifier/reward.json``. A missing or malformed file gives reward 0 with
``reward_error`` saying why: the task's own content caused it, so it is a verdict (``failed``),
never ``infra_error``. Verdict ``passed`` iff reward ≥ 1. A timeout, OOM or process cap of the
script is that verdict with reward 0. The exit code of the script is reported, not used.
Residual risk (as with Harbor under Docker): code the tests run shares the verifier's jail and
could write the reward file itself; held-out tests that check behaviour, not a marker, are the
defence.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockyard.sandbox import egress
from dockyard.sandbox.envspec import LOGS_MOUNT, TESTS_MOUNT, ScriptTests
from dockyard.sandbox.jail import JailSpec
from dockyard.sandbox.jail import run as jail_run
from dockyard.sandbox.layers.bases import UID_BASE
from dockyard.sandbox.layers.container import Container
from dockyard.sandbox.layers.runner import StepOutcome, egress_plan, overlay_plan, run_plan
from dockyard.sandbox.models import Limits, TaskResult, Timings, Verdict
from dockyard.sandbox.paths import FULL_ERRNOS, UnsafePath, check_rel, force_write, read_file
from dockyard.sandbox.provision import Provisioned
from dockyard.sandbox.toolchain import WORKSPACE
from dockyard.sandbox.trees import TreeTooLarge, copy_tree

REWARD_CAP = 64 << 10


def parse_reward(logs: Path) -> tuple[float, str]:
    """(reward, error) from ``logs/verifier``; error "" when a usable number was found."""
    for name in ("reward.txt", "reward.json"):
        try:
            raw = read_file(logs, f"verifier/{name}", REWARD_CAP)
        except FileNotFoundError:
            continue
        except (UnsafePath, OSError) as e:
            return 0.0, f"{name}: unreadable ({e})"
        text = raw.decode("utf-8", errors="replace").strip()
        try:
            if name == "reward.txt":
                value = float(text)
            else:
                obj = json.loads(text)
                if isinstance(obj, dict):
                    nums = [v for v in obj.values() if isinstance(v, int | float)]
                    value = (
                        obj["reward"] if "reward" in obj else nums[0] if len(nums) == 1 else None
                    )
                else:
                    value = obj
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ValueError("no 'reward' number")
                value = float(value)
        except (ValueError, TypeError) as e:
            return 0.0, f"{name}: malformed ({text[:80]!r}: {e})"
        if not math.isfinite(value):
            return 0.0, f"{name}: not a finite number ({text[:80]!r})"
        return value, ""
    return 0.0, "no reward file: /logs/verifier/reward.txt or reward.json was not written"


def copy_workspace(src: Path, dest: Path, uid: int) -> str:
    """Copy ``src`` into ``dest`` by fds (trees.py: links as links, special files left out),
    everything owned by ``uid``; returns why it did not fit ("" when it did): a copy past the
    verifier's limits or the walk's bounds is the workspace's content, a ``resource_limit``."""
    try:
        copy_tree(src, dest, uid=uid, gid=uid)
    except TreeTooLarge as e:
        return f"the workspace is too large to verify: {e}"
    except OSError as e:
        if e.errno in FULL_ERRNOS:
            return f"the workspace does not fit the verifier's limits: {e.strerror}"
        raise
    return ""


def _write_tests(dest: Path, script: ScriptTests) -> None:
    """``script``'s files, text and binary, owned by the host's root (module docstring)."""
    dest.mkdir(mode=0o755)
    blobs = [(rel, text.encode()) for rel, text in script.files.items()]
    for rel, b64 in script.binary_files.items():
        try:
            blobs.append((rel, base64.b64decode(b64, validate=True)))
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"script.binary_files[{rel!r}]: not base64 ({e})") from e
    for rel, data in blobs:
        check_rel(rel)
        mode = 0o755 if rel.endswith(".sh") else 0o644
        force_write(dest, rel, data, uid=0, gid=0, mode=mode)
    for dirpath, _dirs, _files in os.walk(dest):
        os.chmod(dirpath, 0o755)


def _verifier_jail(
    c: Any, ws: Path, logs: Path, tests: Path, uid: int, env: Provisioned | None,
    script: ScriptTests, limits: Limits, timeout_s: float, network: bool, tag: str,
) -> JailSpec:  # fmt: skip
    """The verifier's jail over the copied workspace ``ws``: ``tests`` read-only at /tests,
    ``logs`` writable at /logs, the environment's mounts and variables (its workdir the cwd)."""
    ro = [(str(tests), TESTS_MOUNT)]
    rw = [(str(logs), LOGS_MOUNT)]
    jenv: dict[str, str] = {}
    cwd = WORKSPACE
    if env is not None:
        ero, erw = env.binds(ws)
        ro, rw, jenv, cwd = ro + ero, rw + erw, env.jail_env(), env.spec.workdir
    return JailSpec(
        argv=["/bin/sh", "-c", script.command], workspace=ws, uid=uid, limits=limits,
        timeout_s=timeout_s, network=network, cwd=cwd, ro_binds=ro, binds=rw, env=jenv,
        name=f"v-{tag}", isolation=c.isolation,
    )  # fmt: skip


@dataclass
class _Ran:
    """What a verifier jail did (a bwrap jail's :class:`JailOutcome` or a build jail's)."""

    exit_code: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float
    timed_out: bool
    oom: bool
    pids_limit: bool
    content_error: str = ""  # the image made the jail impossible (a link at the workdir)


def _in_image(
    c: Any, env: Provisioned, root: Path, ws: Path, logs: Path, tests: Path,
    script: ScriptTests, limits: Limits, timeout_s: float, proxy: egress.Proxy | None,
    above: tuple[str, ...] = (),
) -> _Ran:  # fmt: skip
    """``script.command`` as the image's root over a throwaway layer in ``root`` (module doc);
    ``above``: a session container's upper, stacked on the image under that layer."""
    image = env.image
    assert image is not None
    store = c.provisioner.layer_store
    store.touch(image.key)  # recently used: not the first evicted while it runs
    binds = [{"src": str(ws), "dst": WORKSPACE}, {"src": str(tests), "dst": TESTS_MOUNT, "ro": True},
             {"src": str(logs), "dst": LOGS_MOUNT}]  # fmt: skip
    if env.spec.workdir != WORKSPACE:
        binds.insert(1, {"src": str(ws), "dst": env.spec.workdir})
    plan: dict[str, Any] = overlay_plan(
        store, image.base_root, list(image.layers), root, above=above
    ) | {
        "op": "run", "cwd": env.spec.workdir, "user": "root", "env": env.jail_env(),
        "binds": binds, "argv": ["/bin/sh", "-c", script.command],
    }  # fmt: skip
    if proxy is not None:
        plan = egress_plan(plan, proxy)
    o = run_plan(
        plan, c.probe, timeout_s, limits.memory_mb, limits.pids, output_cap=limits.output_bytes,
        rlimits={"cpu": limits.cpu_s, "nofile": limits.open_files},
    )  # fmt: skip
    return _ran(o)


def _in_container(
    box: Container, env: Provisioned, root: Path, logs: Path, tests: Path, script: ScriptTests,
    limits: Limits, timeout_s: float, proxy: egress.Proxy | None, tag: str,
) -> _Ran:  # fmt: skip
    """``script.command`` as the image's root in the session's live container (module doc);
    ``root``: the verifier's own root dir (jail_main.py's ``_live_root``) is made in it."""
    (root / "live").mkdir(mode=0o755)
    os.chown(root / "live", UID_BASE, UID_BASE)
    binds = [{"src": str(tests), "dst": TESTS_MOUNT, "ro": True},
             {"src": str(logs), "dst": LOGS_MOUNT}]  # fmt: skip
    plan: dict[str, Any] = {
        "cwd": env.spec.workdir, "user": "root", "env": env.jail_env(), "binds": binds,
        "argv": ["/bin/sh", "-c", script.command], "root": str(root / "live"),
    }  # fmt: skip
    if proxy is not None:
        plan = egress_plan(plan, proxy, live=True)
    return _ran(box.verify(plan, limits, timeout_s, name=f"v-{tag}"))


def _ran(o: StepOutcome) -> _Ran:
    """A build jail's outcome as a verifier's; its setup's own failure raised, unless the
    image's content caused it (a verdict)."""
    content = ""
    if not o.started and not o.timed_out:  # jail_main.py printed why (no task code ran yet)
        why = (o.output.strip().splitlines() or [f"exit {o.exit_code}"])[-1]
        if "dockyard-build: content:" not in why:
            raise RuntimeError(f"the verifier's jail could not be set up: {why[:300]}")
        content = why.split("dockyard-build: content:", 1)[1].strip()
    return _Ran(
        o.exit_code, o.output, "", o.truncated, False, o.seconds, o.timed_out, o.oom, o.pids_limit,
        content,
    )  # fmt: skip


def _in_bwrap(
    c: Any, ws: Path, logs: Path, tests: Path, uid: int, env: Provisioned | None,
    script: ScriptTests, limits: Limits, timeout_s: float, network: bool, tag: str,
    proxy: egress.Proxy | None,
) -> _Ran:  # fmt: skip
    spec = _verifier_jail(c, ws, logs, tests, uid, env, script, limits, timeout_s, network, tag)
    if proxy is not None:  # the registries and the installer table only (module docstring)
        egress.attach(spec, proxy, sys.executable)
    o = jail_run(spec, c.probe)
    return _Ran(
        o.exit_code, o.stdout, o.stderr, o.stdout_truncated, o.stderr_truncated, o.duration_s,
        o.timed_out, o.oom, o.pids_limit,
    )  # fmt: skip


def _judge(
    o: _Ran, timings: Timings, full: bool, logs: Path, proxy: egress.Proxy | None,
    script: ScriptTests, result: Callable[..., TaskResult],
) -> TaskResult:  # fmt: skip
    """The verdict of a finished verifier jail: its limits, the network it was refused, the
    reward file (module docstring)."""
    common = {
        "exit_code": o.exit_code,
        "stdout": o.stdout,
        "stderr": o.stderr,
        "stdout_truncated": o.stdout_truncated,
        "stderr_truncated": o.stderr_truncated,
        "patch_applied": True,
        "timings": timings,
    }
    if o.content_error:
        return result(Verdict.failed, reward=0.0, reward_error=o.content_error,
                      detail=f"the verifier could not run in the image: {o.content_error}",
                      **common)  # fmt: skip
    limit = (
        Verdict.oom if o.oom
        else Verdict.resource_limit if o.pids_limit or full
        else Verdict.timeout if o.timed_out else None
    )  # fmt: skip
    if limit is not None:
        return result(limit, reward=0.0, reward_error=str(limit), detail=str(limit), **common)
    refused = proxy.needs_network() if proxy is not None else None
    if refused is not None and script.allow_internet:
        return result(Verdict.needs_network, detail=refused, **common)
    reward, err = parse_reward(logs)
    verdict = Verdict.passed if reward >= 1.0 and not err else Verdict.failed
    detail = err or f"reward {reward:g} (test script exit {o.exit_code})"
    if refused is not None:  # reported; the reward stands (module docstring)
        detail += f"; {refused}"
    return result(
        verdict, resolved=verdict == Verdict.passed, reward=reward, reward_error=err,
        detail=detail, **common,
    )  # fmt: skip


def run_script(
    ctx: object,
    *,
    source: Path,
    still: Callable[[], contextlib.AbstractContextManager[object]],
    env: Provisioned | None,
    script: ScriptTests,
    limits: Limits,
    timeout_s: float,
    network: bool,
    metadata: dict,
    task_id: str,
    upper: Path | None = None,
    live: Container | None = None,
) -> TaskResult:
    """See the module docstring. ``source`` (the session's workspace) is copied inside
    ``still()``: the session's lock, its terminal frozen; ``upper``: the session container's
    writable layer, under the verifier's own (``layers/container.py``); ``live``: the session's
    container, which the verifier joins (``still()`` held meanwhile: the session's lock)."""
    if script.egress and not getattr(ctx, "allow_network", False):
        raise ValueError(
            "script.egress: the verifier reaches the package registries through the service's "
            "egress proxy, which needs the service's --allow-network"
        )
    t0 = time.monotonic()
    c = ctx
    tag = uuid.uuid4().hex[:12]
    image = env is not None and env.image is not None
    uid = UID_BASE if image else c.uids.acquire()  # type: ignore[attr-defined]
    # an image's verifier jail reaches its dirs as an unprivileged host uid (Provisioner.scratch)
    wss = c.provisioner.scratch if image else c.workspaces  # type: ignore[attr-defined]
    made: list[Path] = []
    tests = c.trusted_root / f"tests-{tag}"  # type: ignore[attr-defined]
    proxy: egress.Proxy | None = None

    def result(verdict: Verdict, **kw: object) -> TaskResult:
        kw.setdefault("timings", Timings(total_s=time.monotonic() - t0))
        return TaskResult(task_id=task_id, verdict=verdict, metadata=metadata, **kw)  # type: ignore[arg-type]

    try:
        ws = source  # a live container's verifier works in the session's own
        if live is None:
            ws = wss.create(f"v-{tag}", uid, limits.disk_mb, limits.inodes)
            made.append(ws)
            with still():
                full = copy_workspace(source, ws, uid)
            if full:
                return result(Verdict.resource_limit, detail=full, reward=0.0)
        logs = wss.create(f"v-{tag}-logs", uid, 16, 1000)
        made.append(logs)
        for d in ("verifier", "agent"):
            (logs / d).mkdir()
            os.chown(logs / d, uid, uid)
        root = None
        if image:  # the throwaway layer, /tests and the proxy's dir: where the jail's root reaches
            root = wss.create(f"v-{tag}-root", UID_BASE, limits.disk_mb, limits.inodes)
            made.append(root)
            tests = root / "tests"
        _write_tests(tests, script)
        if script.egress:
            proxy = egress.Proxy((root or c.trusted_root) / f"egress-{tag}", uid,  # type: ignore[attr-defined]
                                 egress.Allowlist.build(getattr(c, "registries", ())))  # fmt: skip
        t1 = time.monotonic()
        if live is not None:
            assert env is not None
            with still():
                o = _in_container(live, env, root, logs, tests, script, limits, timeout_s,
                                  proxy, tag)  # fmt: skip
        elif root is not None:
            assert env is not None
            with still() if upper is not None else contextlib.nullcontext():
                o = _in_image(c, env, root, ws, logs, tests, script, limits, timeout_s, proxy,
                              above=(str(upper),) if upper is not None else ())  # fmt: skip
        else:
            o = _in_bwrap(c, ws, logs, tests, uid, env, script, limits, timeout_s, network, tag,
                          proxy)  # fmt: skip
        timings = Timings(test_s=o.duration_s, setup_s=t1 - t0, total_s=time.monotonic() - t0)
        full = wss.full(ws) or (root is not None and wss.full(root))
        if live is not None:  # what it wrote went to the session's layer
            full = wss.full(ws) or wss.full(live.upper.parent)
        return _judge(o, timings, full, logs, proxy, script, result)
    finally:
        if proxy is not None:
            proxy.close()
        shutil.rmtree(tests, ignore_errors=True)
        for p in made:
            wss.destroy(p)
        if not image:
            c.uids.release(uid)  # type: ignore[attr-defined]
