"""Threats 21 and 24: what a task's own content can cause is a verdict (or a 4xx for a request
that cannot be honoured), never ``infra_error`` and never a 5xx — the trainer masks
``infra_error``, so a policy that produced one would escape a zero reward.

One table per kind of route: one-shot tasks (``files`` keys, patches), session files, exec,
the terminal, and ``finish`` (the diff and the script verifier), each against the classes that
route can meet: a name past NAME_MAX, a path past PATH_MAX, a tree too deep, too many entries,
a file vanishing mid-read, special files, a cycle of links, a full disk, names that are not
UTF-8. Before the fd-based operations (paths.py / trees.py), a 300-byte name or a 6,000-byte
path in ``files`` was ``infra_error: internal error (OSError 36)``, a 200-level tree made the
script finish a 500, and a file churning during finish an intermittent 500.
"""

from __future__ import annotations

import json

import pytest

from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.envspec import ScriptTests
from dockyard.sandbox.models import FinishRequest, SessionCreate, Task, Verdict

pytestmark = pytest.mark.slow

LONG_NAME = "n" * 300
PAST_PATH_MAX = "/".join(["p" * 200] * 30)  # 6,029 bytes, 30 levels: a legal path
TOO_DEEP = "/".join(["d"] * 200)
DEEP_TREE = "python3 -c \"import os\nfor _ in range(200): os.mkdir('z'); os.chdir('z')\""
BAD_NAME = "python3 -c \"open(b'bad\\xff\\xfe', 'w').close()\""
CHDIR_READ = (  # no tool takes a path past PATH_MAX: step down one name at a time
    "python3 -c \"import os\nfor _ in range(29): os.chdir('p' * 200)\n"
    "assert open('p' * 200).read() == 'x'\""
)
REWARD_0 = ScriptTests(files={"test.sh": "echo 0 > /logs/verifier/reward.txt\n"})


@pytest.mark.parametrize(
    ("task", "verdict"),
    [
        ({"files": {f"a/{LONG_NAME}": "x"}, "test_command": "true"}, Verdict.patch_rejected),
        ({"files": {PAST_PATH_MAX: "x"}, "test_command": CHDIR_READ},
         Verdict.passed),
        ({"files": {TOO_DEEP: "x"}, "test_command": "true"}, Verdict.patch_rejected),
        ({"test_command": "for i in $(seq 400); do : > f$i || exit 1; done",
          "limits": {"inodes": 200}}, Verdict.resource_limit),
        ({"test_command": "head -c 3000000 /dev/zero > big", "limits": {"disk_mb": 2}},
         Verdict.resource_limit),
        ({"patch": f"--- /dev/null\n+++ b/{LONG_NAME}\n@@ -0,0 +1 @@\n+x\n",
          "test_command": "true"}, Verdict.patch_rejected),
        ({"files": {f"{PAST_PATH_MAX}/conftest.py": "x"}, "test_command": "true"},
         Verdict.passed),  # a neutralised name where PATH_MAX ends: checked by fds, reverted
    ],
    ids=["long-name", "past-path-max", "too-deep", "inodes", "disk",
         "patch-long-name", "conftest-past-path-max"],
)  # fmt: skip
def test_one_shot_task_content(sandbox: SandboxClient, task: dict, verdict: Verdict) -> None:
    res = sandbox.run_task(Task.model_validate(task))
    assert res.verdict == verdict, res.detail


@pytest.mark.parametrize(
    ("files", "limits"),
    [({"bad\ud800name": "x"}, {}),  # a lone surrogate: JSON can carry it, no file name can
     ({f"f{i}": "" for i in range(300)}, {"inodes": 200}),
     ({"big": "x" * (3 << 20)}, {"disk_mb": 2})],
    ids=["bad-encoding", "inodes", "disk"],
)  # fmt: skip
def test_one_shot_requests_that_cannot_fit_are_4xx(
    sandbox: SandboxClient, files: dict, limits: dict
) -> None:
    """Sent as raw JSON (the client's own model refuses the last two before sending)."""
    body = json.dumps({"files": files, "test_command": "true", "limits": limits})
    r = sandbox._http.post("/v1/tasks:run", content=body.encode("utf-8", "surrogatepass"),
                          headers={"content-type": "application/json"})  # fmt: skip
    if r.status_code == 200:
        assert r.json()["verdict"] == Verdict.patch_rejected, r.json()
    else:
        assert r.status_code == 422, r.text


def test_session_file_content(sandbox: SandboxClient) -> None:
    sid = sandbox.create_session(SessionCreate(limits={"disk_mb": 2, "inodes": 400}))
    try:
        refused = {
            "long name": lambda: sandbox.put_file(sid, f"a/{LONG_NAME}", "x"),
            "too deep": lambda: sandbox.put_file(sid, TOO_DEEP, "x"),
            "full disk": lambda: sandbox.put_file(sid, "big", b"x" * (3 << 20)),
            "fifo": lambda: sandbox.get_file(sid, "fifo"),
            "link cycle": lambda: sandbox.get_file(sid, "cyc1/x"),
            "a directory": lambda: sandbox.get_file(sid, "dir"),
            "cwd long name": lambda: sandbox.exec(sid, "true", cwd=LONG_NAME),
        }
        r = sandbox.exec(sid, "mkfifo fifo && ln -s cyc2 cyc1 && ln -s cyc1 cyc2 && mkdir dir")
        assert r.exit_code == 0, r
        for what, call in refused.items():
            with pytest.raises(SandboxRequestError) as e:
                call()
            assert 400 <= e.value.status < 500, (what, e.value)
        sandbox.put_file(sid, PAST_PATH_MAX, "deep")
        assert sandbox.get_file(sid, PAST_PATH_MAX) == b"deep"
        r = sandbox.exec(sid, "for i in $(seq 1000); do : > m$i || exit 1; done")
        assert r.verdict == Verdict.resource_limit, r  # out of inodes
    finally:
        sandbox.delete_session(sid)


@pytest.mark.parametrize(
    ("made_by", "command", "diff_verdict", "script_verdict"),
    [
        ("exec", DEEP_TREE, Verdict.resource_limit, Verdict.resource_limit),
        ("tty", DEEP_TREE, Verdict.resource_limit, Verdict.resource_limit),
        ("exec", BAD_NAME, Verdict.patch_rejected, Verdict.failed),  # copied as the same bytes
        ("tty", "mkfifo p; ln -s c2 c1; ln -s c1 c2", Verdict.patch_rejected, Verdict.failed),
        ("exec", "mkdir -p " + PAST_PATH_MAX[:3000] + " && touch x", Verdict.failed,
         Verdict.failed),  # a legal tree: the diff applies, the test command fails
    ],
    ids=["deep-exec", "deep-tty", "bad-name", "special-and-cycle", "long-paths"],
)  # fmt: skip
def test_finish_on_hostile_trees(
    sandbox: SandboxClient, made_by: str, command: str, diff_verdict: Verdict,
    script_verdict: Verdict,
) -> None:  # fmt: skip
    sid = sandbox.create_session(SessionCreate())
    try:
        if made_by == "exec":
            assert sandbox.exec(sid, command).exit_code == 0
        else:
            sandbox.tty(sid, [command + " && touch made", "<Enter>"], wait_s=0.5)
            for _ in range(50):
                if sandbox.exec(sid, "test -e made").exit_code == 0:
                    break
        res = sandbox.finish(sid, FinishRequest(test_command="false"))
        assert res.verdict == diff_verdict, res.detail
        res = sandbox.finish(sid, FinishRequest(script=REWARD_0))
        assert res.verdict == script_verdict, res.detail
    finally:
        sandbox.delete_session(sid)


def test_finish_while_the_terminal_churns_files(sandbox: SandboxClient) -> None:
    """A terminal that keeps creating and removing files and directories during finish: the
    tree is frozen while it is read, so every finish is a verdict (it was an intermittent 500)."""
    sid = sandbox.create_session(SessionCreate())
    churn = "while :; do mkdir -p t/u; : > t/u/v; : > w; rm -rf t w; done &"
    try:
        sandbox.tty(sid, [churn, "<Enter>"], wait_s=0.3)
        for _ in range(10):
            assert sandbox.finish(sid, FinishRequest(test_command="true")).verdict in (
                Verdict.passed, Verdict.failed)  # fmt: skip
            assert sandbox.finish(sid, FinishRequest(script=REWARD_0)).verdict == Verdict.failed
    finally:
        sandbox.delete_session(sid)


@pytest.mark.parametrize(
    ("step", "created"),
    [
        (DEEP_TREE, False),  # past the 128-level walk bound: 422 provision_failed, the reason
        ("mkfifo p && ln -s c2 c1 && ln -s c1 c2", True),  # the FIFO left out (logged)
        (BAD_NAME, True),
        ("python3 -c \"import os\nfor _ in range(30): os.mkdir('p' * 200); os.chdir('p' * 200)\n"
         "open('x', 'w').close()\"", True),  # a path past PATH_MAX: copied by fds
    ],
    ids=["deep", "special-and-cycle", "bad-name", "past-path-max"],
)  # fmt: skip
def test_build_step_content(sandbox: SandboxClient, step: str, created: bool) -> None:
    """A provisioning step's own output (the prefix builder copies it by fds): a session or a
    422 naming the reason — never a 5xx, never a host path in the message (it was both for a
    path past PATH_MAX, and host paths for a FIFO)."""
    from dockyard.sandbox.envspec import EnvSpec

    spec = EnvSpec.model_validate({"steps": [{"run": step}]})
    if not created:
        with pytest.raises(SandboxRequestError) as e:
            sandbox.create_session(SessionCreate(environment=spec))
        detail = str(e.value.detail)
        assert e.value.status == 422
        assert "deeper than 128" in detail
        assert "/work/" not in detail
        assert "/tmp/" not in detail
        return
    sid = sandbox.create_session(SessionCreate(environment=spec))
    try:
        assert sandbox.exec(sid, "true").exit_code == 0
    finally:
        sandbox.delete_session(sid)
