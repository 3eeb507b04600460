"""Rows 18-21 of SANDBOX-THREATS.md: the request handling around the jail, attacked as a hostile
client would, against the real service (real bwrap, real cgroups, real HTTP).

18 a request field that reaches a host command; 19 a request naming a host path; 20 oversized
requests and results kept without bound; 21 a task whose own content exhausts its workspace
(a verdict, never ``infra_error``) — and, beside it, each ``infra_error`` the executor still
gives, with the reason it is the service's (or the dataset's) fault and not the policy's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from dockyard.sandbox.client import SandboxClient
from dockyard.sandbox.launch import ServiceHandle, start_service
from dockyard.sandbox.models import Limits, RepoSpec, Task, TestsSpec, Verdict
from dockyard.sandbox.testing import CALC_FIX, CALC_REPO, CALC_TESTS, calc_task, make_tarball

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "a",
    "GIT_AUTHOR_EMAIL": "a@b",
    "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@b",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "PATH": os.environ["PATH"],
}


def _git_repo(path: Path, files: dict[str, str]) -> str:
    """A git repository at ``path`` holding ``files`` in one commit; returns the commit id."""
    path.mkdir(parents=True)
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)

    def git(*a: str) -> str:
        return subprocess.run(
            ["git", *a], cwd=path, env=_GIT_ENV, check=True, capture_output=True, text=True
        ).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "base")
    return git("rev-parse", "HEAD")


def _post(svc: ServiceHandle, body: object, route: str = "/v1/tasks:run") -> httpx.Response:
    return httpx.post(f"{svc.url}{route}", json=body, timeout=60)


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 1024


# -- row 18: no client string becomes an option -----------------------------------------------


def test_row18_request_fields_never_become_options(
    sandbox_service: ServiceHandle, sandbox: SandboxClient, repo_root: Path, tmp_path: Path
) -> None:
    base = _git_repo(repo_root / "row18", CALC_REPO)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    marker = tmp_path / "marker"
    attacks = {
        # `git archive --output=<file>` truncated any host file before
        "repo.commit": {"git": str(repo_root / "row18"), "commit": f"--output={victim}"},
        "repo.git": {"git": f"--upload-pack=touch {marker}", "commit": base},
    }
    for field, repo in attacks.items():
        r = _post(sandbox_service, {"repo": repo, "test_command": "true"})
        assert r.status_code == 422, r.text
        assert field.split(".")[1] in json.dumps(r.json()["detail"]), r.text
        assert "starts with '-'" in r.text
    # transports that run commands or read the host: refused, whatever the scheme list says
    for url in (f"ext::sh -c touch% {marker}", "fd::3", f"file://{victim.parent}"):
        r = _post(sandbox_service, {"repo": {"git": url, "commit": base}, "test_command": "true"})
        assert r.status_code == 422, (url, r.text)
    r = _post(
        sandbox_service,
        {"repo": {"git": "https://example.invalid/x.git", "commit": base}, "test_command": "true"},
    )
    assert r.status_code == 422
    assert "--allow-git-scheme" in r.text
    # test ids and function names reach the runner's command line inside the jail
    bad_tests = [
        {"tests": {"fail_to_pass": ["-p", "evil"]}},
        {"tests": {"fail_to_pass": ["--override-ini=python_files=*"]}},
        {"function_tests": {"module": "os; import x", "function": "f", "cases": [{}]}},
        {"function_tests": {"module": "m", "function": "--f", "cases": [{}]}},
    ]
    for body in bad_tests:
        assert _post(sandbox_service, body).status_code == 422, body
    assert victim.read_text() == "precious\n"
    assert not marker.exists()
    # the same source with a real commit id works: the checks refuse only options
    ok = sandbox.run_task(
        Task(
            repo=RepoSpec(git=str(repo_root / "row18"), commit=base[:12]),
            patch=CALC_FIX,
            test_files=dict(CALC_TESTS),
            tests=TestsSpec(fail_to_pass=["tests/test_calc.py::test_add"]),
        )
    )
    assert ok.verdict == Verdict.passed, ok
    # setup_command runs in the task's jail as the task's uid, not on the host
    host_file = tmp_path / "setup-was-here"
    r = sandbox.run_task(
        Task(
            setup_command=f"id -u > uid.txt; touch {host_file} 2>/dev/null; true",
            test_command="cat uid.txt",
        )
    )
    assert r.verdict == Verdict.passed, r
    assert int(r.stdout) >= 200_000
    assert not host_file.exists()
    # session paths: relative to the workspace, never through '..'
    sid = sandbox.create_session()
    try:
        for route, kw in (("files", {"path": "../../etc/shadow"}), ("files", {"path": "/etc/x"})):
            got = httpx.get(f"{sandbox_service.url}/v1/sessions/{sid}/{route}", params=kw)
            assert got.status_code == 422, got.text
        ex = httpx.post(
            f"{sandbox_service.url}/v1/sessions/{sid}/exec", json={"command": "pwd", "cwd": "../"}
        )
        assert ex.status_code == 422
    finally:
        sandbox.delete_session(sid)


def test_row18_cli_refuses_transports_that_run_commands(tmp_path: Path) -> None:
    for scheme in ("ext", "file"):
        with pytest.raises(RuntimeError, match="--allow-git-scheme"):
            start_service(workers=1, git_schemes=[scheme], start_timeout_s=60).stop()


# -- row 19: host paths only under the operator's roots ---------------------------------------


def test_row19_host_paths_only_under_operator_roots(
    sandbox_service: ServiceHandle, sandbox: SandboxClient, repo_root: Path
) -> None:
    for path in ("/etc", "/root", str(repo_root / ".." / ".."), str(repo_root.parent)):
        r = _post(sandbox_service, {"repo": {"path": path}, "test_command": "cat shadow"})
        assert r.status_code == 422, (path, r.text)
        assert "repo.path" in r.text
    link = repo_root / "to-etc"
    link.symlink_to("/etc")
    r = _post(sandbox_service, {"repo": {"path": str(link)}, "test_command": "cat shadow"})
    assert r.status_code == 422, r.text
    # a server git repository outside the roots: the same refusal
    r = _post(sandbox_service, {"repo": {"git": "/etc", "commit": "HEAD"}, "test_command": "true"})
    assert r.status_code == 422
    # sessions too
    r = _post(sandbox_service, {"repo": {"path": "/etc"}}, route="/v1/sessions")
    assert r.status_code == 422
    # under a root: only what any user of the host could read reaches the task
    proj = repo_root / "row19"
    (proj / "pub").mkdir(parents=True)
    (proj / "pub" / "a.txt").write_text("public\n")
    (proj / "secret.txt").write_text("root only\n")
    os.chmod(proj / "secret.txt", 0o600)
    (proj / "private").mkdir(mode=0o700)
    (proj / "private" / "key").write_text("root only\n")
    os.chmod(proj / "private" / "key", 0o644)  # readable, but its folder is closed
    os.chmod(proj / "private", 0o700)
    r = sandbox.run_task(
        Task(
            repo=RepoSpec(path=str(proj)),
            test_command="find . -path ./.git -prune -o -type f -print | sort; cat pub/a.txt",
        )
    )
    assert r.verdict == Verdict.passed, r
    assert r.stdout.split() == ["./pub/a.txt", "public"], r.stdout
    closed = repo_root / "closed"
    closed.mkdir(mode=0o700)
    (closed / "repo").mkdir()
    os.chmod(closed, 0o700)
    r = _post(sandbox_service, {"repo": {"path": str(closed / "repo")}, "test_command": "true"})
    assert r.status_code == 422
    assert "open to every user" in r.text


def test_row19_no_server_paths_by_default(tmp_path: Path) -> None:
    with start_service(workers=1) as svc:
        r = _post(svc, {"repo": {"path": str(tmp_path)}, "test_command": "true"})
        assert r.status_code == 422
        assert "--repo-root" in r.text


# -- row 20: bounded memory --------------------------------------------------------------------


def _read_response(s: socket.socket) -> str:
    """One whole HTTP response: its head and body may come in two segments (two writes)."""
    data = b""
    while True:
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            lengths = [
                int(line.partition(b":")[2])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ]
            if len(body) >= (lengths[0] if lengths else 0):
                break
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def test_row20_oversized_requests_get_413_before_the_body(sandbox_service: ServiceHandle) -> None:
    host, port = sandbox_service.url.removeprefix("http://").rsplit(":", 1)
    rss0 = _rss_mb(sandbox_service.pid)
    # a declared 100 MB body, none of it sent: answered at once, so nothing was buffered
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/tasks:run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 104857600\r\n\r\n"
        )
        t0 = time.monotonic()
        head = _read_response(s)
        assert time.monotonic() - t0 < 5
    assert head.startswith("HTTP/1.1 413"), head
    assert "--max-request-mb" in head
    # a real 70 MB body from an ordinary client: it reads the 413 (the rest is read and dropped)
    big = {"test_command": "true", "files": {"a": "x" * (70 << 20)}}
    r = httpx.post(f"{sandbox_service.url}/v1/tasks:run", json=big, timeout=120)
    assert r.status_code == 413, r.text
    del big

    # a chunked body with no length: cut off once it passes the cap
    def chunks():
        yield b'{"test_command": "true", "files": {"a": "'
        for _ in range(80):
            yield b"x" * (1 << 20)
        yield b'"}}'

    r = httpx.post(
        f"{sandbox_service.url}/v1/tasks:run",
        content=chunks(),
        headers={"content-type": "application/json"},
        timeout=120,
    )
    assert r.status_code == 413, r.text
    assert _rss_mb(sandbox_service.pid) - rss0 < 40  # no 64 MB body was ever held
    # metadata is echoed with every result: capped
    r = _post(sandbox_service, {"test_command": "true", "metadata": {"m": "x" * (100 << 10)}})
    assert r.status_code == 422
    assert "metadata" in r.text
    assert "dockyard_sandbox_rejected_total" in httpx.get(f"{sandbox_service.url}/metrics").text


def test_row20_results_are_kept_by_count_bytes_and_age() -> None:
    args = ["--keep-results", "3", "--keep-results-mb", "1", "--result-ttl", "4"]
    with start_service(workers=2, extra_args=args) as svc, svc.client() as c:
        ids = [c.submit(Task(test_command=f"echo {i}")) for i in range(5)]
        for tid in ids:  # in order, each waited for: the first two are pushed out by count
            assert c.result(tid, timeout_s=60).verdict == Verdict.passed
        deadline = time.monotonic() + 30
        while httpx.get(f"{svc.url}/v1/tasks/{ids[1]}").status_code != 404:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        gone = httpx.get(f"{svc.url}/v1/tasks/{ids[0]}/result")
        assert gone.status_code == 404
        assert "newest 3 finished results" in gone.text
        assert [httpx.get(f"{svc.url}/v1/tasks/{t}").status_code for t in ids[2:]] == [200] * 3
        # by bytes: two results of 600 KB of output do not both fit in 1 MB
        loud = []
        for _ in range(2):  # one after the other: the second pushes the first out
            loud.append(c.submit(Task(test_command="head -c 600000 /dev/zero | tr '\\0' x")))
            assert len(c.result(loud[-1], timeout_s=60).stdout) == 600_000
        deadline = time.monotonic() + 30
        while httpx.get(f"{svc.url}/v1/tasks/{loud[0]}").status_code != 404:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert httpx.get(f"{svc.url}/v1/tasks/{loud[1]}").status_code == 200
        # by age: nothing is kept past --result-ttl
        time.sleep(5.5)
        assert httpx.get(f"{svc.url}/v1/tasks/{loud[1]}").status_code == 404


# -- row 21: exhaustion is a verdict, never infra_error ----------------------------------------


def _nested(n: int) -> dict[str, str]:
    return {f"d{i}/f.txt": "x" for i in range(n)}  # two inodes each


def test_row21_exhaustion_by_the_tasks_content_is_resource_limit(
    sandbox_service: ServiceHandle, sandbox: SandboxClient
) -> None:
    tiny = {"disk_mb": 1, "inodes": 100}
    # cannot fit by construction: a 422 before anything runs
    r = _post(
        sandbox_service, {"test_command": "true", "files": {"a": "x" * (2 << 20)}, "limits": tiny}
    )
    assert r.status_code == 422
    assert "limits.disk_mb" in r.text
    r = _post(sandbox_service, {"test_command": "true", "files": _nested(120), "limits": tiny})
    assert r.status_code == 422
    assert "limits.inodes" in r.text
    cases = {
        "files, inodes": calc_task(files=_nested(60), limits=Limits(**tiny)),
        "files, space": calc_task(files={"big.bin": "x" * 1_000_000}, limits=Limits(**tiny)),
        "patch, space": calc_task(
            patch="diff --git a/big.txt b/big.txt\nnew file mode 100644\n--- /dev/null\n"
            "+++ b/big.txt\n@@ -0,0 +1,30000 @@\n"
            + "+xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"
            * 30000,
            limits=Limits(**tiny),
        ),
        # the policy's files leave no room for the held-out tests
        "restoring tests": calc_task(
            files={"pad.bin": "x" * 950_000},
            test_files={**CALC_TESTS, "tests/data.txt": "y" * 90_000},
            limits=Limits(**tiny),
        ),
        "running tests": Task(
            test_command="head -c 5000000 /dev/zero > f; true", limits=Limits(**tiny)
        ),
        "the repository": Task(
            repo=RepoSpec(tarball=make_tarball({f"f{i}": "x" for i in range(150)})),
            test_command="true",
            limits=Limits(**tiny),
        ),
    }
    for name, task in cases.items():
        res = sandbox.run_task(task)
        assert res.verdict == Verdict.resource_limit, (name, res.verdict, res.detail)
        assert "limits." in res.detail or "disk" in res.detail, (name, res.detail)
    # sessions: a write with no room left is a 422 naming the limit (the agent is told)
    sid = sandbox.create_session({"limits": tiny})
    try:
        sandbox.put_file(sid, "a.bin", b"x" * 700_000)
        r = httpx.put(
            f"{sandbox_service.url}/v1/sessions/{sid}/files",
            params={"path": "b.bin"},
            content=b"x" * 700_000,
        )
        assert r.status_code == 422, r.text
        assert "limits.disk_mb" in r.text
    finally:
        sandbox.delete_session(sid)


def test_row21_the_policy_cannot_turn_tests_it_blocks_into_infra_error(
    sandbox: SandboxClient,
) -> None:
    """A patch that puts a file where the test patch needs a folder keeps the held-out tests
    from being applied: ``failed`` and flagged, not a masked ``infra_error``."""
    test_patch = (
        "diff --git a/tests/test_calc.py b/tests/test_calc.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_calc.py\n@@ -0,0 +1,2 @@\n"
        "+from calc import add\n+def test_add(): assert add(2, 3) == 5\n"
    )
    block = (
        "diff --git a/tests b/tests\nnew file mode 100644\n--- /dev/null\n+++ b/tests\n"
        "@@ -0,0 +1 @@\n+not a folder\n"
    )
    only_add = TestsSpec(fail_to_pass=["tests/test_calc.py::test_add"])
    r = sandbox.run_task(
        calc_task(patch=block, test_files={}, test_patch=test_patch, tests=only_add)
    )
    assert r.verdict == Verdict.failed, (r.verdict, r.detail)
    assert r.tests_tampered
    assert not r.resolved
    # the honest fix with the same test patch passes: the test patch itself is fine
    ok = sandbox.run_task(calc_task(test_files={}, test_patch=test_patch, tests=only_add))
    assert ok.verdict == Verdict.passed, ok


def test_infra_error_is_left_for_the_service_and_the_dataset(
    sandbox_service: ServiceHandle, sandbox: SandboxClient, repo_root: Path
) -> None:
    """Every ``infra_error`` the executor still gives, and why it is not the policy's doing:
    each happens before the policy's patch is applied or without it."""
    # the dataset's setup command fails: runs before the patch
    r = sandbox.run_task(calc_task(setup_command="echo broken >&2; exit 3"))
    assert r.verdict == Verdict.infra_error
    assert "setup_command failed (exit 3)" in r.detail
    # the dataset's test patch does not apply to its own base tree
    bad = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"
    r = sandbox.run_task(calc_task(patch="", test_files={}, test_patch=bad))
    assert r.verdict == Verdict.infra_error
    assert "does not apply to the base tree" in r.detail
    # a commit the dataset names that its repository does not have
    _git_repo(repo_root / "infra", CALC_REPO)
    r = sandbox.run_task(
        Task(repo=RepoSpec(git=str(repo_root / "infra"), commit="deadbeef"), test_command="true")
    )
    assert r.verdict == Verdict.infra_error
    assert "no commit 'deadbeef'" in r.detail
    # a network the service does not give: a 422 at once, not a result
    r = _post(sandbox_service, {"test_command": "true", "network": True})
    assert r.status_code == 422
    assert "--allow-network" in r.text
    # cancelled, the service dying mid-task or shutting down: tests/sandbox/test_service.py


# -- row 20: flat memory under a soak ----------------------------------------------------------


@pytest.mark.slow
def test_row20_service_memory_is_flat_across_a_soak() -> None:
    """2,400 tasks of mixed sizes (files up to 2 MB, output up to 1 MB, metadata, refused and
    oversized requests) through one service: its RSS after the soak is within 20 MB of what it
    was after a warm-up that filled the result window."""
    from concurrent.futures import ThreadPoolExecutor

    args = ["--keep-results", "200", "--keep-results-mb", "16"]

    def task(i: int) -> Task:
        kind = i % 6
        if kind == 0:
            return Task(test_command="head -c 1000000 /dev/zero | tr '\\0' y", metadata={"i": i})
        if kind == 1:
            return Task(files={"big.bin": "z" * (2 << 20)}, test_command="wc -c < big.bin")
        if kind == 2:
            return Task(
                files={f"m{j}.py": f"x = {j}\n" * 50 for j in range(40)},
                test_command="ls | wc -l",
                metadata={"tag": "x" * 4000},
            )
        return Task(test_command=f"echo {i}")

    with start_service(workers=2, queue_size=64, extra_args=args) as svc:
        url = svc.url

        def one(i: int) -> int:
            with svc.client() as c:
                if i % 50 == 7:  # oversized and refused requests in the mix
                    big = {"test_command": "true", "files": {"a": "x" * (65 << 20)}}
                    return httpx.post(f"{url}/v1/tasks:run", json=big, timeout=120).status_code
                if i % 50 == 9:
                    return _post(
                        svc, {"repo": {"path": "/etc"}, "test_command": "true"}
                    ).status_code
                r = c.run_task(task(i))
                assert r.verdict == Verdict.passed, (i, r.verdict, r.detail)
                return 200

        def batch(lo: int, hi: int) -> list[int]:
            with ThreadPoolExecutor(6) as pool:
                return list(pool.map(one, range(lo, hi)))

        t0 = time.monotonic()
        batch(0, 400)
        warm = _rss_mb(svc.pid)
        codes = batch(400, 2400)
        after = _rss_mb(svc.pid)
        took = time.monotonic() - t0
        assert codes.count(413) == 40
        assert codes.count(422) == 40
        assert after - warm < 20, f"service RSS {warm:.0f} -> {after:.0f} MB over 2,000 tasks"
        print(f"soak: 2,400 tasks in {took:.0f} s; service RSS {warm:.1f} -> {after:.1f} MB")
