"""Provisioned environments, the script verifier and the persistent terminal, against the real
service (bwrap, cgroups). Threat rows: 5/13/18/19 (steps and scripts stay in their jail, client
values never become host paths), 22 (held-out /tests never reach the agent's jails)."""

from __future__ import annotations

import base64
import io
import tarfile
import time
import zipfile

import pytest

from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.envspec import EnvSpec, ScriptTests, check_workdir
from dockyard.sandbox.models import FinishRequest, SessionCreate, Verdict
from dockyard.sandbox.provision import installed_host_packages
from dockyard.sandbox.scriptverify import parse_reward
from dockyard.sandbox.tty import key_args


def tarball(files: dict[str, str | bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, text in files.items():
            data = text.encode() if isinstance(text, str) else text
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tf.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def wheel() -> bytes:
    """A minimal pure-Python wheel (``greetlib``), built here: pip installs it offline."""
    buf = io.BytesIO()
    files = {
        "greetlib.py": "def greet(n):\n    return f'hello {n}'\n",
        "greetlib-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: greetlib\nVersion: 0.1\n",
        "greetlib-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files["greetlib-0.1.dist-info/RECORD"] = (
        "".join(f"{n},,\n" for n in files) + "greetlib-0.1.dist-info/RECORD,,\n"
    )
    with zipfile.ZipFile(buf, "w") as zf:
        for n, t in files.items():
            zf.writestr(n, t)
    return buf.getvalue()


PKG: dict[str, str | bytes] = {"greetlib-0.1-py3-none-any.whl": wheel(), "data.txt": "b\na\nc\n"}


def env_spec(**kw) -> EnvSpec:
    steps = [
        {"files": tarball(PKG)},
        {"run": "pip install --no-index ./greetlib-0.1-py3-none-any.whl && rm greetlib-*.whl"},
        {
            "run": "printf '#!/bin/sh\\necho tool-ok\\n' > /opt/env/bin/mytool && chmod +x /opt/env/bin/mytool"
        },
        {"run": 'sort data.txt > sorted.txt && echo "$GREETING" > greeting.txt'},
    ]
    return EnvSpec.model_validate(
        {"workdir": "/app", "env": {"GREETING": "hi"}, "steps": steps, **kw}
    )


# -- unit: the wire format's refusals, reward parsing, key grammar ---------------------------------
@pytest.mark.parametrize(
    "bad", ["/usr/x", "/tmp", "relative", "/a/../etc", "/", "/opt/env", "/proc/1"]
)
def test_workdir_refuses_jail_paths(bad):
    with pytest.raises(ValueError, match="workdir"):
        check_workdir(bad)


def test_spec_refuses_options_and_bad_names():
    with pytest.raises(ValueError, match="not a Debian package name"):
        EnvSpec(host_packages=["--force-yes"])
    with pytest.raises(ValueError, match="variable name"):
        EnvSpec(env={"A B": "x"})
    with pytest.raises(ValueError, match="exactly one of run / files"):
        EnvSpec.model_validate({"steps": [{"run": "x", "files": ""}]})
    assert EnvSpec().key() != EnvSpec(env={"A": "1"}).key()


def test_parse_reward(tmp_path):
    (tmp_path / "verifier").mkdir()
    assert parse_reward(tmp_path)[1].startswith("no reward file")
    (tmp_path / "verifier" / "reward.json").write_text('{"reward": 0.5, "other": 2}')
    assert parse_reward(tmp_path) == (0.5, "")
    (tmp_path / "verifier" / "reward.txt").write_text("nan")
    assert parse_reward(tmp_path)[0] == 0.0
    assert "finite" in parse_reward(tmp_path)[1]
    (tmp_path / "verifier" / "reward.txt").write_text(" 1\n")
    assert parse_reward(tmp_path) == (1.0, "")
    (tmp_path / "verifier" / "reward.txt").write_text("PASSED")
    assert "malformed" in parse_reward(tmp_path)[1]


def test_key_grammar():
    assert key_args(["ls -la", "<Enter>", "<C-c>", "<rm -rf>", "-t"]) == [
        "t:ls -la", "k:Enter", "k:C-c", "t:<rm -rf>", "t:-t",
    ]  # fmt: skip


def test_host_packages_read_from_dpkg():
    assert "bash" in installed_host_packages()


# -- the service ------------------------------------------------------------------------------------
def test_environment_session_script_and_tty(sandbox: SandboxClient):
    spec = env_spec()
    t0 = time.monotonic()
    sid = sandbox.create_session(SessionCreate(environment=spec))
    first = time.monotonic() - t0
    try:
        r = sandbox.exec(sid, "pwd; cat sorted.txt greeting.txt; mytool; ls; "
                         "python -c 'import greetlib; print(greetlib.greet(1))'; ls /tests")  # fmt: skip
        assert r.stdout.split() == ["/app", "a", "b", "c", "hi", "tool-ok", "data.txt",
                                    "greeting.txt", "sorted.txt", "hello", "1"], r  # fmt: skip
        assert "No such file" in r.stderr  # held-out /tests are not in the agent's jails
        r = sandbox.exec(sid, "touch /opt/env/x; echo > /usr/x; ls /opt/env/bin")
        assert r.stderr.count("Read-only file system") == 2  # the environment is read-only
        assert r.stdout.split() == ["mytool"]  # the build's pip wrappers are gone
        # the persistent terminal: state survives between calls, a TTY is there
        t = sandbox.tty(sid, ["cd /app && X=42 && tty", "<Enter>"], wait_s=0.5)
        assert t.started
        assert "/dev/pts/" in t.screen
        t = sandbox.tty(sid, ["echo got-$X > from_tty.txt", "<Enter>"], wait_s=0.5)
        assert not t.started
        assert sandbox.get_file(sid, "from_tty.txt") == b"got-42\n"
        sandbox.tty(sid, ["python3 -q", "<Enter>", "6*7", "<Enter>"], wait_s=1.0)
        t = sandbox.tty(sid, ["<C-d>"], wait_s=0.5)
        assert "42" in t.screen
        sandbox.put_file(sid, "answer.txt", "42\n")
        test_sh = (
            "#!/bin/bash\ncd /app\n"
            'if [ "$(cat answer.txt)" = 42 ] && [ -f /tests/expected.txt ]; then echo 1 > '
            "/logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
        )
        script = ScriptTests(files={"test.sh": test_sh, "expected.txt": "42\n"})
        res = sandbox.finish(sid, FinishRequest(script=script))
        assert res.verdict == Verdict.passed, res
        assert res.reward == 1.0, res
        no_reward = ScriptTests(files={"test.sh": "exit 0\n"})
        res = sandbox.finish(sid, FinishRequest(script=no_reward))
        assert res.verdict == Verdict.failed
        assert res.reward == 0.0
        assert res.reward_error.startswith("no reward file")
        # a script cannot reach outside: the host's root-only files and network are not there
        escape = ScriptTests(files={"test.sh": (
            "cat /etc/shadow >/dev/null 2>&1 && echo 1 > /logs/verifier/reward.txt; "
            "ls /logs/../ | grep -q dockyard && echo 1 > /logs/verifier/reward.txt; "
            "python -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 2)' "
            "&& echo 1 > /logs/verifier/reward.txt; true\n")})  # fmt: skip
        res = sandbox.finish(sid, FinishRequest(script=escape))
        assert res.reward == 0.0
        assert res.verdict == Verdict.failed
    finally:
        sandbox.delete_session(sid)
    # cached: the second session reuses the build
    t0 = time.monotonic()
    sid = sandbox.create_session(SessionCreate(environment=spec))
    again = time.monotonic() - t0
    sandbox.delete_session(sid)
    assert again < first, (first, again)


def test_tty_dies_with_its_session(sandbox: SandboxClient):
    sid = sandbox.create_session(SessionCreate())
    sandbox.tty(sid, ["sleep 1000 &", "<Enter>"], wait_s=0.2)
    r = sandbox.exec(sid, "ps -e | grep -c sleep")
    assert r.stdout.strip() == "0"  # the pane's processes are in the terminal's own jail
    sandbox.delete_session(sid)
    import subprocess

    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 1000" not in ps


def test_failed_step_is_reported_with_log_never_cached(sandbox: SandboxClient):
    spec = EnvSpec.model_validate({"steps": [{"run": "echo building; echo oops >&2; exit 3"}]})
    with pytest.raises(SandboxRequestError) as e:
        sandbox.create_session(SessionCreate(environment=spec))
    assert e.value.status == 422
    assert "exited 3" in e.value.detail["provision_failed"]
    assert "oops" in e.value.detail["log"]


def test_steps_cannot_write_outside_the_build(sandbox: SandboxClient):
    spec = EnvSpec.model_validate(
        {"steps": [{"run": "touch /usr/local/planted || touch /etc/planted || exit 0; exit 0"},
                   {"run": "ls /root /proc/1/environ 2>&1; cat /proc/1/environ | grep -c TOKEN; true"}]}
    )  # fmt: skip
    sid = sandbox.create_session(SessionCreate(environment=spec))
    sandbox.delete_session(sid)
    import os

    assert not os.path.exists("/usr/local/planted")
    assert not os.path.exists("/etc/planted")


def test_missing_host_package_is_refused(sandbox: SandboxClient):
    """Without --allow-network a package the host lacks cannot be fetched (test_provision_apt.py
    has the service that can): refused at once, with both ways out."""
    spec = EnvSpec(host_packages=["dockyard-no-such-package"])
    with pytest.raises(SandboxRequestError) as e:
        sandbox.create_session(SessionCreate(environment=spec))
    msg = e.value.detail["provision_failed"]
    assert "not installed on the sandbox host" in msg
    assert "apt-get install -y dockyard-no-such-package" in msg
    assert "--allow-network" in msg


def test_environment_with_a_repo_contributes_only_its_prefix(sandbox: SandboxClient):
    """Given a repo too, the repo is the start; the environment's prefix is mounted read-only
    (the per-(repo, version) environments of SWE instances)."""
    spec = EnvSpec.model_validate({"steps": [{"run": "echo tree > t.txt; echo pfx > /opt/env/p"}]})
    sid = sandbox.create_session(
        {"environment": spec.model_dump(), "repo": {"tarball": tarball({"a": "b\n"})}}
    )
    r = sandbox.exec(sid, "cat a /opt/env/p; ls; touch /opt/env/x 2>/dev/null || echo ro")
    sandbox.delete_session(sid)
    assert r.stdout == "b\npfx\na\nro\n", r.stdout  # not the env's t.txt; prefix read-only


def test_operator_cache_dir_keeps_environments(tmp_path):
    """``--env-cache-dir``: built once, root-owned and complete (``ok``), reused by a restarted
    service; the spec is only a hash there (no client value names the directory)."""
    import os

    from dockyard.sandbox.launch import start_service

    cache = tmp_path / "envs"
    spec = EnvSpec.model_validate({"steps": [{"run": "echo built > marker.txt"}]})
    for _ in range(2):
        with (
            start_service(workers=1, extra_args=["--env-cache-dir", str(cache)]) as svc,
            svc.client() as c,
        ):
            sid = c.create_session(SessionCreate(environment=spec))
            assert c.get_file(sid, "marker.txt") == b"built\n"
            c.delete_session(sid)
    entry = cache / spec.key()
    # the environment, and the (here empty) layered-image store beside it (layers/store.py)
    assert sorted(p.name for p in cache.iterdir()) == [spec.key(), "layers"]
    assert (entry / "ok").read_text() == spec.key()
    assert os.stat(entry / "tree" / "marker.txt").st_uid == 0
