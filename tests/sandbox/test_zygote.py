"""The threat rows again, from inside a runner process the zygote forked into the jail.

``test_threats.py`` attacks mostly through ``test_command`` (a shell bwrap starts); runner
modes (``plain``, ``split``, ``pytest``, ``calls``) run in a fork of the pre-started zygote that
entered the jail's namespaces (``zygote_main.py``). Here the attack code is a held-out test
run by the ``plain`` runner, so it executes in exactly that process. Real service, real bwrap,
real cgroups.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.models import Limits, Task, Verdict


@pytest.fixture(scope="module", autouse=True)
def _zygote_on(sandbox: SandboxClient) -> None:
    iso = sandbox.health()["isolation"]
    if not iso.get("runner_zygote"):
        pytest.skip(f"the service runs no runner zygote here (not root?): {iso}")


def in_runner(body: str, timeout_s: float = 20, **limits: int) -> Task:
    """A task whose held-out test runs ``body`` inside the zygote-forked runner process."""
    code = "import os, sys, signal, socket, subprocess, time\n\ndef test_it():\n" + "".join(
        f"    {line}\n" for line in body.splitlines()
    )
    return Task(
        test_files={"test_it.py": code},
        tests={"fail_to_pass": ["test_it.py::test_it"], "runner": "plain"},
        timeout_s=timeout_s,
        limits=Limits(**limits),
    )


def assert_passes(sandbox: SandboxClient, body: str) -> None:
    r = sandbox.run_task(in_runner(body))
    assert r.verdict == Verdict.passed, (r.stdout, r.stderr)


def test_task_process_has_no_privilege_left(sandbox: SandboxClient) -> None:
    body = (
        "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
        "for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'):\n"
        "    assert int(st[k], 16) == 0, (k, st[k])\n"
        "assert st['NoNewPrivs'].strip() == '1'\n"
        "assert os.getuid() != 0 and os.getgid() != 0 and os.getgroups() == []\n"
        "assert os.getsid(0) == os.getpid()  # own session: no TIOCSTI into anyone's tty\n"
    )
    assert_passes(sandbox, body)


def test_no_descriptor_or_process_of_the_service_is_reachable(sandbox: SandboxClient) -> None:
    body = (
        "fds = {}\n"
        "for f in os.listdir('/proc/self/fd'):\n"
        "    try:\n        fds[int(f)] = os.readlink(f'/proc/self/fd/{f}')\n"
        "    except FileNotFoundError:\n        pass  # the listing's own, closed by now\n"
        "assert not [t for t in fds.values() if t.startswith('socket:')], fds  # zygote control\n"
        "assert len(fds) <= 4, fds  # stdio and the report pipe\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "assert pids[0] == 1 and os.getpid() in pids and len(pids) <= 3, pids\n"
        "assert open('/proc/1/cmdline', 'rb').read().startswith(b'bwrap')  # the jail's init\n"
        "assert os.getppid() == 0  # the keeper lives outside this pid namespace\n"
    )
    assert_passes(sandbox, body)


def test_environment_is_the_tasks_alone(sandbox: SandboxClient) -> None:
    body = (
        "keys = set(os.environ)\n"
        "assert {'PATH', 'HOME', 'TMPDIR', 'LANG', 'DOCKYARD_SITE'} <= keys, keys\n"
        "assert not [k for k in keys if 'TOKEN' in k.upper()], keys\n"
        "assert os.getcwd() == '/workspace'\n"
        "host_copy = sys.modules['runner'].__file__  # where the zygote imported it from\n"
        "assert not os.path.exists(host_copy) or host_copy.startswith('/opt/dockyard/'), host_copy\n"
    )
    assert_passes(sandbox, body)


def test_each_task_gets_a_pristine_fork(sandbox: SandboxClient) -> None:
    poison = (
        "import json, pytest\n"
        "pytest.POISONED = True\n"
        "json.dumps = lambda *a, **k: 'forged'\n"
        "sys.modules['runner'].emit_test = lambda *a: None\n"
    )
    check = (
        "import json, pytest\nassert not hasattr(pytest, 'POISONED')\nassert json.dumps(1) == '1'\n"
    )
    poisoned = sandbox.run_task(in_runner(poison))
    assert poisoned.verdict == Verdict.failed, poisoned  # it silenced its own report: missing
    r = sandbox.run_task(in_runner(check))
    assert r.verdict == Verdict.passed, (r.stdout, r.stderr)


def test_fork_bomb_memory_bomb_and_signal_proof_loop(sandbox: SandboxClient) -> None:
    bomb = sandbox.run_task(
        in_runner(
            "while True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)",
            timeout_s=30,
            pids=32,
        )
    )
    assert bomb.verdict == Verdict.resource_limit, bomb
    mem = sandbox.run_task(in_runner("x = bytearray(2 << 30)", memory_mb=96))
    assert mem.verdict == Verdict.oom, mem
    t0 = time.monotonic()
    loop = sandbox.run_task(
        in_runner(
            "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
            "    signal.signal(s, signal.SIG_IGN)\n"
            "while True:\n    pass",
            timeout_s=2,
        )
    )
    assert loop.verdict == Verdict.timeout, loop
    assert time.monotonic() - t0 < 15
    assert sandbox.run_task(in_runner("assert True")).verdict == Verdict.passed


def test_daemon_network_and_kill_everything(
    sandbox: SandboxClient, sandbox_service: ServiceHandle
) -> None:
    t0 = time.monotonic()
    daemon = sandbox.run_task(
        in_runner("subprocess.Popen(['sh', '-c', 'sleep 1000'], start_new_session=True)")
    )
    assert daemon.verdict == Verdict.passed, daemon
    assert time.monotonic() - t0 < 10  # the jail (and the daemon) ended with the test
    assert_passes(
        sandbox,
        "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
        "except OSError:\n    pass\nelse:\n    raise AssertionError('network reachable')\n"
        "assert sorted(n for _, n in socket.if_nameindex()) == ['lo']\n",
    )
    bystander = sandbox.submit(in_runner("time.sleep(2)", timeout_s=30))
    killer = sandbox.run_task(in_runner("os.kill(-1, signal.SIGKILL)\ntime.sleep(1)"))
    assert killer.verdict in (Verdict.passed, Verdict.failed), killer
    assert sandbox.result(bystander, timeout_s=60).verdict == Verdict.passed
    assert sandbox_service.proc.poll() is None
    assert sandbox.run_task(in_runner("assert True")).verdict == Verdict.passed  # zygote alive


def test_without_the_zygote_the_same_checks_hold() -> None:
    """``--no-zygote``: every runner command starts a fresh interpreter in the jail instead."""
    with start_service(workers=1, extra_args=["--no-zygote"]) as svc, svc.client() as c:
        assert c.health()["isolation"]["runner_zygote"] is False
        assert_passes(
            c,
            "st = open('/proc/self/status').read()\n"
            "assert 'CapEff:\\t0000000000000000' in st and 'NoNewPrivs:\\t1' in st, st\n"
            "assert sys.modules['__main__'].__file__ == '/opt/dockyard/runner.py'  # exec'd\n",
        )


def test_a_dead_zygote_is_replaced(sandbox: SandboxClient, sandbox_service: ServiceHandle) -> None:
    def zygotes() -> list[int]:
        out = []
        for p in os.listdir("/proc"):
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{p}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if b"zygote_main.py" in cmd and ppid == sandbox_service.pid:
                out.append(int(p))
        return out

    assert sandbox.run_task(in_runner("assert True")).verdict == Verdict.passed
    (zpid,) = zygotes()
    os.kill(zpid, signal.SIGKILL)
    time.sleep(0.2)
    r = sandbox.run_task(in_runner("assert True"))
    assert r.verdict == Verdict.passed, r
    (new,) = zygotes()
    assert new != zpid


def test_thousands_of_test_ids_still_run(sandbox: SandboxClient) -> None:
    """A PASS_TO_PASS list too long for one message to the zygote takes the exec path."""
    many = [f"test_it.py::test_it[{i:06d}-{'x' * 40}]" for i in range(3000)]
    task = in_runner("assert True")
    task = task.model_copy(
        update={"tests": task.tests.model_copy(update={"pass_to_pass": many})}  # type: ignore[union-attr]
    )
    r = sandbox.run_task(task)
    assert r.tests["test_it.py::test_it"] == "passed", r.detail
    assert len(r.tests) == 1 + len(many)
    assert r.tests[many[0]] == "failed"  # (the plain runner has no such test to call)
