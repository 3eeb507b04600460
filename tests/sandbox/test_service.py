"""The service's API and failure behaviour: results, cancel, 429, auth, infra_error on a dying
service, graceful drain, sessions, OpenAPI, loopback-only without a token."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from dockyard.sandbox.cli import main as cli_main
from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.models import FinishRequest, SessionCreate, Task, Verdict
from dockyard.sandbox.testing import CALC_TEST_IDS, CALC_TESTS, calc_task, make_tarball

from dockyard.sandbox.testing import CALC_REPO  # isort: skip


def test_one_shot_resolved_and_unresolved(sandbox: SandboxClient) -> None:
    good = sandbox.run_task(calc_task())
    assert good.verdict == Verdict.passed
    assert good.resolved
    assert good.patch_applied
    assert good.tests == {
        "tests/test_calc.py::test_add": "passed",
        "tests/test_calc.py::test_mul": "passed",
    }
    assert good.timings.test_s > 0
    assert good.usage.memory_peak_mb is not None
    bad = sandbox.run_task(calc_task(patch=""))
    assert bad.verdict == Verdict.failed
    assert not bad.resolved
    assert bad.tests["tests/test_calc.py::test_add"] == "failed"
    missing = sandbox.run_task(calc_task(tests={"fail_to_pass": ["tests/test_calc.py::test_nope"]}))
    assert missing.tests["tests/test_calc.py::test_nope"] in ("missing", "error")
    assert missing.verdict == Verdict.failed
    broken = sandbox.run_task(
        calc_task(
            patch="diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -1,2 +1,2 @@\n-no such line\n+x\n"
        )
    )
    assert broken.verdict == Verdict.patch_rejected
    assert "does not apply" in broken.detail


def test_submit_get_result_cancel(sandbox: SandboxClient) -> None:
    tid = sandbox.submit(Task(test_command="sleep 30", timeout_s=60))
    for _ in range(100):
        if sandbox.get(tid).state == "running":
            break
        time.sleep(0.05)
    assert sandbox.cancel(tid) is True
    r = sandbox.result(tid, timeout_s=30)
    assert r.verdict == Verdict.infra_error
    assert "cancel" in r.detail
    assert sandbox.get(tid).state == "cancelled"
    done = sandbox.submit(Task(test_command="echo ok"))
    assert sandbox.result(done, timeout_s=30).stdout == "ok\n"
    assert sandbox.cancel(done) is False
    with pytest.raises(SandboxRequestError):
        sandbox.get("nope")
    assert sandbox.result("nope").verdict == Verdict.infra_error  # unknown id: lost, not zero


def test_invalid_task_names_the_field(sandbox_service: ServiceHandle) -> None:
    r = httpx.post(
        f"{sandbox_service.url}/v1/tasks:run", json={"test_command": "true", "timeout_s": -1}
    )
    assert r.status_code == 422
    assert "timeout_s" in r.text
    r = httpx.post(f"{sandbox_service.url}/v1/tasks:run", json={"patch": "x"})
    assert r.status_code == 422
    assert "test_command" in r.text


def test_openapi_health_metrics(sandbox: SandboxClient, sandbox_service: ServiceHandle) -> None:
    spec = httpx.get(f"{sandbox_service.url}/openapi.json").json()
    for path in (
        "/v1/tasks",
        "/v1/tasks:run",
        "/v1/tasks/{task_id}/result",
        "/v1/sessions/{sid}/finish",
        "/healthz",
        "/metrics",
    ):
        assert path in spec["paths"]
    h = sandbox.health()
    assert h["status"] == "ok"
    assert h["isolation"]["cgroups"]
    m = sandbox.metrics()
    assert "dockyard_sandbox_queue_depth" in m
    assert 'dockyard_sandbox_verdicts_total{verdict="passed"}' in m
    assert "dockyard_sandbox_task_seconds_bucket" in m


def test_queue_full_gives_429_with_retry_after() -> None:
    with start_service(workers=1, queue_size=1) as svc:
        url = svc.url
        slow = {"test_command": "sleep 3", "timeout_s": 30}
        a = httpx.post(f"{url}/v1/tasks", json=slow)
        b = httpx.post(f"{url}/v1/tasks", json=slow)
        c = httpx.post(f"{url}/v1/tasks", json=slow)
        assert a.status_code == 202
        assert b.status_code == 202
        assert c.status_code == 429
        assert int(c.headers["retry-after"]) >= 1
        # the client waits out 429s by itself
        with svc.client(max_wait_s=60) as client:
            assert client.run_task(Task(test_command="echo late")).stdout == "late\n"


def test_client_reports_infra_error_when_service_dies_mid_task() -> None:
    svc = start_service(workers=1)
    try:
        with svc.client() as c:
            tid = c.submit(Task(test_command="sleep 20", timeout_s=60))
            out: dict[str, object] = {}
            t = threading.Thread(
                target=lambda: out.update(
                    run=c.run_task(Task(test_command="sleep 20", timeout_s=60))
                )
            )
            t.start()
            time.sleep(1.0)
            svc.kill()
            t.join(30)
            assert out["run"].verdict == Verdict.infra_error  # type: ignore[attr-defined]
            assert c.result(tid, timeout_s=10).verdict == Verdict.infra_error

            async def via_async() -> Verdict:
                async with svc.async_client() as ac:
                    return (await ac.run_task(Task(test_command="true"))).verdict

            assert asyncio.run(via_async()) == Verdict.infra_error
    finally:
        svc.stop()


def test_graceful_drain_finishes_running_tasks() -> None:
    svc = start_service(workers=1)
    with svc.client() as c:
        out: dict[str, object] = {}
        t = threading.Thread(
            target=lambda: out.update(
                r=c.run_task(Task(test_command="sleep 2; echo drained", timeout_s=30))
            )
        )
        t.start()
        time.sleep(0.8)
        rc = svc.stop(timeout=60)
        t.join(30)
    assert out["r"].verdict == Verdict.passed
    assert out["r"].stdout == "drained\n"
    assert rc in (0, -15)  # uvicorn re-raises SIGTERM after its graceful shutdown


def test_auth_and_loopback_only_without_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "refusing" in capsys.readouterr().err
    with start_service(workers=1, generate_token=True) as svc:
        assert httpx.get(f"{svc.url}/healthz").status_code == 200
        assert httpx.get(f"{svc.url}/metrics").status_code == 401
        bad = httpx.post(
            f"{svc.url}/v1/tasks:run",
            json={"test_command": "true"},
            headers={"authorization": "Bearer wrong"},
        )
        assert bad.status_code == 401
        with svc.client() as c:
            assert c.run_task(Task(test_command="true")).verdict == Verdict.passed


def test_serve_refuses_bad_options_before_listening(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each refusal names its flag and exits 2 before a port is bound."""
    empty = tmp_path / "token"
    empty.write_text("\n")
    cases = [
        (["--token-file", str(empty)], f"--token-file {empty} is empty"),
        (["--registry", "http://mirror.example/"], "--registry 'http://mirror.example/': expected a host name"),
        (["--repo-root", str(tmp_path / "absent")], f"--repo-root {tmp_path / 'absent'}: no such directory"),
    ]  # fmt: skip
    for extra, message in cases:
        assert cli_main(["serve", "--port", "0", "--work-dir", str(tmp_path / "w"), *extra]) == 2
        assert f"dockyard-sandbox: {message}" in capsys.readouterr().err


def test_session_exec_files_finish_in_a_fresh_sandbox(sandbox: SandboxClient) -> None:
    sid = sandbox.create_session(SessionCreate(repo={"tarball": make_tarball(CALC_REPO)}, ttl_s=60))
    r = sandbox.exec(sid, "cat calc/__init__.py && id -u && git log --oneline | wc -l")
    assert r.exit_code == 0
    assert "a - b" in r.stdout
    assert sandbox.exec(sid, "sed -i 's/a - b/a + b/' calc/__init__.py").exit_code == 0
    sandbox.put_file(sid, "notes/plan.txt", "fix add\n")
    assert sandbox.get_file(sid, "notes/plan.txt") == b"fix add\n"
    assert sandbox.exec(sid, "cat plan.txt", cwd="notes").stdout == "fix add\n"
    for bad in ("../x", "/etc/passwd", ".git/config"):
        with pytest.raises(SandboxRequestError):
            sandbox.get_file(sid, bad)
    # the agent plants a conftest that passes everything and a background process: neither counts
    sandbox.put_file(
        sid,
        "conftest.py",
        "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    o = yield\n    o.get_result().outcome = 'passed'\n",
    )
    t = sandbox.exec(sid, "sleep 100 &", timeout_s=5)
    assert t.exit_code == 0
    res = sandbox.finish(sid, FinishRequest(test_files=CALC_TESTS, tests=CALC_TEST_IDS))
    assert res.verdict == Verdict.passed, res
    assert res.resolved
    assert "conftest.py" in res.tamper_paths
    # a symlink out of the tree is refused at finish
    sandbox.exec(sid, "ln -s /etc/passwd leak")
    with pytest.raises(SandboxRequestError):
        sandbox.get_file(sid, "leak")
    assert (
        sandbox.finish(sid, FinishRequest(test_files=CALC_TESTS, tests=CALC_TEST_IDS)).verdict
        == Verdict.patch_rejected
    )
    to = sandbox.exec(sid, "while :; do :; done", timeout_s=1)
    assert to.timed_out
    assert to.verdict == Verdict.timeout
    sandbox.delete_session(sid)
    with pytest.raises(SandboxRequestError):
        sandbox.exec(sid, "true")


def test_idle_sessions_are_reaped(sandbox: SandboxClient) -> None:
    sid = sandbox.create_session(SessionCreate(ttl_s=0.5))
    time.sleep(2.5)
    with pytest.raises(SandboxRequestError):
        sandbox.exec(sid, "true")


def test_repo_cache_hits(sandbox: SandboxClient) -> None:
    before = sandbox.metrics()

    def hits(m: str) -> float:
        return float(
            next(
                line.split()[1]
                for line in m.splitlines()
                if line.startswith("dockyard_sandbox_cache_hits_total ")
            )
        )

    # One tarball, sent three times: a tarball made anew can differ by its timestamps.
    tarball = make_tarball({"x.txt": "same"})
    for _ in range(3):
        assert (
            sandbox.run_task(Task(repo={"tarball": tarball}, test_command="cat x.txt")).stdout
            == "same"
        )
    assert hits(sandbox.metrics()) >= hits(before) + 2


def test_idle_connections_outlive_the_clients_pool_expiry(sandbox_service: ServiceHandle) -> None:
    """The service keeps an idle keep-alive connection open past httpx's 5 s pool expiry, so it
    never closes one just as a client sends on it (uvicorn's own default is 5 s)."""
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(sandbox_service.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().read()
        time.sleep(6.0)
        conn.request("GET", "/healthz")  # the same socket: it fails if the service closed it
        assert conn.getresponse().status == 200
    finally:
        conn.close()
