"""Threat 23, through the real service: an agent process left running in the session's terminal
swaps a workspace directory for a symlink to a host directory, in a loop, while the service
reads, writes, lists and copies workspace paths for the session's own calls.

The host directory is root-only (0700, a 0600 file and a subdirectory): what a policy would aim
at. Against the previous service (path checks, then open by name, ``cp -a`` for the script
verifier) the first get_file loop returned the host file's bytes (see test_confined.py for the
count on the same swap), and a put_file at ``d/sub`` removed the host's ``sub`` tree.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from dockyard.sandbox.client import SandboxClient, SandboxRequestError
from dockyard.sandbox.envspec import ScriptTests
from dockyard.sandbox.models import FinishRequest, SessionCreate, Verdict

pytestmark = pytest.mark.slow

SECRET = "HOST SECRET 7f3a"
SWAP = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
open("swapping", "w").close()
while True:
    libc.renameat2(-100, b"d", -100, b"l", 2)  # AT_FDCWD, RENAME_EXCHANGE
"""


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    (host / "sub").mkdir(parents=True)
    (host / "f").write_text(SECRET)
    (host / "sub" / "keep").write_text(SECRET)
    os.chmod(host / "f", 0o600)
    os.chmod(host, 0o700)
    return host


def _swapping_session(sandbox: SandboxClient, host: Path) -> str:
    """A session whose terminal runs the swapper in the background (it keeps running between
    calls: the pane lives in the terminal's own long-lived jail)."""
    sid = sandbox.create_session(SessionCreate(ttl_s=120))
    sandbox.put_file(sid, "d/f", "inside\n")
    sandbox.put_file(sid, "swap.py", SWAP)
    sandbox.tty(sid, [f"ln -s {host} l && python3 swap.py &", "<Enter>"], wait_s=0.5)
    for _ in range(100):
        with contextlib.suppress(SandboxRequestError):
            sandbox.get_file(sid, "swapping")
            return sid
        time.sleep(0.1)
    pytest.fail("the swapper did not start in the session's terminal")


def test_session_file_calls_never_reach_the_host(sandbox: SandboxClient, host_dir: Path) -> None:
    sid = _swapping_session(sandbox, host_dir)
    try:
        seen: dict[str, int] = {}
        # 400 rounds, and on until the race has gone both ways (a CI run under load once saw
        # 400 refusals and no read: the swapper had the link in place at every walk), at most
        # 60 s; the verdict is the host's bytes never showing, which no round may break
        deadline = time.monotonic() + 60
        i = 0
        while i < 400 or (not {"inside\n", "refused"} <= set(seen) and time.monotonic() < deadline):
            i += 1
            try:
                got = sandbox.get_file(sid, "d/f").decode(errors="replace")
            except SandboxRequestError as e:
                got = "refused" if e.status < 500 else f"server error {e}"  # a link on the way
            seen[got] = seen.get(got, 0) + 1
            with contextlib.suppress(SandboxRequestError):
                sandbox.put_file(sid, f"d/planted{i % 3}", "x")
            with contextlib.suppress(SandboxRequestError):
                sandbox.put_file(sid, "d/sub", "replaces whatever d/sub is")
        assert set(seen) <= {"inside\n", "refused"}, seen  # never the host's bytes, never a 5xx
        assert seen.get("refused", 0) > 0, seen  # the race ran both ways
        assert seen.get("inside\n", 0) > 0, seen
        assert sorted(p.name for p in host_dir.iterdir()) == ["f", "sub"]
        assert (host_dir / "sub" / "keep").read_text() == SECRET
    finally:
        sandbox.delete_session(sid)


def test_finish_copies_and_diffs_a_frozen_tree(sandbox: SandboxClient, host_dir: Path) -> None:
    sid = _swapping_session(sandbox, host_dir)
    try:
        leak = ScriptTests(files={"test.sh": (
            "cd /workspace; ls -la . d l 2>&1; grep -rl 'HOST SECRET' . 2>/dev/null && echo LEAKED"
            "; echo 0 > /logs/verifier/reward.txt\n"
        )})  # fmt: skip
        for _ in range(5):
            res = sandbox.finish(sid, FinishRequest(script=leak))
            assert res.verdict == Verdict.failed, res  # the script ran: reward 0, a verdict
            assert "LEAKED" not in res.stdout, res.stdout
            assert SECRET not in res.stdout
            # the diff finish: a new symlink in the tree is refused, never followed
            res = sandbox.finish(sid, FinishRequest(test_command="true"))
            assert res.verdict == Verdict.patch_rejected, res
            assert "symlink" in res.detail
        # the terminal was thawed: the swapper still runs after finish
        before = sandbox.exec(sid, "stat -c %i d").stdout
        time.sleep(0.2)
        changed = any(sandbox.exec(sid, "stat -c %i d").stdout != before for _ in range(20))
        assert changed, "the terminal's processes were left frozen"
        assert sorted(p.name for p in host_dir.iterdir()) == ["f", "sub"]
    finally:
        sandbox.delete_session(sid)
