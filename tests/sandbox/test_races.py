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
host, n = sys.argv[1], 0
open("swapping", "w").close()
while True:
    libc.renameat2(-100, b"d", -100, b"l", 2)  # AT_FDCWD, RENAME_EXCHANGE
    n += 1
    if n % 256:
        continue
    # put_file replaces a parent that is a link by a new directory, and the real d can be what
    # it removes (the swap brought it back meanwhile): put the link and d/f back
    try:
        if not (os.path.islink("d") or os.path.islink("l")):
            os.rename("l", f"aside{n}")
            os.symlink(host, "l")
        real = "l" if os.path.islink("d") else "d"
        if not os.path.exists(f"{real}/f"):  # whole or not at all: a read never sees it empty
            with open(f"{real}/.f", "w") as f:
                f.write("inside\n")
            os.rename(f"{real}/.f", f"{real}/f")
    except OSError:
        pass
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
    sandbox.tty(sid, [f"ln -s {host} l && python3 swap.py {host} &", "<Enter>"], wait_s=0.5)
    for _ in range(100):
        with contextlib.suppress(SandboxRequestError):
            sandbox.get_file(sid, "swapping")
            return sid
        time.sleep(0.1)
    pytest.fail("the swapper did not start in the session's terminal")


def _both_ways(seen: dict[str, int]) -> bool:
    """The walk met the link at ``d`` (refused) and a real directory there (read or missing)."""
    return seen.get("refused", 0) > 0 and seen.get("inside\n", 0) + seen.get("missing", 0) > 0


def test_session_file_calls_never_reach_the_host(sandbox: SandboxClient, host_dir: Path) -> None:
    sid = _swapping_session(sandbox, host_dir)
    try:
        seen: dict[str, int] = {}
        # 400 rounds, and on until the walk has met both a link and a real directory at ``d``
        # (a CI run under load once saw 400 refusals and no read), at most 60 s. A refused walk
        # is 422; a 404 also went through a real directory (one put_file made in place of the
        # link, or the swapper had not yet put ``f`` back). The verdict is the host's bytes
        # never showing, which no round may break.
        deadline = time.monotonic() + 60
        i = 0
        while i < 400 or (not _both_ways(seen) and time.monotonic() < deadline):
            i += 1
            try:
                got = sandbox.get_file(sid, "d/f").decode(errors="replace")
            except SandboxRequestError as e:
                got = {422: "refused", 404: "missing"}.get(e.status, f"status {e.status}: {e}")
            seen[got] = seen.get(got, 0) + 1
            with contextlib.suppress(SandboxRequestError):
                sandbox.put_file(sid, f"d/planted{i % 3}", "x")
            with contextlib.suppress(SandboxRequestError):
                sandbox.put_file(sid, "d/sub", "replaces whatever d/sub is")
        assert set(seen) <= {"inside\n", "refused", "missing"}, seen  # never the host's bytes
        assert _both_ways(seen), seen
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
