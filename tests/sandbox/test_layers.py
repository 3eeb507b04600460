"""Layered images (``dockyard.sandbox.layers``) against the real service: Docker's semantics.

One service (``layers_sandbox``: --allow-network, the shared layer cache) builds small images
over ``debian:trixie``; sessions over them check what landed where. The unit tests at the top
need no jail (the spec's validation, the store's eviction order).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from dockyard.sandbox.client import SandboxRequestError
from dockyard.sandbox.egress import non_public_registries
from dockyard.sandbox.launch import start_service
from dockyard.sandbox.layers.spec import ImageSpec
from dockyard.sandbox.layers.store import Store
from dockyard.sandbox.testing import calc_task, layer_cache_dir

BASE = "debian:trixie"


def _tar(entries: dict[str, bytes | None], modes: dict[str, int] | None = None) -> str:
    """A copy payload: ``None`` makes a directory entry."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in entries.items():
            ti = tarfile.TarInfo(name)
            if data is None:
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            else:
                ti.size, ti.mode = len(data), (modes or {}).get(name, 0o644)
                tf.addfile(ti, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def _env(stages: list[dict], workdir: str = "/app") -> dict:
    return {"workdir": workdir, "image": {"stages": stages}, "timeout_s": 600}


# -- no jail -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"stages": [{"base": "alpine:3"}]}, "one of debian:<release>"),
        (
            {"stages": [{"base": "stage:later"}, {"name": "later", "base": BASE}]},
            "not an earlier stage",
        ),
        (
            {"stages": [{"base": BASE, "steps": [{"run": "x", "user": "root"}]}]},
            "exactly one operation",
        ),
        (
            {"stages": [{"base": BASE, "steps": [{"copy": {"dest": "/x", "names": []}}]}]},
            "exactly one of files",
        ),
        ({"stages": [{"base": BASE, "steps": [{"workdir": "relative"}]}]}, "absolute path"),
    ],
)
def test_image_spec_refuses(spec: dict, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        ImageSpec.model_validate(spec)


def _fake_layer(
    store: Store, key: str, parent: str, chain: list[str], size: int, age: float
) -> None:
    d = store.layers_dir / key
    (d / "diff").mkdir(parents=True)
    (d / "diff" / "blob").write_bytes(b"x" * size)
    meta = {"parent": parent, "chain": chain, "step": "RUN x", "bytes": size, "seconds": 0.1}
    (d / "meta.json").write_text(json.dumps(meta))
    t = time.time() - age
    os.utime(d / "meta.json", (t, t))


def test_store_evicts_least_recently_used_with_descendants(tmp_path: Path) -> None:
    store = Store(tmp_path / "store", max_bytes=250_000)
    _fake_layer(store, "a" * 32, "base:x", [], 100_000, age=500)  # oldest
    _fake_layer(store, "b" * 32, "a" * 32, ["a" * 32], 100_000, age=10)  # child of a, recent
    _fake_layer(store, "c" * 32, "base:x", [], 100_000, age=300)
    _fake_layer(store, "d" * 32, "base:x", [], 100_000, age=1)
    assert store.stats()["layer_bytes"] >= 400_000
    gone = store.evict(protect={"d" * 32})
    # a is the least recently used: it goes with its descendant b (built on it) -> 200 kB left
    assert gone == ["a" * 32, "b" * 32]
    assert sorted(p.name for p in store.layers_dir.iterdir()) == ["c" * 32, "d" * 32]
    assert store.stats()["evicted"] == 2
    store.max_bytes = 0
    assert store.evict(protect={"d" * 32}) == ["c" * 32]  # never a protected image's layers


def test_a_layer_cache_behind_a_closed_directory_is_named() -> None:
    """The build jails' root is an unprivileged host uid: a cache below a directory closed to
    other users (a 0700 temporary dir) would fail at the first mount; it is named instead."""
    import tempfile

    from dockyard.sandbox.layers.build import closed_ancestor

    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        top = Path(d)
        os.chmod(top, 0o711)
        (top / "private" / "cache").mkdir(parents=True)
        os.chmod(top / "private", 0o700)
        assert closed_ancestor(top / "private" / "cache") == top / "private"
        os.chmod(top / "private", 0o711)
        assert closed_ancestor(top / "private" / "cache") is None
        assert closed_ancestor(top / "private" / "not-yet") is None


# -- the real service ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def _module_client(layers_sandbox):
    with layers_sandbox.client() as c:
        yield c


@pytest.fixture
def client(_module_client, monkeypatch):
    """The module's client; the sessions a test opens are deleted when it ends (the service
    is the whole run's: a session left open keeps its terminal's processes until its TTL)."""
    opened: list[str] = []
    create = _module_client.create_session

    def create_session(spec=None):
        sid = create(spec)
        opened.append(sid)
        return sid

    monkeypatch.setattr(_module_client, "create_session", create_session)
    yield _module_client
    for sid in opened:
        _module_client.delete_session(sid)


def _stats(svc) -> dict:
    r = httpx.get(f"{svc.url}/v1/environments/stats", timeout=30)
    r.raise_for_status()
    return r.json()


def test_run_steps_land_at_real_paths(client) -> None:
    """apt through the registry proxy with maintainer scripts, /etc, / outside the workdir,
    a whiteout and an opaque directory; the image is / of the session, read-only."""
    env = _env([{"base": BASE, "steps": [
        {"workdir": "/app"},
        {"run": "apt-get update && apt-get install -y --no-install-recommends cron "
                "&& rm -rf /var/lib/apt/lists/*"},
        {"run": "mkdir -p /fonts && echo glyph > /fonts/a.bdf && echo conf=1 > /etc/tool.conf"},
        {"run": "rm /etc/debian_version && rm -rf /etc/apt/apt.conf.d && mkdir /etc/apt/apt.conf.d "
                "&& touch /etc/apt/apt.conf.d/only-me"},
    ]}])  # fmt: skip
    sid = client.create_session({"environment": env})
    r = client.exec(sid, "getent group crontab; cat /fonts/a.bdf /etc/tool.conf; "
                    "ls /etc/apt/apt.conf.d; test -e /etc/debian_version || echo whiteout-ok; "
                    "stat -c '%U %G' /etc/crontab /usr/bin/crontab; pwd")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("crontab:x:")  # cron's postinst made the group
    assert lines[1:3] == ["glyph", "conf=1"]
    assert lines[3:5] == ["only-me", "whiteout-ok"]  # opaque dir, deleted file
    assert lines[5:7] == ["root root", "root crontab"]  # id-mapped: owners as in the image
    assert lines[7] == "/app"
    screen = client.tty(sid, ["cat /etc/tool.conf", "<Enter>"], wait_s=1.0).screen
    assert "conf=1" in screen  # the terminal (tmux, from the base root) runs over the image too
    # not a container (the jails of a plain session: an unprivileged uid, the image read-only)
    plain = client.create_session({"environment": env, "container": False})
    w = client.exec(plain, "echo x > /etc/tool.conf; echo y > new.txt && cat new.txt; id -u")
    assert "Read-only file system" in w.stderr
    assert w.stdout.splitlines()[0] == "y"
    assert w.stdout.splitlines()[1] != "0"


CONTAINER_VERIFIER = """set -u
cat /etc/tool.conf /opt/agent/f /app/work.txt /etc/tty.txt
test -S /tmp/.tty/sock || echo no-tty-socket
n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done; test "$n" -lt 6 && echo few-processes
echo 1 > /logs/verifier/reward.txt
"""


def test_a_session_runs_as_the_images_container(client) -> None:
    """A session over an image is Docker's container of it: commands and the terminal run as
    the image's root over the session's own writable layer (/etc, /opt writable; what one
    command writes the next and the terminal see); a command's background processes run on,
    as under ``docker exec``; the verifier sees every change the agent made, none of its
    processes; another session of the same image sees none of it."""
    env = _env(
        [{"base": BASE, "steps": [{"workdir": "/app"}, {"run": "echo conf=1 > /etc/tool.conf"}]}]
    )
    sid = client.create_session({"environment": env})
    r = client.exec(sid, "id -u; echo x >> /etc/tool.conf && mkdir -p /opt/agent && "
                    "echo hi > /opt/agent/f && echo w > work.txt && pwd; "
                    "sleep 300 > /dev/null 2>&1 & echo $! > /tmp/bg")  # fmt: skip
    assert r.exit_code == 0, r
    assert r.stdout.split() == ["0", "/app"], r
    again = client.exec(sid, "cat /etc/tool.conf /opt/agent/f; "
                        "kill -0 $(cat /tmp/bg) 2>/dev/null && echo bg-runs; echo oops >&2")  # fmt: skip
    assert again.stdout.split() == ["conf=1", "x", "hi", "bg-runs"], again
    assert again.stderr == "oops\n"  # stdout and stderr apart, as docker exec keeps them
    # a background process that keeps writing to the command's stdout after it ended runs on
    # (what it writes later is dropped, not a SIGPIPE that kills it) and does not hold the call
    # (a call the ticker held would end at its 30 s wall clock, timed out, the ticker killed)
    r = client.exec(sid, "(while :; do echo tick; sleep 0.05; done) & echo $! > /tmp/ticker")
    assert r.exit_code == 0, r
    assert not r.timed_out, r
    ticking = client.exec(sid, "sleep 0.5; kill -0 $(cat /tmp/ticker) && echo ticking")
    assert ticking.stdout == "ticking\n", ticking
    client.exec(sid, "kill $(cat /tmp/ticker)")
    # the host processes that hold the container (pid 1) or enter it (the command's parent)
    # are closed to its root: no fd, environment or memory of theirs to read (not dumpable)
    peek = client.exec(sid, "for p in 1 $PPID; do for f in fd/0 environ mem; do "
                       "cat /proc/$p/$f > /dev/null 2>&1 && echo open:$p/$f; done; done; "
                       "cat /proc/$$/environ > /dev/null && echo own-open")  # fmt: skip
    assert peek.stdout == "own-open\n", peek
    screen = client.tty(sid, ["id -u > /etc/tty.txt; cat /etc/tool.conf", "<Enter>"], wait_s=1.0)
    assert "conf=1" in screen.screen, screen
    assert client.exec(sid, "cat /etc/tty.txt").stdout == "0\n"  # the terminal's root, its file
    assert client.get_file(sid, "work.txt") == b"w\n"
    other = client.create_session({"environment": env})
    o = client.exec(other, "cat /etc/tool.conf; test -e /opt/agent || echo no-agent; ls")
    assert o.stdout.split() == ["conf=1", "no-agent"], o
    script = {"files": {"test.sh": "true\n"}, "command": CONTAINER_VERIFIER}
    v = client.finish(sid, {"script": script, "timeout_s": 60})
    assert v.verdict == "passed", v
    assert v.stdout.split() == ["conf=1", "x", "hi", "w", "0", "no-tty-socket", "few-processes"], v
    with pytest.raises(SandboxRequestError, match="container"):
        client.create_session({"environment": env, "container": True, "network": True})
    desk = client._request("POST", f"/v1/sessions/{other}/desktop", json={})  # none in one (yet)
    assert desk.status_code == 422, desk.text
    assert "container=false" in desk.text


def test_a_session_start_takes_a_warm_container_that_ran_nothing(client, layers_sandbox) -> None:
    """After a container session of one kind (an image, its limits) the service keeps another
    started (warmpool.py); the next session of that kind takes it — a hit in the stats — and it
    is a container of its own that ran nothing: none of the first session's files, processes or
    workspace, its setup_command run after the take. Another kind's session is a miss."""
    mark = uuid.uuid4().hex  # a kind no other test asks for
    env = _env(
        [{"base": BASE, "steps": [{"workdir": "/app"}, {"run": f"echo {mark} > /etc/kind"}]}]
    )
    first = client.create_session({"environment": env})
    r = client.exec(first, "echo x > /etc/tool; echo w > work.txt; (sleep 300 &) ; echo ok")
    assert r.stdout == "ok\n", r
    deadline = time.monotonic() + 30
    while _stats(layers_sandbox)["warm_ready"] < 1:
        assert time.monotonic() < deadline, _stats(layers_sandbox)
        time.sleep(0.05)
    hits = _stats(layers_sandbox)["warm_hits"]
    second = client.create_session({"environment": env, "setup_command": "echo s > set.txt"})
    assert _stats(layers_sandbox)["warm_hits"] == hits + 1
    o = client.exec(second, "cat /etc/kind; test -e /etc/tool || echo no-tool; ls; n=0; "
                    "for c in /proc/[0-9]*/comm; do read p < $c; [ $p = sleep ] && n=$((n+1)); "
                    "done; echo $n; id -u; pwd")  # fmt: skip
    assert o.stdout.split() == [mark, "no-tool", "set.txt", "0", "0", "/app"], o
    assert client.exec(first, "cat /etc/tool work.txt").stdout == "x\nw\n"
    other = client.create_session({"environment": env, "limits": {"memory_mb": 768}})
    assert _stats(layers_sandbox)["warm_hits"] == hits + 1  # another kind: its own pool
    assert client.exec(other, "cat /etc/kind").stdout == f"{mark}\n"


def test_commands_get_dockers_signal_dispositions(client) -> None:
    """A build step and a container session's command start with every signal at its default
    and none blocked, as Docker's do, whatever the service inherited (its Python ignores SIGPIPE
    and SIGXFSZ; run under `nohup`, SIGHUP): `yes | head -1` ends quietly. (A spawned command
    has glibc's two internal signals ignored, as every program ``posix_spawn`` starts: glibc
    installs its handlers for them when it needs them.)"""
    mark = uuid.uuid4().hex
    env = _env([{"base": BASE, "steps": [
        {"run": f"echo {mark}; grep -E 'Sig(Ign|Blk)' /proc/self/status > /etc/build-sigign"},
    ]}])  # fmt: skip
    r = client.exec(
        client.create_session({"environment": env}),
        "yes | head -1; cat /etc/build-sigign; grep -E 'Sig(Ign|Blk)' /proc/self/status",
    )
    assert (r.stdout.splitlines()[0], r.stderr) == ("y", ""), r
    masks = [int(line.split()[1], 16) for line in r.stdout.splitlines()[1:]]
    assert len(masks) == 4, r  # blocked, ignored; build step, then command
    for mask in masks:  # bit n-1: signal n
        assert mask & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)) == 0, hex(mask)
        assert mask & ~(3 << 31) == 0, hex(mask)  # nothing else but glibc's 32 and 33


def test_a_second_service_on_the_cache_leaves_its_images_mounted(client, layers_sandbox) -> None:
    """Two services on one ``--env-cache-dir``, an image both mounted: the second stops, and
    the first's sessions still run on it — a session whose commands are jails over the image
    (``container: false``) included. The last service to stop unmounts the images."""
    mark = uuid.uuid4().hex
    env = _env([{"base": BASE, "steps": [{"run": f"echo {mark} > /etc/kind"}]}])
    jails = client.create_session({"environment": env, "container": False})
    assert client.exec(jails, "cat /etc/kind").stdout == f"{mark}\n"
    args = ["--allow-network", "--env-cache-dir", layer_cache_dir()]
    for host in non_public_registries():  # as the module's service was started
        args += ["--registry", host]
    with start_service(workers=1, extra_args=args) as other, other.client() as c:
        sid = c.create_session({"environment": env})  # the image as the first mounted it
        assert c.exec(sid, "cat /etc/kind").stdout == f"{mark}\n"
    r = client.exec(jails, "cat /etc/kind")
    assert (r.exit_code, r.stdout) == (0, f"{mark}\n"), r


def test_copy_user_and_multi_stage_follow_docker(client) -> None:
    files = _tar({"s0": b"one\n"})
    tree = _tar({"s0": None, "s0/a.txt": b"a\n", "s0/sub": None, "s0/sub/b.sh": b"#!/bin/sh\n"},
                modes={"s0/sub/b.sh": 0o755})  # fmt: skip
    build = [{"workdir": "/src"}, {"run": "mkdir -p out/lib && echo built > out/lib/art.txt"}]
    env = _env([
        {"name": "build", "base": BASE, "steps": build},
        {"base": BASE, "steps": [
            {"run": "useradd -u 1500 -m dev && chmod 755 /home/dev"},
            {"workdir": "/app"},
            {"copy": {"files": files, "names": ["one.txt"], "dest": "/app"}},  # existing dir: into
            {"copy": {"files": files, "names": ["one.txt"], "dest": "/opt/renamed"}},  # a file
            {"copy": {"files": files, "names": ["one.txt"], "dest": "/opt/newdir/"}},  # slash: into
            {"copy": {"files": tree, "names": ["tree"], "dest": "/opt/tree", "chown": "dev:dev"}},
            {"copy": {"files": files, "names": ["one.txt"], "dest": "/opt/x.txt", "chmod": "0600"}},
            {"copy": {"from_stage": "build", "paths": ["/src/out/lib"], "names": ["lib"], "dest": "/opt/lib"}},
            {"user": "dev"},
            {"run": "whoami > /home/dev/me"},
        ]},
    ])  # fmt: skip
    sid = client.create_session({"environment": env})
    r = client.exec(sid, "cat one.txt /opt/renamed /opt/newdir/one.txt; ls /opt/tree; ls /opt/tree/sub; "
                    "stat -c '%U %a' /opt/tree/a.txt /opt/tree/sub/b.sh /opt/x.txt /opt/renamed; "
                    "cat /opt/lib/art.txt /home/dev/me; test -e /src || echo no-src")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines() == [
        "one", "one", "one", "a.txt", "sub", "b.sh",
        "dev 644", "dev 755", "root 600", "root 644", "built", "dev", "no-src",
    ]  # fmt: skip


def test_unchanged_prefix_is_reused_and_failures_name_the_step(layers_sandbox, client) -> None:
    steps = [{"workdir": "/app"}, {"run": "echo one > /app/one"}, {"run": "echo two > /app/two"}]
    client.create_session({"environment": _env([{"base": BASE, "steps": steps}])})
    before = _stats(layers_sandbox)
    nonce = uuid.uuid4().hex  # the layer cache outlives test runs: a step it has never seen
    changed = [*steps[:2], {"run": f"echo three > /app/two # {nonce}"}]
    sid = client.create_session({"environment": _env([{"base": BASE, "steps": changed}])})
    after = _stats(layers_sandbox)
    # WORKDIR and the first RUN come from the cache; the changed RUN and the mount-point layer
    # over it are new
    assert after["layers_built"] - before["layers_built"] == 2
    assert after["layers_cached"] - before["layers_cached"] >= 2
    assert after["layer_cache_layers"] > 0
    assert after["layer_cache_base_bytes"] > 0
    assert client.exec(sid, "cat one two").stdout == "one\nthree\n"
    bad = [*steps[:2], {"run": f"echo about to fail; exit 3 # {nonce}"}]
    with pytest.raises(SandboxRequestError) as e:
        client.create_session({"environment": _env([{"base": BASE, "steps": bad}])})
    detail = e.value.detail
    assert e.value.status == 422
    assert detail["step"] == 3
    assert detail["exit_code"] == 3
    assert "about to fail" in detail["log"]
    assert "exited 3" in detail["provision_failed"]


def test_one_shot_task_runs_its_tests_over_the_image(client) -> None:
    """A one-shot task whose environment is an image: the repository is the workspace, the
    held-out tests run with the service's runner (its interpreter bound at mount points the
    image's top layer holds), the image's own files are visible to the code under test."""
    env = _env([{"base": BASE, "steps": [{"run": "mkdir -p /etc/calc && echo 5 > /etc/calc/expected"}]}],
               workdir="/workspace")  # fmt: skip
    test = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == int(open('/etc/calc/expected').read())\n"
    bad = client.run_task(calc_task(patch="", environment=env, test_files={"tests/test_img.py": test},
                                    tests={"fail_to_pass": ["tests/test_img.py::test_add"]}))  # fmt: skip
    good = client.run_task(calc_task(environment=env, test_files={"tests/test_img.py": test},
                                     tests={"fail_to_pass": ["tests/test_img.py::test_add"]}))  # fmt: skip
    assert bad.verdict == "failed", bad
    assert good.verdict == "passed", good


def test_a_tasks_pytest_runner_runs_on_the_images_python(layers_sandbox, client) -> None:
    """``tests.python``: the sandbox's pytest runner on an image's interpreter, with the image's
    pytest and packages (a SWE-bench environment built by the layered builder). The same tests
    on the service's own interpreter (3.11, its pytest) fail; naming an interpreter without an
    image, or for another runner, is refused before anything runs."""
    env = _env([{"base": "python:trixie", "steps": [{"run": "python -m pip install pytest==8.3.4"}]}],
               workdir="/workspace")  # fmt: skip
    test = ("import sys\n\nimport pytest\n\n\ndef test_image():\n"
            "    assert sys.version_info[:2] == (3, 13), sys.version\n"
            "    assert pytest.__version__ == '8.3.4', pytest.__version__\n")  # fmt: skip
    tests = {"fail_to_pass": ["tests/test_img.py::test_image"], "python": "python"}
    on_image = client.run_task(calc_task(environment=env, test_files={"tests/test_img.py": test}, tests=tests))  # fmt: skip
    assert on_image.verdict == "passed", on_image
    tests.pop("python")
    on_service = client.run_task(calc_task(environment=env, test_files={"tests/test_img.py": test}, tests=tests))  # fmt: skip
    assert on_service.verdict == "failed", on_service
    assert on_service.tests == {"tests/test_img.py::test_image": "failed"}, on_service
    # a client that skips the model's checks: the service refuses (422) before any jail
    body = calc_task(environment=env, tests=tests).model_dump(mode="json")
    refused = {
        "has no image": {**body, "environment": None, "tests": {**tests, "python": "python"}},
        "applies to runner 'pytest'": {**body, "tests": {**tests, "python": "python", "runner": "plain"}},
        "command name or an absolute path": {**body, "tests": {**tests, "python": "-c"}},
    }  # fmt: skip
    for why, bad in refused.items():
        r = httpx.post(f"{layers_sandbox.url}/v1/tasks:run", json=bad, timeout=60)
        assert r.status_code == 422, (why, r.text)
        assert why in r.text, (why, r.text)


ROOT_VERIFIER = """set -u
id -u; echo "$HOME"; cat /app/out.txt
echo v > /etc/verifier-was-here && echo etc-ok
mkdir -p /opt/new/deep && echo opt-ok
{ echo x > /tests/planted; } 2>/dev/null || echo tests-ro
rm -f /tests/test.sh 2>/dev/null; test -f /tests/test.sh && echo tests-kept
mount -o remount,rw /tests 2>/dev/null; { echo y >> /tests/test.sh; } 2>/dev/null || echo tests-owned
sha256sum /tests/fixture.bin | cut -c1-64
echo 1 > /logs/verifier/reward.txt
"""


def test_script_verifier_runs_as_the_images_root(client) -> None:
    """A Harbor verifier over an image runs as Docker runs it: the image's root (a user
    namespace's) over a throwaway layer, so writes under /etc and /opt work; the agent's work at
    the workdir; /tests unchangeable even by that root (owned outside its id map, even after a
    remount); nothing of the verifier is left for the next session of the same image."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}, {"run": "echo seed > /etc/seed"}]}])
    sid = client.create_session({"environment": env})
    assert client.exec(sid, "echo answer > out.txt").exit_code == 0
    blob = bytes(range(256)) * 3  # not UTF-8: a binary fixture travels base64
    script = {"files": {"test.sh": "true\n"}, "command": ROOT_VERIFIER,
              "binary_files": {"fixture.bin": base64.b64encode(blob).decode()}}  # fmt: skip
    r = client.finish(sid, {"script": script, "timeout_s": 120})
    assert r.verdict == "passed", r
    assert r.stdout.split() == [
        "0", "/root", "answer", "etc-ok", "opt-ok", "tests-ro", "tests-kept", "tests-owned",
        hashlib.sha256(blob).hexdigest(),
    ], r.stdout  # fmt: skip
    again = client.create_session({"environment": env})
    after = client.exec(again, "cat /etc/seed; test -e /etc/verifier-was-here || echo gone; "
                        "test -e /opt/new || echo gone; ls /app")  # fmt: skip
    assert after.stdout.split() == ["seed", "gone", "gone"], after


@pytest.mark.parametrize(
    "fake",
    ["dockyard-build: content: /app is not a directory", "dockyard-build: mount overlay /x: EPERM"],
)
def test_a_verifier_cannot_pass_for_the_jails_setup(client, fake: str) -> None:
    """What a verifier script prints and its exit code are its own: a script imitating the
    build jail's setup failure (exit 125 and its message) is a failed verdict with reward 0, not
    infra_error (which the trainer masks) nor a 5xx: the jail's setup reports on its own pipe."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env})
    script = {"files": {"test.sh": "true\n"}, "command": f"echo '{fake}' >&2; exit 125"}
    r = client.finish(sid, {"script": script, "timeout_s": 60})
    assert r.verdict == "failed", r
    assert r.reward == 0.0, r
    assert r.exit_code == 125, r


@pytest.mark.parametrize("live", [False, True])
def test_a_verifier_filling_its_layer_is_a_resource_limit(client, live: bool) -> None:
    """The verifier's writable layer is a tmpfs of disk_mb — its throwaway layer's (the
    task's limits), or in the live container the session's own: filling it (anywhere in the
    image, not only the workdir) is the task's resource_limit, reward 0."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    small = {"disk_mb": 32}
    sid = client.create_session({"environment": env, **({"limits": small} if live else {})})
    script = {"files": {"test.sh": "true\n"},
              "command": "head -c 64M /dev/zero > /var/big; echo 1 > /logs/verifier/reward.txt"}  # fmt: skip
    req = {"script": script, "timeout_s": 60, "live": live}
    r = client.finish(sid, req if live else req | {"limits": small})
    assert r.verdict == "resource_limit", r
    assert r.reward == 0.0


# the agent leaves a server on localhost:8000 (an exec) and a loop planting a reward file (its
# terminal)
SERVER = (
    'perl -MIO::Socket::INET -e \'$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:8000", '
    'Listen => 5, ReuseAddr => 1) or die; while ($c = $s->accept) { print $c "pong\\n"; '
    "close $c }' > /dev/null 2>&1 &"
)
PLANTER = (
    "(while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.05; done) &"
)
ASK = "perl -MIO::Socket::INET -e '$c = IO::Socket::INET->new(\"127.0.0.1:8000\") or exit 1; print scalar <$c>'"
LIVE_VERIFIER = f"""test "$({ASK} 2>/dev/null)" = pong && echo served
n=0; for p in /proc/[0-9]*; do n=$((n + 1)); done; test "$n" -lt 6 && echo few-processes
test -S /tmp/.tty/sock || echo no-tty-socket
echo "$EXPECT" > /logs/verifier/reward.txt; sleep 0.5; cat /logs/verifier/reward.txt
"""


def test_a_live_verifier_is_served_by_the_agents_daemon_and_keeps_its_reward_file(client) -> None:
    """By default a container session's verifier runs in the live container, as Harbor's
    ``docker exec``: a server the agent left running (started in the background by an exec,
    which runs on as under Docker) answers it on localhost. Its /logs is its own: the agent's
    loop (in its terminal) writing 1 into /logs/verifier/reward.txt all along cannot turn the
    verifier's 0 into a pass. It sees none of the agent's processes, nor its terminal. ``live:
    false`` is the frozen container: no server answers. A command that times out takes what it
    started with it."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env})
    started = client.exec(sid, SERVER)
    assert started.exit_code == 0, started
    client.tty(sid, [PLANTER, "<Enter>"], wait_s=0.5)
    up = client.exec(sid, f"for i in $(seq 100); do {ASK} 2>/dev/null && exit 0; sleep 0.1; done")
    assert up.stdout == "pong\n", up
    late = client.exec(sid, "sleep 300 & echo $! > /tmp/late; sleep 30", timeout_s=1)
    assert late.timed_out, late
    gone = client.exec(sid, "kill -0 $(cat /tmp/late) 2>/dev/null || echo gone")
    assert gone.stdout == "gone\n", gone

    def verify(expect: int, **kw: object):
        script = {"files": {"test.sh": "true\n"}, "command": f"EXPECT={expect}\n{LIVE_VERIFIER}"}
        return client.finish(sid, {"script": script, "timeout_s": 60, **kw})

    good = verify(1)
    assert good.verdict == "passed", good
    assert good.stdout.split() == ["served", "few-processes", "no-tty-socket", "1"], good
    bad = verify(0)
    assert bad.verdict == "failed", bad
    assert bad.reward == 0.0
    assert bad.stdout.split() == ["served", "few-processes", "no-tty-socket", "0"], bad
    frozen = verify(1, live=False)
    assert frozen.stdout.split() == ["few-processes", "no-tty-socket", "1"], frozen
    planted = client.exec(sid, "cat /logs/verifier/reward.txt")  # the agent's own /logs
    assert planted.stdout == "1\n", planted
    with pytest.raises(SandboxRequestError, match="live"):
        verify(1, live=True, agent_layer=False)


# the agent listens where a live verifier's forwarder once did (and where its own is): every
# connection it takes is written down
SQUATTER = (
    "for port in 3129 3130; do perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr "
    '=> "127.0.0.1:$ARGV[0]", Listen => 5, ReuseAddr => 1) or die; while ($c = $s->accept) '
    '{ system("echo took >> /tmp/took"); print $c "HTTP/1.0 200 OK\\r\\n\\r\\nagent"; '
    "close $c }' $port > /dev/null 2>&1 & done"
)
FETCH = (
    "perl -MIO::Socket::INET -e '($h) = $ENV{http_proxy} =~ m{//([^/]+)}; $c = IO::Socket::INET"
    '->new($h) or die "no proxy at $h"; print $c "GET http://deb.debian.org/debian/ HTTP/1.0'
    '\\r\\nHost: deb.debian.org\\r\\n\\r\\n"; local $/; print <$c> =~ /agent/ ? "agent\\n" '
    ': "proxy\\n"\''
)


def test_a_live_verifiers_egress_is_not_an_agents_listener(client) -> None:
    """A live verifier shares the agent's network namespace: its registry forwarder listens on
    a port the kernel picks, so an agent's process listening on the ports a verifier could
    be given takes none of its traffic (it would see the verifier's requests and answer them)."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env, "egress": True})
    assert client.exec(sid, SQUATTER).exit_code == 0
    up = client.exec(sid, "for i in $(seq 100); do perl -MIO::Socket::INET -e 'exit !IO::Socket"
                     "::INET->new(\"127.0.0.1:3129\")' && exit 0; sleep 0.1; done; exit 1")  # fmt: skip
    assert up.exit_code == 0, up
    client.exec(sid, "rm -f /tmp/took")
    script = {"files": {"test.sh": "true\n"}, "egress": True,
              "command": f"{FETCH}; echo 1 > /logs/verifier/reward.txt"}  # fmt: skip
    r = client.finish(sid, {"script": script, "timeout_s": 60})
    assert r.stdout == "proxy\n", r
    took = client.exec(sid, "cat /tmp/took 2>/dev/null | wc -l")
    assert took.stdout.strip() == "0", took


def test_a_containers_apt_install_reaches_the_verifier(client) -> None:
    """A Terminal-Bench-style solution: the agent `apt-get install`s a tool as the image's root,
    through its session's registry proxy (no other network), and the held-out tests use it."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env, "egress": True})
    r = client.exec(sid, "apt-get update -qq && apt-get install -y -qq --no-install-recommends jq "
                    "> /dev/null && echo '{\"a\": 41}' > in.json && jq .a in.json", timeout_s=300)  # fmt: skip
    assert r.exit_code == 0, r
    assert r.stdout.splitlines()[-1] == "41", r
    tests = 'test "$(jq .a /app/in.json)" = 41 && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt'
    script = {"files": {"test.sh": "true\n"}, "command": tests}
    # agent_layer=False: the image as built + the workspace (in.json, but no jq)
    strict = client.finish(sid, {"script": script, "timeout_s": 60, "agent_layer": False})
    assert strict.verdict == "failed", strict
    assert client.finish(sid, {"script": script, "timeout_s": 60}).verdict == "passed"


def _holder_of(mark: str) -> list[int]:
    """Host pids of container holders (pid 1 of their pid namespace, ``jail_main.py``) whose
    root holds ``/etc/mark`` with ``mark`` (read through ``/proc/<pid>/root``, as the host's
    root)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
            if b"jail_main.py" not in (d / "cmdline").read_bytes():
                continue
            nspid = next(line for line in status.splitlines() if line.startswith("NSpid:"))
            if nspid.split()[-1] != "1" or (d / "root/etc/mark").read_text().strip() != mark:
                continue
        except (OSError, StopIteration):
            continue
        found.append(int(d.name))
    return found


def test_a_container_whose_pid_1_died_is_started_again(client) -> None:
    """A container's pid 1 killed (from the host: its own root cannot signal it) is started
    again at the next command over the same writable layer: the files survive."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env})
    mark = uuid.uuid4().hex
    assert client.exec(sid, f"echo {mark} > /etc/mark; kill -9 1; echo alive").stdout == "alive\n"
    holders = _holder_of(mark)
    assert len(holders) == 1, holders
    os.kill(holders[0], 9)
    r = client.exec(sid, "cat /etc/mark")
    assert r.stdout == f"{mark}\n", r
    assert _holder_of(mark) not in ([], holders)  # a new pid 1 holds it


def _jail_servers(service_pid: int) -> list[int]:
    """The service's jail server (``layers/runner.py``): its child ``jail_main.py --serve``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            status = (d / "status").read_text().splitlines()
            ppid = int(next(line for line in status if line.startswith("PPid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        if ppid == service_pid and b"--serve" in argv and any(a.endswith(b"jail_main.py") for a in argv):  # fmt: skip
            found.append(int(d.name))
    return found


def test_a_containers_commands_inherit_no_descriptor_of_the_service(client) -> None:
    """A command forked by the jail server holds its stdio and nothing else: not the server's
    control socket, not another jail's reply socket or pipes (another session runs at once)."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    other, sid = (client.create_session({"environment": env}) for _ in range(2))
    t = threading.Thread(target=lambda: client.exec(other, "sleep 2"))
    t.start()  # a command of the other session runs while this one's is forked
    time.sleep(0.5)
    r = client.exec(sid, "ls /proc/self/fd")
    t.join()
    assert r.exit_code == 0, r
    assert r.stdout.split() == ["0", "1", "2", "3"], r  # 3: ls's own reading of the directory


def _jail_cgroups(svc) -> list[Path]:
    """The service's unnamed jail cgroups (``build-*``) on its pids controller (or the first)."""
    r = httpx.get(f"{svc.url}/healthz", params={"detail": 1}, timeout=30)
    r.raise_for_status()
    where = r.json()["isolation"]["cgroups"]
    if not where:
        pytest.skip("the service runs without cgroups here")
    base = Path((where.get("pids") or next(iter(where.values()))).split(":", 1)[1])
    return sorted(base.glob("build-*"))


def test_container_commands_keep_their_exit_codes_and_leave_no_cgroups(
    client, layers_sandbox
) -> None:
    """A command's exit code is its jail's word as it ends (runner.py's ``done_fd``), before the
    jail's teardown and the server's status; a process it leaves runs on in the container; its
    cgroups are removed off the reply's path and one set is made ahead for the next command —
    after many commands no more than that one is left."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env})
    client.exec(sid, "true")  # this session's limits have their set made ahead from here on
    before = set(_jail_cgroups(layers_sandbox))
    codes = [0, 1, 2, 42, 127, 255]
    assert [client.exec(sid, f"exit {c}").exit_code for c in codes * 4] == codes * 4
    assert client.exec(sid, "kill -9 $$").exit_code == 256 - 9  # a signal's end, as before
    r = client.exec(sid, "sh -c 'sleep 30' >/dev/null 2>&1 & echo $!")
    assert r.exit_code == 0, r
    assert r.stdout.strip().isdigit(), r
    alive = client.exec(sid, f"kill -0 {r.stdout.strip()} && echo alive")
    assert alive.stdout.strip() == "alive", alive  # (linger: docker exec's semantics)
    deadline = time.monotonic() + 5
    while len(new := set(_jail_cgroups(layers_sandbox)) - before) > 1:
        assert time.monotonic() < deadline, f"jail cgroups left behind: {sorted(new)}"
        time.sleep(0.05)


def test_a_killed_jail_server_is_started_again_and_so_are_its_containers(
    client, layers_sandbox
) -> None:
    """Every jail is a fork of the service's jail server and dies with it: a killed server is
    started again by the next jail, and a container it took down is started again over its own
    writable layer at its next command (what the session wrote survives, as a restart keeps)."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env})
    mark = uuid.uuid4().hex
    assert client.exec(sid, f"echo {mark} > /etc/mark").exit_code == 0
    servers, holders = _jail_servers(layers_sandbox.pid), _holder_of(mark)
    assert len(servers) == 1, servers
    assert len(holders) == 1, holders
    os.kill(servers[0], 9)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{holders[0]}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{holders[0]}").exists()  # pid 1 died with the server
    r = client.exec(sid, "cat /etc/mark")
    assert r.stdout == f"{mark}\n", r
    again = _jail_servers(layers_sandbox.pid)
    assert len(again) == 1, again
    assert again != servers
    assert _holder_of(mark) not in ([], holders)


def _spares(server: int) -> list[int]:
    """The jail server's children still in its session (``os.getsid``): its spare."""
    found = []
    for c in _children(server):
        with contextlib.suppress(ProcessLookupError):
            if os.getsid(c) == os.getsid(server):
                found.append(c)
    return found


def _one_spare(server: int) -> list[int]:
    """The spare, once the server has exactly one (a jail forked now has taken the last)."""
    deadline = time.monotonic() + 10
    while len(spares := _spares(server)) != 1:
        assert time.monotonic() < deadline, spares
        time.sleep(0.02)
    return spares


def _children(pid: int) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        try:
            status = (d / "status").read_text().splitlines() if d.name.isdigit() else []
        except OSError:
            continue
        if any(line.split() == ["PPid:", str(pid)] for line in status):
            found.append(int(d.name))
    return found


def test_a_killed_spare_of_the_jail_server_is_replaced(client, layers_sandbox) -> None:
    """The jail server forks each jail before its request comes (a *spare*, in the server's own
    session until it serves one): a spare killed while it waits costs the next command
    nothing but the fork it saved, and a new spare waits after it."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env})
    (server,) = _jail_servers(layers_sandbox.pid)
    spares = _one_spare(server)  # (the warm pool's containers take spares too, meanwhile)
    os.kill(spares[0], 9)
    assert client.exec(sid, "echo ran").stdout == "ran\n"
    again = _one_spare(server)
    assert again != spares


# the agent's terminal keeps renaming /tests away (a verifier's mountpoint on the shared image
# goes with it) and putting a link to a test.sh of its own there
SWAPPER = (
    "mkdir -p /fake && echo 'echo 1 > /logs/verifier/reward.txt' > /fake/test.sh && "
    "(while :; do mv -T /tests /gone; rm -rf /gone; ln -sfn /fake /tests; rm -f /tests; "
    "mkdir -p /tests; done) > /dev/null 2>&1 &"
)


def test_a_live_verifier_runs_its_own_tests_while_the_agent_swaps_them(client) -> None:
    """/tests and /logs of a live verifier are directories of a root of its own, not paths of
    the shared image: an agent loop renaming /tests away and linking a test.sh that writes 1
    in its place (racing the verifier, round after round) never runs instead of the task's
    test.sh, which writes 0."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env})
    for _ in range(3):  # three loops: entries vanish while the verifier's root is assembled
        client.tty(sid, [SWAPPER, "<Enter>"], wait_s=0.2)
    swapping = client.exec(sid, "sleep 0.3; ls /fake")
    assert "test.sh" in swapping.stdout, swapping
    script = {"files": {"test.sh": "echo ours; echo 0 > /logs/verifier/reward.txt\n"},
              "command": "bash /tests/test.sh"}  # fmt: skip
    for _ in range(60):
        r = client.finish(sid, {"script": script, "timeout_s": 30})
        assert r.verdict == "failed", (r.detail, r)
        assert r.reward == 0.0, r
        assert r.stdout == "ours\n", r


def test_a_live_verifier_the_agent_crowds_out_of_mounts_is_a_verdict(client) -> None:
    """A live verifier binds each top-level entry of the container: an agent that makes ~10^5
    of them (or as many mounts) takes its view past the kernel's fs.mount-max. That is the
    agent's doing: a ``failed`` verdict naming it, never ``infra_error`` (which the trainer
    masks, so the agent would escape its zero)."""
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env})
    crowd = client.exec(sid, "cd / && seq 110000 | sed s,^,/d, | xargs mkdir 2>/dev/null; ls / | wc -l",
                        timeout_s=120)  # fmt: skip
    assert int(crowd.stdout) > 90_000, crowd
    script = {"files": {"test.sh": "true\n"}, "command": "echo 1 > /logs/verifier/reward.txt"}
    r = client.finish(sid, {"script": script, "timeout_s": 60})
    assert r.verdict == "failed", (r.detail, r)
    assert "mount-max" in r.detail, r


NSS_MODULE = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    int fd = open("/logs/verifier/reward.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { write(fd, "1\n", 2); close(fd); }
    _exit(0);
}
"""


def test_a_verifiers_jail_reads_the_users_as_files_not_through_nss(client, tmp_path) -> None:
    """The verifier's pid 1 looks up the user (HOME, groups) in the root it pivoted into — the
    agent's, live. Through NSS that would load the library the root's /etc/nsswitch.conf names
    into our process before the step: an agent's module planting reward 1 and exiting 0 passed
    a verifier that writes 0. The files are read as files (as runc does); the step itself
    (``/bin/sh``, which does no user lookup) runs and writes its 0."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is not installed: apt-get install -y gcc")
    (tmp_path / "planted.c").write_text(NSS_MODULE)
    so = tmp_path / "libnss_planted.so.2"
    subprocess.run(["gcc", "-shared", "-fPIC", "-nostartfiles", "-o", so, tmp_path / "planted.c"],
                   check=True)  # fmt: skip
    env = _env([{"base": BASE, "steps": [{"workdir": "/app"}]}])
    sid = client.create_session({"environment": env})
    b64 = base64.b64encode(so.read_bytes()).decode()
    plant = client.exec(
        sid, f"echo {b64} | base64 -d > /usr/lib/x86_64-linux-gnu/libnss_planted.so.2 && "
        "sed -i 's/^passwd:.*/passwd: planted files/; s/^group:.*/group: planted files/' "
        "/etc/nsswitch.conf && getent passwd root; echo getent $?",
    )  # fmt: skip
    assert plant.stdout == "getent 0\n", plant  # no root line: the module ran (and exited 0)
    script = {"files": {"test.sh": "true\n"}, "command": "echo 0 > /logs/verifier/reward.txt"}
    for live in (True, False):
        r = client.finish(sid, {"script": script, "timeout_s": 60, "live": live})
        assert r.verdict == "failed", (live, r)
        assert r.reward == 0.0, (live, r)


def test_the_last_service_on_a_shared_cache_unmounts_its_images(tmp_path: Path) -> None:
    """Two services on one ``--env-cache-dir``: the first to stop leaves the images mounted
    (the other's sessions run on them); the last one unmounts them."""
    a, b = Store(tmp_path / "store"), Store(tmp_path / "store")
    image = tmp_path / "store" / "mnt" / ("e" * 32)
    image.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(image)], check=True)
    try:
        assert a.unmount_all() == []
        assert os.path.ismount(image)
        assert b.unmount_all() == []
        assert not os.path.ismount(image)
        assert a.unmount_all() == []  # once only
    finally:
        subprocess.run(["umount", "-l", str(image)], capture_output=True)
